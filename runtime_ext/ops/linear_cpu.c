/* A bfloat16 linear layer for a few rows on the CPU: y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]), K a
 * multiple of 32, called by linear_cpu.py (which checks every shape, dtype, stride and the library's
 * presence before it calls; anything else runs torch's F.linear). Two loops:
 * - M <= 4 (and M <= 8 without AMX): AVX512-BF16 dot products, below;
 * - 5 <= M <= AMX_MAX_ROWS with N a multiple of 32, where the CPU has AMX and the kernel lets this
 *   process use it: AMX tiles (linear_amx.h).
 *
 * Why: at decode batch 1-8 a linear layer reads its whole weight to make a few outputs. torch's
 * bfloat16 path reads SmolLM2's weights at 9-11 GB/s on this 2-core machine; this loop streams
 * them at 17-20 GB/s for 1-4 rows (bench/decode_kernels.py). Each block of four weight rows is
 * read once from memory and multiplied with every input row through AVX512-BF16's VDPBF16PS (pairs of bf16
 * products summed into float32 lanes), so a weight byte is read once per call; the next block's
 * rows are prefetched while this one is multiplied (without it: half the speed, measured).
 *
 * Arithmetic: products of two bf16 values are exact in float32; they are summed in float32 (16
 * lanes, then the lanes), plus the bias in float32, and rounded once to bfloat16 (nearest even,
 * NaN kept a NaN). torch sums in another order: outputs agree to float32 rounding before the
 * final bf16 rounding, not bit for bit (tests/unit/runtime_ext/test_linear_cpu.py bounds it).
 *
 * Without AVX512-BF16 at compile time (the portable build) linear_available() is 0 and
 * linear_bf16() returns -1 without touching anything: linear_cpu.py never calls it then.
 */
#include <stdint.h>
#include <string.h>

#include "bf16.h"
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#define HAVE_BF16_DOT 1
#else
#define HAVE_BF16_DOT 0
#endif

#include "linear_amx.h"

int linear_available(void) { return HAVE_BF16_DOT; }

/* The most rows linear_bf16 takes for an output width N. */
int linear_max_rows(int64_t N) { return amx_usable() && N % 32 == 0 ? AMX_MAX_ROWS : 8; }

#if HAVE_BF16_DOT
/* Rows n .. n + nr - 1 (nr <= 4) of y for the MM input rows: the weight rows are read once. */
#define BLOCK(MM)                                                                                          \
    static void block_##MM(uint16_t *y, const uint16_t *x, int64_t xs, const uint16_t *w, const uint16_t *b, \
                           int64_t N, int64_t K, int64_t n, int nr) {                                       \
        __m512 acc[MM][4];                                                                                 \
        const uint16_t *row[4];                                                                            \
        for (int j = 0; j < 4; j++) row[j] = w + (n + (j < nr ? j : 0)) * K; /* a short block repeats */   \
        for (int i = 0; i < MM; i++)                                                                       \
            for (int j = 0; j < 4; j++) acc[i][j] = _mm512_setzero_ps();                                   \
        for (int64_t k = 0; k < K; k += 32) {                                                              \
            __m512bh wv[4];                                                                                \
            for (int j = 0; j < 4; j++) {                                                                  \
                wv[j] = (__m512bh)_mm512_loadu_si512((const void *)(row[j] + k));                          \
                _mm_prefetch((const char *)(row[j] + 4 * K + k), _MM_HINT_T0); /* the next block's rows */   \
            }                                                                                              \
            for (int i = 0; i < MM; i++) {                                                                 \
                __m512bh xv = (__m512bh)_mm512_loadu_si512((const void *)(x + i * xs + k));                \
                for (int j = 0; j < 4; j++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);            \
            }                                                                                              \
        }                                                                                                  \
        for (int i = 0; i < MM; i++)                                                                       \
            for (int j = 0; j < nr; j++) {                                                                 \
                float s = _mm512_reduce_add_ps(acc[i][j]) + (b ? from_bf16(b[n + j]) : 0.0f);             \
                y[i * N + n + j] = to_bf16(s);                                                             \
            }                                                                                              \
    }
BLOCK(1)
BLOCK(2)
BLOCK(3)
BLOCK(4)
#endif

/* y[M, N] (contiguous), x rows xs elements apart, w[N, K] contiguous, bias[N] or NULL: the dot-product
 * loop alone (M <= 8; linear_bf16 picks it for 1-4 rows, the tests call it for 5-8). */
int linear_dot_bf16(uint16_t *y, const uint16_t *x, int64_t xs, const uint16_t *w, const uint16_t *bias, int M,
                    int64_t N, int64_t K) {
#if HAVE_BF16_DOT
    if (M < 1 || M > 8 || K % 32 != 0 || N < 1) return -2;
    int64_t blocks = (N + 3) / 4;
#pragma omp parallel for schedule(static) if (N * K >= (1 << 16))
    for (int64_t blk = 0; blk < blocks; blk++) {
        int64_t n = blk * 4;
        int nr = N - n < 4 ? (int)(N - n) : 4;
        for (int m0 = 0; m0 < M; m0 += 4) { /* rows 5-8: the block's weights again, from L1 */
            uint16_t *yb = y + m0 * N;
            const uint16_t *xb = x + m0 * xs;
            switch (M - m0 < 4 ? M - m0 : 4) {
            case 1: block_1(yb, xb, xs, w, bias, N, K, n, nr); break;
            case 2: block_2(yb, xb, xs, w, bias, N, K, n, nr); break;
            case 3: block_3(yb, xb, xs, w, bias, N, K, n, nr); break;
            default: block_4(yb, xb, xs, w, bias, N, K, n, nr); break;
            }
        }
    }
    return 0;
#else
    (void)y, (void)x, (void)xs, (void)w, (void)bias, (void)M, (void)N, (void)K;
    return -1;
#endif
}

/* linear_bf16: tiles for 5 to AMX_MAX_ROWS rows where amx_usable(), else the dot-product loop. */
int linear_bf16(uint16_t *y, const uint16_t *x, int64_t xs, const uint16_t *w, const uint16_t *bias, int M,
                int64_t N, int64_t K) {
    if (M < 1 || M > linear_max_rows(N) || K % 32 != 0 || N < 1) return -2;
    if (M > 4 && N % 32 == 0 && amx_usable()) return linear_amx(y, x, xs, w, bias, M, N, K);
    return linear_dot_bf16(y, x, xs, w, bias, M, N, K);
}

/* linear_cpu.c's loop for 5 to AMX_MAX_ROWS rows: y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias) on AMX tiles
 * (TDPBF16PS: a 16 x 32 bf16 tile times a 32 x 16 one, summed into a 16 x 16 float32 tile).
 *
 * Why: the dot-product loop is compute bound from about 5 rows (each weight block is multiplied
 * with every row in AVX-512 registers); torch's bf16 matmul at SmolLM2's shapes reads the weights
 * at about 10 GB/s up to 64 rows. On tiles the multiply is cheap and a layer of 5-32 rows costs
 * about what one row costs (bench/decode_kernels.py).
 *
 * Layout: the weight needs no repacking. Tiles compute yᵀ = w · xᵀ: the A tile is 16 weight rows
 * × 32 k, read where they are (row stride 2K bytes); the B tile wants xᵀ in pairs (k, k + 1) side
 * by side, which is x's rows read as 32-bit words and transposed: xp[k / 2][m] (M ≤ 64, so a few
 * hundred KB, built once per call in a per-thread buffer kept between calls). Each thread takes
 * blocks of 32 output columns (two A tiles, rows n .. n + 31 of w: contiguous memory, so the next
 * block is prefetched line by line while this one is multiplied), and for each block of 32 input
 * rows keeps four C tiles. A C tile is yᵀ: it is stored to a 16 x 16 buffer and read back a column
 * at a time (a gather), plus the bias, rounded to bf16 as to_bf16 rounds (nearest even, NaN kept).
 *
 * Arithmetic: exact bf16 products summed in float32 (TDPBF16PS's order), rounded once.
 *
 * Permission: Linux hands AMX's tile state to a process that asks (arch_prctl
 * ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA; kernel 5.16 on): asked once, amx_usable() is 0 when the
 * build lacks AMX or the kernel says no, and the dot-product loop runs up to 8 rows then.
 */
#ifndef STRUCTSERVE_LINEAR_AMX_H
#define STRUCTSERVE_LINEAR_AMX_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"

#define AMX_MAX_ROWS 64 /* beyond, torch's matmul (oneDNN) is as fast here (bench/decode_kernels.py) */

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int amx_usable(void) {
    static int state = -1; /* asked once; the answer is the process's */
    if (state < 0) state = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    return state;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* 16 float32 -> 16 bf16, to_bf16 in each lane */
static inline __m256i to_bf16_16(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000)); /* quiet, unrounded */
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

/* c[i][j] (+ bias[n + i]) -> y[m + j][n + i] for the input rows m + j < M */
static void store_tile(uint16_t *y, int64_t N, const float *c, const uint16_t *bias, int64_t n, int64_t m, int M) {
    __m512 b = _mm512_setzero_ps();
    if (bias) b = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(bias + n))), 16));
    const __m512i column = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                              _mm512_set1_epi32(16));
    for (int j = 0; j < 16 && m + j < M; j++) {
        __m512 v = _mm512_add_ps(_mm512_i32gather_ps(column, c + j, 4), b);
        _mm256_storeu_si256((void *)(y + (m + j) * N + n), to_bf16_16(v));
    }
}

/* x's rows as 32-bit pairs, transposed: xp[p][m] = (x[m][2p], x[m][2p + 1]), zero for m >= M */
static uint32_t *pack_pairs(const uint16_t *x, int64_t xs, int M, int64_t K, int64_t mpad) {
    static __thread uint32_t *buffer;
    static __thread size_t capacity;
    size_t need = (size_t)(K / 2) * mpad * 4;
    if (need > capacity) {
        free(buffer);
        buffer = aligned_alloc(64, need);
        capacity = buffer ? need : 0;
        if (!buffer) return NULL;
    }
    for (int64_t p = 0; p < K / 2; p++) {
        for (int m = 0; m < M; m++) memcpy(buffer + p * mpad + m, x + m * xs + 2 * p, 4);
        for (int64_t m = M; m < mpad; m++) buffer[p * mpad + m] = 0;
    }
    return buffer;
}

/* Columns n .. n + 31 of y for every input row. */
static void amx_block(uint16_t *y, const uint32_t *xp, int64_t mpad, const uint16_t *w, const uint16_t *bias, int M,
                      int64_t N, int64_t K, int64_t n, int prefetch_next) {
    float c[16 * 16] __attribute__((aligned(64)));
    const uint16_t *w0 = w + n * K, *w1 = w + (n + 16) * K;
    const char *next = (const char *)(w + (n + 32) * K); /* 32 rows = 64 K bytes = one line per k chunk and row */
    for (int64_t m = 0; m < M; m += 32) {
        int two = M - m > 16, pf = prefetch_next && m == 0;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t k = 0; k < K; k += 32) {
            if (pf)
                for (int i = 0; i < 32; i++) _mm_prefetch(next + (k + i) * 64, _MM_HINT_T0);
            const uint32_t *b = xp + (k / 2) * mpad + m;
            _tile_loadd(4, w0 + k, K * 2);
            _tile_loadd(5, w1 + k, K * 2);
            _tile_loadd(6, b, mpad * 4);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 5, 6);
            if (two) {
                _tile_loadd(7, b + 16, mpad * 4);
                _tile_dpbf16ps(2, 4, 7);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
#define STORE(T, N0, M0) { _tile_stored(T, c, 64); store_tile(y, N, c, bias, N0, M0, M); } /* tile ids: constants */
        STORE(0, n, m)
        STORE(1, n + 16, m)
        if (two) {
            STORE(2, n, m + 16)
            STORE(3, n + 16, m + 16)
        }
#undef STORE
    }
}

/* 0, or -3 when the packed input cannot be allocated; the caller checked M, N % 32, K % 32. */
static int linear_amx(uint16_t *y, const uint16_t *x, int64_t xs, const uint16_t *w, const uint16_t *bias, int M,
                      int64_t N, int64_t K) {
    int64_t mpad = (M + 31) / 32 * 32, blocks = N / 32;
    const uint32_t *xp = pack_pairs(x, xs, M, K, mpad);
    if (!xp) return -3;
#pragma omp parallel if (N * K >= (1 << 16))
    {
        tile_config config;
        memset(&config, 0, sizeof config);
        config.palette = 1;
        for (int t = 0; t < 8; t++) config.rows[t] = 16, config.colsb[t] = 64;
        _tile_loadconfig(&config);
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < blocks; blk++) amx_block(y, xp, mpad, w, bias, M, N, K, blk * 32, blk + 1 < blocks);
        _tile_release();
    }
    return 0;
}
#else
static int amx_usable(void) { return 0; }
__attribute__((unused)) static int linear_amx(uint16_t *y, const uint16_t *x, int64_t xs, const uint16_t *w, const uint16_t *bias, int M,
                      int64_t N, int64_t K) {
    (void)y, (void)x, (void)xs, (void)w, (void)bias, (void)M, (void)N, (void)K;
    return -1;
}
#endif
#endif

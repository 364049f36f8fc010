/* Decode attention over the paged bfloat16 KV pool on the CPU, one call per layer: each request's one
 * query attends over its cached rows read in place from the pool (no gathered copy), called by
 * attention_cpu.py (which checks dtypes, shapes and contiguity before it calls).
 *
 * out[b, h, :] = softmax_t(scale · q[b, h] · k[loc[b, t], h / G]) · v[loc[b, t], h / G],  t < len[b]
 *
 * One task per (request, KV head): the G query heads sharing that KV head (GQA) read each K and V
 * row once. Two passes over the rows: the scores (float32 dot products of bf16 values), then the
 * softmax weights (max subtracted, exp) times V summed in float32, divided once by the weights' sum
 * and rounded once to bf16 (nearest even). torch's SDPA computes the same in another order: the
 * outputs agree to float32 rounding before the bf16 rounding (tests/unit/runtime_ext/test_attention_cpu.py).
 *
 * Bounds: every location is checked against the pool's rows before any is read (returns BAD_LOC,
 * the caller raises IndexError naming it); a length above L or below 1 returns BAD_LEN.
 * Without AVX-512 at compile time (the portable build) attention_available() is 0: never called.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#if defined(__AVX512F__)
#include <immintrin.h>
#define HAVE_AVX512 1
#else
#define HAVE_AVX512 0
#endif

#define BAD_LOC -100
#define BAD_LEN -102
#define BAD_SHAPE -103
#define NO_MEMORY -104

int attention_available(void) { return HAVE_AVX512; }

#if HAVE_AVX512
static inline __m512 load_bf16(const uint16_t *p) { /* 16 bf16 -> float32, exact */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)p)), 16));
}

/* e^x for x <= 0 (scores minus their max): 2^n · p(r), x = n·ln2 + r, |r| <= ln2/2, p of degree 6
 * (relative error < 2e-7); below -87.3 the result is 0 (scalef underflows), as expf's. */
static inline __m512 exp_neg(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* The sums of a, b, c and d's sixteen lanes, as [a, b, c, d]. */
static inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
#define HALVES(x) _mm256_add_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))
    __m256 ab = _mm256_hadd_ps(HALVES(a), HALVES(b)), cd = _mm256_hadd_ps(HALVES(c), HALVES(d));
#undef HALVES
    __m256 abcd = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* A request's rows sit in pages scattered over the pool, each row's head a slice of it: the hardware
 * prefetchers do not follow them, and the two passes waited on memory for every row (1.8-1.9x the
 * time at 8-32 requests, bench/attention_kernel.py). So the score pass asks for the K and V rows
 * AHEAD rows on, and each task for its first AHEAD rows before it starts; -DAHEAD=0 builds without. */
#ifndef AHEAD
#define AHEAD 16
#endif
static inline void prefetch_row(const uint16_t *p, int n) {
    for (int c = 0; AHEAD && c < n; c += 32) _mm_prefetch((const char *)(p + c), _MM_HINT_T0);
}

#define MAXG 16 /* query heads per KV head */
#define MAXV 16 /* D / 16 */

/* weights · V for G query heads and 64-wide values, the G x 4 accumulators in registers. */
#define WEIGHTED_V(G)                                                                                           \
    static void weighted_v_##G##x64(__m512 acc[MAXG][MAXV], const float *s, int64_t stride, const uint16_t *v,   \
                                    const int64_t *loc, int64_t len, int hkv, int h) {                        \
        __m512 a[G][4];                                                                                         \
        for (int i = 0; i < G; i++)                                                                             \
            for (int c = 0; c < 4; c++) a[i][c] = _mm512_setzero_ps();                                          \
        for (int64_t t = 0; t < len; t++) {                                                                     \
            const uint16_t *vr = v + (loc[t] * hkv + h) * 64;                                                   \
            __m512 vv[4] = {load_bf16(vr), load_bf16(vr + 16), load_bf16(vr + 32), load_bf16(vr + 48)};         \
            for (int i = 0; i < G; i++) {                                                                       \
                __m512 p = _mm512_set1_ps(s[i * stride + t]);                                                   \
                for (int c = 0; c < 4; c++) a[i][c] = _mm512_fmadd_ps(p, vv[c], a[i][c]);                       \
            }                                                                                                   \
        }                                                                                                       \
        for (int i = 0; i < G; i++)                                                                             \
            for (int c = 0; c < 4; c++) acc[i][c] = a[i][c];                                                    \
    }
WEIGHTED_V(1)
WEIGHTED_V(2)
WEIGHTED_V(3)
WEIGHTED_V(4)

/* Scores of rows t..t+3 for G query heads: each K value converted once, G x 4 accumulators in registers. */
#define SCORES4(G)                                                                                              \
    static void scores4_##G(float *s, int64_t stride, int64_t t, const float *q, const uint16_t *const kr[4], int d) { \
        __m512 a[G][4];                                                                                         \
        for (int i = 0; i < G; i++)                                                                             \
            for (int r = 0; r < 4; r++) a[i][r] = _mm512_setzero_ps();                                          \
        for (int c = 0; c < d; c += 16) {                                                                       \
            __m512 kv[4] = {load_bf16(kr[0] + c), load_bf16(kr[1] + c), load_bf16(kr[2] + c), load_bf16(kr[3] + c)}; \
            for (int i = 0; i < G; i++) {                                                                       \
                __m512 qv = _mm512_loadu_ps(q + i * d + c);                                                     \
                for (int r = 0; r < 4; r++) a[i][r] = _mm512_fmadd_ps(qv, kv[r], a[i][r]);                      \
            }                                                                                                   \
        }                                                                                                       \
        for (int i = 0; i < G; i++) _mm_storeu_ps(s + i * stride + t, reduce4(a[i][0], a[i][1], a[i][2], a[i][3])); \
    }
SCORES4(1)
SCORES4(2)
SCORES4(3)
SCORES4(4)

/* One (request, KV head): g query heads at q (rows D apart, already scaled), len rows. */
static int one(uint16_t *out, const float *q, const uint16_t *k, const uint16_t *v, const int64_t *loc, int64_t len,
               int hkv, int h, int g, int d, int dv) {
    float *s = malloc(sizeof(float) * (size_t)g * (size_t)(len + 16));
    if (!s) return NO_MEMORY;
    int64_t stride = len + 16;
    for (int64_t r = 0; r < AHEAD && r < len; r++) { /* the first rows, which the loops do not ask for */
        prefetch_row(k + (loc[r] * hkv + h) * d, d);
        prefetch_row(v + (loc[r] * hkv + h) * dv, dv);
    }
    int64_t t = 0;
    for (; t + 4 <= len; t += 4) { /* scores, four rows at a time: one reduction tree for the four */
        const uint16_t *kr[4];
        for (int r = 0; r < 4; r++) kr[r] = k + (loc[t + r] * hkv + h) * d;
        for (int r = 0; r < 4 && t + AHEAD + r < len; r++) {
            prefetch_row(k + (loc[t + AHEAD + r] * hkv + h) * d, d);
            prefetch_row(v + (loc[t + AHEAD + r] * hkv + h) * dv, dv);
        }
        if (g <= 4) {
            (g == 1 ? scores4_1 : g == 2 ? scores4_2 : g == 3 ? scores4_3 : scores4_4)(s, stride, t, q, kr, d);
            continue;
        }
        for (int i = 0; i < g; i++) {
            __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            for (int c = 0; c < d; c += 16) {
                __m512 qv = _mm512_loadu_ps(q + i * d + c);
                for (int r = 0; r < 4; r++) acc[r] = _mm512_fmadd_ps(qv, load_bf16(kr[r] + c), acc[r]);
            }
            _mm_storeu_ps(s + i * stride + t, reduce4(acc[0], acc[1], acc[2], acc[3]));
        }
    }
    for (; t < len; t++) { /* the last rows one by one */
        const uint16_t *kr = k + (loc[t] * hkv + h) * d;
        for (int i = 0; i < g; i++) {
            __m512 acc = _mm512_setzero_ps();
            for (int c = 0; c < d; c += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i * d + c), load_bf16(kr + c), acc);
            s[i * stride + t] = _mm512_reduce_add_ps(acc);
        }
    }
    float total[MAXG];
    for (int i = 0; i < g; i++) { /* weights */
        float *si = s + i * stride;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        int64_t t = 0;
        for (; t + 16 <= len; t += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(si + t));
        float m = _mm512_reduce_max_ps(mx);
        for (; t < len; t++) m = si[t] > m ? si[t] : m;
        __m512 sum = _mm512_setzero_ps(), mv = _mm512_set1_ps(m);
        for (t = 0; t < len; t += 16) {
            __mmask16 keep = len - t >= 16 ? 0xffff : (__mmask16)((1u << (len - t)) - 1);
            __m512 e = exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(keep, si + t), mv));
            e = _mm512_maskz_mov_ps(keep, e);
            _mm512_mask_storeu_ps(si + t, keep, e);
            sum = _mm512_add_ps(sum, e);
        }
        total[i] = _mm512_reduce_add_ps(sum);
    }
    __m512 acc[MAXG][MAXV];
    if (dv == 64 && g == 3) /* SmolLM2, Llama-style GQA 3:1: accumulators in registers */
        weighted_v_3x64(acc, s, stride, v, loc, len, hkv, h);
    else if (dv == 64 && g <= 2)
        (g == 1 ? weighted_v_1x64 : weighted_v_2x64)(acc, s, stride, v, loc, len, hkv, h);
    else if (dv == 64 && g == 4)
        weighted_v_4x64(acc, s, stride, v, loc, len, hkv, h);
    else {
        for (int i = 0; i < g; i++)
            for (int c = 0; c < dv / 16; c++) acc[i][c] = _mm512_setzero_ps();
        for (int64_t t = 0; t < len; t++) { /* weights · V */
            const uint16_t *vr = v + (loc[t] * hkv + h) * dv;
            for (int c = 0; c < dv / 16; c++) {
                __m512 vv = load_bf16(vr + c * 16);
                for (int i = 0; i < g; i++) acc[i][c] = _mm512_fmadd_ps(_mm512_set1_ps(s[i * stride + t]), vv, acc[i][c]);
            }
        }
    }
    for (int i = 0; i < g; i++) {
        float o[16];
        __m512 inv = _mm512_set1_ps(1.0f / total[i]);
        for (int c = 0; c < dv / 16; c++) {
            _mm512_storeu_ps(o, _mm512_mul_ps(acc[i][c], inv));
            for (int e = 0; e < 16; e++) out[i * dv + c * 16 + e] = to_bf16(o[e]);
        }
    }
    free(s);
    return 0;
}
#endif

/* out[B, Hq, Dv], q[B, Hq, D] (requests qs elements apart, heads contiguous), k[rows, Hkv, D], v[rows, Hkv, Dv], locs[B, L], lens[B]. */
int decode_attention_bf16(uint16_t *out, const uint16_t *q, int64_t qs, const uint16_t *k, const uint16_t *v, int64_t rows,
                          const int64_t *locs, const int64_t *lens, int b, int64_t l, int hq, int hkv, int d, int dv,
                          float scale) {
#if HAVE_AVX512
    if (hkv < 1 || hq % hkv || hq / hkv > MAXG || d % 16 || dv % 16 || d > 16 * MAXV || dv > 16 * MAXV)
        return BAD_SHAPE;
    for (int r = 0; r < b; r++) {
        if (lens[r] < 1 || lens[r] > l) return BAD_LEN;
        for (int64_t t = 0; t < lens[r]; t++)
            if ((uint64_t)locs[r * l + t] >= (uint64_t)rows) return BAD_LOC;
    }
    int g = hq / hkv, status = 0;
#pragma omp parallel for schedule(dynamic) if ((int64_t)b * hkv > 1 && (int64_t)b * l >= 256)
    for (int task = 0; task < b * hkv; task++) {
        int r = task / hkv, h = task % hkv;
        float qf[MAXG * 16 * MAXV];
        const uint16_t *qr = q + (int64_t)r * qs + (int64_t)h * g * d;
        for (int i = 0; i < g * d; i++) qf[i] = from_bf16(qr[i]) * scale;
        int rc = one(out + ((int64_t)r * hq + (int64_t)h * g) * dv, qf, k, v, locs + r * l, lens[r], hkv, h, g, d, dv);
        if (rc) {
#pragma omp atomic write
            status = rc;
        }
    }
    return status;
#else
    (void)out, (void)q, (void)qs, (void)k, (void)v, (void)rows, (void)locs, (void)lens, (void)b, (void)l, (void)hq;
    (void)hkv, (void)d, (void)dv, (void)scale;
    return BAD_SHAPE;
#endif
}

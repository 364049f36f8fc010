/* The C8 KV cache on the CPU, one call per layer side: gather a batch's rows from the int8 pool,
 * dequantize them into the model dtype and add the INT4 residuals of outlier vectors; quantize new
 * tokens into their rows; keep the residual side buffer (runtime_ext/kv_cache/residual.py).
 *
 * Bit-identical to the torch reference (runtime_ext/ops/kv_ref.py), which does the same
 * arithmetic in several full-size passes: value = float(int8) * float(scale), rounded once to
 * the output dtype (bfloat16: round to nearest even, as c10::BFloat16); with a residual,
 * float(value) + float(int4) * float(scale16), rounded once more. Built by kv_cpu.py with the
 * host's compiler (-O3 -march=native); the loops over the head dim vectorize.
 *
 * Layout: pool rows [size, H, D] int8, contiguous; locs [n] int64; out [n, H, D] contiguous;
 * per-token scales [size, H] float16 (C8-D); static scales [H, D] float32 (C8-S).
 *
 * Bounds: every call that takes locations gets the number of rows they index (the pool's size; for
 * the residual side buffer the locations its int32 keys can name) and returns KV_BAD_LOC when a
 * location (negative ones too) is outside [0, rows): the reads skip that row, the stores and the
 * residual calls check every location before they write anything. The side buffer's own state
 * (sorted keys, slots, counts) is checked where it becomes an index: KV_BAD_STATE, nothing outside
 * its arrays touched. kv_cpu.py turns both into IndexError and checks the tensors' shapes.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KV_BAD_LOC (-100)   /* a location outside [0, rows) (kv_cpu.py: BAD_LOC) */
#define KV_BAD_STATE (-101) /* the residual side buffer's keys, slots or counts point outside its arrays */

static inline int outside(int64_t loc, int64_t rows) { return (uint64_t)loc >= (uint64_t)rows; } /* < 0 too */

/* 1 when a location of locs[n] is outside [0, rows) (one pass, before a call writes anything). */
static int any_outside(const int64_t *locs, int64_t n, int64_t rows) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= outside(locs[i], rows);
    return bad;
}

static inline float half_to_float(uint16_t h) { /* exact, subnormals included (one instruction with F16C) */
    _Float16 f;
    memcpy(&f, &h, sizeof(f));
    return (float)f;
}

/* Round to nearest even, as c10::BFloat16 does for finite values (a stored value is always finite:
 * the store rejects NaN and inf, and a scale is finite). Branch-free, so the loops vectorize. */
static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
/* 32 values: bf16(q * s) with the float32 products rounded to nearest even by VCVTNE2PS2BF16, which
 * treats subnormals as zero; no product here is one (|q| >= 1, s >= 2^-24, or exactly 0). */
static inline void bf16_32(uint16_t *o, const int8_t *q, __m512 s_lo, __m512 s_hi) {
    __m256i q8 = _mm256_loadu_si256((const __m256i *)q);
    __m512 lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q8))), s_lo);
    __m512 hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q8, 1))), s_hi);
    _mm512_storeu_si512((void *)o, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}
#define BF16_STEP 32
#else
#define BF16_STEP 0
#endif

/* One vector of d values, one scale: out[i] = q[i] * s. */
static inline void dequant_one(void *out, int bf16, const int8_t *restrict q, float s, int d) {
    if (bf16) {
        uint16_t *restrict o = (uint16_t *)out;
        int i = 0;
#if BF16_STEP
        const __m512 vs = _mm512_set1_ps(s);
        for (; i + BF16_STEP <= d; i += BF16_STEP) bf16_32(o + i, q + i, vs, vs);
#endif
        for (; i < d; i++) o[i] = float_to_bf16((float)q[i] * s);
    } else {
        float *restrict o = (float *)out;
        for (int i = 0; i < d; i++) o[i] = (float)q[i] * s;
    }
}

/* One row of d values, a scale each: out[i] = q[i] * s[i] (wide: every scale is >= 2^-100 in
 * magnitude, so no product is subnormal and the vector conversion may run). */
static inline void dequant_each(void *out, int bf16, const int8_t *restrict q, const float *restrict s, int d, int wide) {
    if (bf16) {
        uint16_t *restrict o = (uint16_t *)out;
        int i = 0;
#if BF16_STEP
        for (; wide && i + BF16_STEP <= d; i += BF16_STEP)
            bf16_32(o + i, q + i, _mm512_loadu_ps(s + i), _mm512_loadu_ps(s + i + 16));
#endif
        for (; i < d; i++) o[i] = float_to_bf16((float)q[i] * s[i]);
    } else {
        float *restrict o = (float *)out;
        for (int i = 0; i < d; i++) o[i] = (float)q[i] * s[i];
    }
}

/* C8-D: out[i, h, :] = pool[locs[i], h, :] * scale16[locs[i], h] for the pool's rows locations (a row
 * at a location outside them is skipped: KV_BAD_LOC). */
int gather_dequant_token(void *out, int bf16, const int8_t *pool, const uint16_t *scale16, const int64_t *locs,
                         int64_t n, int64_t rows, int heads, int dim, int threads) {
    const int64_t row = (int64_t)heads * dim, elem = bf16 ? 2 : 4;
    int bad = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : bad)
    for (int64_t i = 0; i < n; i++) {
        const int64_t loc = locs[i];
        if (outside(loc, rows)) {
            bad = 1;
            continue;
        }
        for (int h = 0; h < heads; h++) {
            dequant_one((char *)out + (i * row + (int64_t)h * dim) * elem, bf16, pool + loc * row + (int64_t)h * dim,
                        half_to_float(scale16[loc * heads + h]), dim);
        }
    }
    return bad ? KV_BAD_LOC : 0;
}

/* C8-S: out[i, h, d] = pool[locs[i], h, d] * scale[h, d] (bounds as gather_dequant_token). */
int gather_dequant_static(void *out, int bf16, const int8_t *pool, const float *scale, const int64_t *locs,
                          int64_t n, int64_t rows, int heads, int dim, int threads) {
    const int64_t row = (int64_t)heads * dim, elem = bf16 ? 2 : 4;
    int wide = 1, bad = 0;
    for (int64_t j = 0; j < row; j++) wide &= fabsf(scale[j]) >= 0x1p-100f;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : bad)
    for (int64_t i = 0; i < n; i++) {
        if (outside(locs[i], rows)) {
            bad = 1;
            continue;
        }
        dequant_each((char *)out + i * row * elem, bf16, pool + locs[i] * row, scale, (int)row, wide);
    }
    return bad ? KV_BAD_LOC : 0;
}

/* The first index of keys[m] (sorted) that is >= key. */
static inline int64_t lower_bound(const int32_t *keys, int64_t m, int64_t key) {
    int64_t lo = 0, hi = m;
    while (lo < hi) {
        int64_t mid = (lo + hi) >> 1;
        if (keys[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* values[r, :] += unpack(packed[slot]) * scale16[slot], rounded once to the values' dtype (dim <= 1024). */
static inline void add_one(void *values, int bf16, int64_t r, int dim, const uint8_t *restrict p, float s) {
    float add[1024];
    for (int i = 0; i < dim / 2; i++) { /* low nibble first; 8..15 are -8..-1 */
        int lo = p[i] & 0xf, hi = p[i] >> 4;
        add[2 * i] = (float)(lo - ((lo & 8) << 1)) * s;
        add[2 * i + 1] = (float)(hi - ((hi & 8) << 1)) * s;
    }
    if (bf16) {
        uint16_t *restrict o = (uint16_t *)values + r * dim;
        for (int d = 0; d < dim; d++) o[d] = float_to_bf16(bf16_to_float(o[d]) + add[d]);
    } else {
        float *restrict o = (float *)values + r * dim;
        for (int d = 0; d < dim; d++) o[d] += add[d];
    }
}

/* 1 unless keys[m] are sorted and >= 0 and slots[m] index the capacity slots. */
static int bad_keys(const int32_t *keys, const int32_t *slots, int64_t m, int64_t capacity) {
    int bad = m > 0 && keys[0] < 0;
    for (int64_t j = 0; j < m; j++) bad |= (j > 0 && keys[j] < keys[j - 1]) | outside(slots[j], capacity);
    return bad;
}

/* INT4 residuals: for each vector (i, h) whose key locs[i] * heads + h is in the sorted keys[m],
 * values[i, h, :] += unpack(packed[slot]) * scale16[slot] (packed and scale16: capacity slots). A
 * bitmap of the locations that hold any residual (built here, m bits set) lets the rows without one
 * skip the search; the keys of one location are adjacent in keys. Returns the number of vectors
 * hit (KV_BAD_LOC: a location outside [0, rows); KV_BAD_STATE: keys or slots outside their range;
 * both before anything is added). */
int64_t residual_add(void *values, int bf16, const int64_t *locs, int64_t n, int64_t rows, int heads, int dim,
                     const int32_t *keys, const int32_t *slots, int64_t m, int64_t capacity, const uint8_t *packed,
                     const uint16_t *scale16, int threads) {
    if (any_outside(locs, n, rows)) return KV_BAD_LOC;
    if (m == 0) return 0;
    if (bad_keys(keys, slots, m, capacity)) return KV_BAD_STATE;
    const int64_t span = keys[m - 1] / heads + 1;
    uint64_t *held = calloc((size_t)(span + 63) / 64, sizeof(uint64_t));
    if (held == NULL) return -1;
    for (int64_t j = 0; j < m; j++) held[(keys[j] / heads) >> 6] |= 1ull << ((keys[j] / heads) & 63);
    int64_t hits = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : hits)
    for (int64_t i = 0; i < n; i++) {
        const int64_t loc = locs[i];
        if (loc < 0 || loc >= span || !((held[loc >> 6] >> (loc & 63)) & 1)) continue;
        for (int64_t at = lower_bound(keys, m, loc * heads); at < m && keys[at] < (loc + 1) * heads; at++) {
            const int32_t slot = slots[at];
            add_one(values, bf16, i * heads + (keys[at] - loc * heads), dim, packed + (int64_t)slot * (dim / 2),
                    half_to_float(scale16[slot]));
            hits++;
        }
    }
    free(held);
    return hits;
}

/* ---- Store: quantize new tokens into their pool rows (x [t, heads, dim] float32 or bfloat16). ---- */

static inline float load_x(const void *x, int x_bf16, int64_t i) {
    return x_bf16 ? bf16_to_float(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

static int all_finite(const void *x, int x_bf16, int64_t n) {
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        float v = load_x(x, x_bf16, i);
        ok &= (v - v == 0.0f); /* false for NaN and inf */
    }
    return ok;
}

static inline int8_t q8(float v) {
    float r = rintf(v); /* to nearest, ties to even: torch.round */
    return (int8_t)(r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r));
}

/* C8-D: per token and head s = absmax / 127, stored as float16 rounded after * (1 + 2^-9) (never
 * below absmax / 127), q = clamp(round(x / s16), +-127) (s16 = 0: q = round(x)). Returns -1 and
 * writes nothing when x holds a NaN or inf; returns -2 (rows before it written) at a scale that
 * overflows float16. */
int quantize_store_token(const void *x, int x_bf16, int64_t t, int64_t rows, int heads, int dim, const int64_t *loc,
                         int8_t *buf, uint16_t *scale16) {
    if (any_outside(loc, t, rows)) return KV_BAD_LOC; /* before anything else: nothing written */
    if (!all_finite(x, x_bf16, t * heads * dim)) return -1;
    for (int64_t v = 0; v < t * heads; v++) {
        const int64_t base = v * dim, row = loc[v / heads] * heads + v % heads;
        float amax = 0.0f;
        for (int d = 0; d < dim; d++) amax = fmaxf(amax, fabsf(load_x(x, x_bf16, base + d)));
        _Float16 s16 = (_Float16)((amax / 127.0f) * (1.0f + 0x1p-9f));
        float s = (float)s16, safe = s > 0.0f ? s : 1.0f;
        if (s > 65504.0f) return -2; /* the float16 scale overflowed: never store inf */
        for (int d = 0; d < dim; d++) buf[row * dim + d] = q8(load_x(x, x_bf16, base + d) / safe);
        memcpy(&scale16[row], &s16, sizeof(uint16_t));
    }
    return 0;
}

/* C8-S: q = clamp(round(x / scale[h, d]), +-127) with the float32 per-channel scales. */
int quantize_store_static(const void *x, int x_bf16, int64_t t, int64_t rows, int heads, int dim, const int64_t *loc,
                          int8_t *buf, const float *scale) {
    const int64_t row = (int64_t)heads * dim;
    if (any_outside(loc, t, rows)) return KV_BAD_LOC; /* before anything else: nothing written */
    if (!all_finite(x, x_bf16, t * row)) return -1;
    for (int64_t i = 0; i < t; i++)
        for (int64_t j = 0; j < row; j++) buf[loc[i] * row + j] = q8(load_x(x, x_bf16, i * row + j) / scale[j]);
    return 0;
}

/* ---- The INT4 residual side buffer (runtime_ext/kv_cache/residual.py): its store in one call. ----
 * State: keys[used] sorted (loc * heads + h) with slots[used] beside them, a free-slot stack
 * free_[nfree] (taken from the top), counts = {used, nfree, outliers, dropped}. */

static inline int64_t upper_bound(const int32_t *keys, int64_t m, int64_t key) {
    int64_t lo = 0, hi = m;
    while (lo < hi) {
        int64_t mid = (lo + hi) >> 1;
        if (keys[mid] <= key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Drop the keys of the n locations; their slots go on the free stack in key order. The common
 * case (fresh locations, nothing held) costs one search per location; otherwise one pass over the
 * keys from the first one held, with a bitmap of the locations (no wider than the keys' span).
 * keys, slots and free_ hold entries each. Returns -1 without memory, KV_BAD_LOC for a location
 * outside [0, rows) and KV_BAD_STATE for counts that do not fit the arrays (nothing changed). */
int residual_release(int32_t *keys, int32_t *slots, int32_t *free_, int64_t *counts, int heads, const int64_t *locs,
                     int64_t n, int64_t rows, int64_t entries) {
    int64_t used = counts[0], nfree = counts[1], first = used, span = 0;
    if (any_outside(locs, n, rows)) return KV_BAD_LOC;
    if (outside(used, entries + 1) || outside(nfree, entries - used + 1)) return KV_BAD_STATE;
    for (int64_t i = 0; i < n; i++) {
        int64_t at = lower_bound(keys, used, locs[i] * heads);
        if (at < used && keys[at] < (locs[i] + 1) * heads && at < first) first = at;
        if (locs[i] + 1 > span) span = locs[i] + 1;
    }
    if (first == used) return 0;
    if (keys[used - 1] / heads + 1 < span) span = keys[used - 1] / heads + 1; /* no key beyond (sorted) */
    uint64_t *drop = calloc((size_t)(span > 0 ? span + 63 : 0) / 64 + 1, sizeof(uint64_t));
    if (drop == NULL) return -1;
    for (int64_t i = 0; i < n; i++)
        if (locs[i] < span) drop[locs[i] >> 6] |= 1ull << (locs[i] & 63);
    int64_t kept = first;
    for (int64_t j = first; j < used; j++) {
        const int64_t loc = keys[j] / heads;
        if (loc >= 0 && loc < span && ((drop[loc >> 6] >> (loc & 63)) & 1)) {
            free_[nfree++] = slots[j];
        } else {
            keys[kept] = keys[j];
            slots[kept++] = slots[j];
        }
    }
    free(drop);
    counts[0] = kept;
    counts[1] = nfree;
    return 0;
}

/* ||x - deq|| / ||x|| (0 for a zero vector), accumulated in double. */
static double relative_error_of(const void *x, int x_bf16, const void *deq, int deq_bf16, int64_t base, int dim) {
    double num = 0.0, den = 0.0;
    for (int d = 0; d < dim; d++) {
        float xv = load_x(x, x_bf16, base + d), diff = xv - load_x(deq, deq_bf16, base + d);
        num += (double)diff * diff;
        den += (double)xv * xv;
    }
    return den > 0.0 ? sqrt(num) / sqrt(den) : 0.0;
}

/* r = x - deq as INT4 (absmax / 7 per vector, round half to even, +-7), packed low nibble first. */
static void quantize_residual_one(const void *x, int x_bf16, const void *deq, int deq_bf16, int64_t base, int dim,
                                  uint8_t *out, uint16_t *scale16) {
    float r[1024], amax = 0.0f;
    for (int d = 0; d < dim; d++) {
        r[d] = load_x(x, x_bf16, base + d) - load_x(deq, deq_bf16, base + d);
        amax = fmaxf(amax, fabsf(r[d]));
    }
    float s = amax / 7.0f, safe = s > 0.0f ? s : 1.0f;
    for (int d = 0; d < dim; d += 2) {
        float lo = fminf(fmaxf(rintf(r[d] / safe), -7.0f), 7.0f), hi = fminf(fmaxf(rintf(r[d + 1] / safe), -7.0f), 7.0f);
        out[d / 2] = (uint8_t)(((int)lo & 0xf) | (((int)hi & 0xf) << 4));
    }
    _Float16 s16 = (_Float16)s;
    memcpy(scale16, &s16, sizeof(uint16_t));
}

/* Store the t new tokens at locs: release what those locations held, then give every vector
 * whose relative INT8 error exceeds tau a slot (while the stack has one; else count it dropped)
 * holding its INT4 residual, its key inserted in order. Returns the outliers seen (-1: no memory,
 * KV_BAD_LOC or KV_BAD_STATE from the release: nothing changed; KV_BAD_STATE for a free slot past
 * the capacity slots: stopped before taking it). */
int64_t residual_store(const void *x, int x_bf16, const void *deq, int deq_bf16, int64_t t, int heads, int dim,
                       const int64_t *locs, int64_t rows, float tau, int32_t *keys, int32_t *slots, int32_t *free_,
                       int64_t *counts, int64_t entries, int64_t capacity, uint8_t *packed, uint16_t *scale16) {
    const int released = residual_release(keys, slots, free_, counts, heads, locs, t, rows, entries);
    if (released < 0) return released;
    int64_t found = 0;
    for (int64_t v = 0; v < t * heads; v++) {
        if (!(relative_error_of(x, x_bf16, deq, deq_bf16, v * dim, dim) > (double)tau)) continue;
        found++;
        if (counts[1] == 0) {
            counts[3]++;
            continue;
        }
        const int32_t slot = free_[counts[1] - 1];
        if (outside(slot, capacity)) return KV_BAD_STATE; /* a slot past packed and scale16: not taken */
        counts[1]--;
        quantize_residual_one(x, x_bf16, deq, deq_bf16, v * dim, dim, packed + (int64_t)slot * (dim / 2), &scale16[slot]);
        const int64_t key = locs[v / heads] * heads + v % heads, at = upper_bound(keys, counts[0], key);
        memmove(keys + at + 1, keys + at, (size_t)(counts[0] - at) * sizeof(int32_t));
        memmove(slots + at + 1, slots + at, (size_t)(counts[0] - at) * sizeof(int32_t));
        keys[at] = (int32_t)key;
        slots[at] = slot;
        counts[0]++;
    }
    counts[2] += found;
    return found;
}

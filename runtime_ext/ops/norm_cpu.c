/* SGLang's RMSNorm (forward_native's arithmetic) and rotary embedding for bfloat16 rows on the CPU, one
 * call each instead of the eight to fifteen small torch ops they take (norm_cpu.py; the hook is runtime_ext/decode_hooks.py).
 *
 * Per row, in float32 as forward_native: s = x (+ residual), the new residual = bf16(s),
 * r = 1 / sqrt(mean(s²) + eps), out = bf16(s · r · w) (or bf16(w · bf16(s · r)) when the layer casts
 * before the weight, cast_before). Rounding to bf16 is to nearest even, NaN kept. The sum of squares
 * is accumulated in another order than torch's mean: outputs agree to float32 rounding before the
 * bf16 rounding (tests/unit/runtime_ext/test_norm_cpu.py).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"

#define MAX_HIDDEN 16384

/* out[n, h]; x[n, h]; residual[n, h] or NULL (then res_out is unused); res_out[n, h] (may be residual). */
int rmsnorm_bf16(uint16_t *out, uint16_t *res_out, const uint16_t *x, const uint16_t *residual, const uint16_t *w,
                 int64_t n, int64_t h, float eps, int cast_before) {
    if (h < 1 || h > MAX_HIDDEN) return -103;
#pragma omp parallel for schedule(static) if (n * h >= (1 << 16))
    for (int64_t i = 0; i < n; i++) {
        float s[MAX_HIDDEN];
        const uint16_t *xr = x + i * h;
        float sq = 0.0f;
        for (int64_t j = 0; j < h; j++) {
            float v = from_bf16(xr[j]);
            if (residual) v += from_bf16(residual[i * h + j]);
            s[j] = v;
            sq += v * v;
        }
        if (residual)
            for (int64_t j = 0; j < h; j++) res_out[i * h + j] = to_bf16(s[j]);
        float r = 1.0f / sqrtf(sq / (float)h + eps);
        uint16_t *o = out + i * h;
        if (cast_before)
            for (int64_t j = 0; j < h; j++) o[j] = to_bf16(from_bf16(w[j]) * from_bf16(to_bf16(s[j] * r)));
        else
            for (int64_t j = 0; j < h; j++) o[j] = to_bf16(s[j] * r * from_bf16(w[j]));
    }
    return 0;
}

/* SGLang's rotary embedding (RotaryEmbedding.forward_native with apply_rotary_emb) for bf16 q/k rows,
 * bit for bit: cos and sin are rounded to bf16 as it casts them, and each product and sum is one
 * bf16 op as torch's (a float32 result rounded to bf16): o1 = bf16(bf16(x1·cos) − bf16(x2·sin)),
 * o2 = bf16(bf16(x2·cos) + bf16(x1·sin)); x1/x2 the two halves (neox) or the even/odd elements of the
 * rotary part; the rest of each head is copied. Rows: t tokens; x rows xs elements apart (q and k
 * are views into one qkv row in SGLang), heads contiguous; out rows heads · head_size contiguous.
 * cos_sin[pos, rot] (float32 when cache_bf16 is 0, else bf16): cos first half, sin second. */
static void rope_rows(uint16_t *out, const uint16_t *x, int64_t xs, const int64_t *pos, const void *cache,
                      int cache_bf16, int64_t t, int heads, int hs, int rot, int neox) {
    int half = rot / 2;
#pragma omp parallel for schedule(static) if (t * heads * hs >= (1 << 16))
    for (int64_t i = 0; i < t; i++) {
        float c[512], s[512];
        for (int j = 0; j < half; j++) {
            float cf, sf;
            if (cache_bf16) {
                cf = from_bf16(((const uint16_t *)cache)[pos[i] * rot + j]);
                sf = from_bf16(((const uint16_t *)cache)[pos[i] * rot + half + j]);
            } else {
                cf = from_bf16(to_bf16(((const float *)cache)[pos[i] * rot + j]));
                sf = from_bf16(to_bf16(((const float *)cache)[pos[i] * rot + half + j]));
            }
            c[j] = cf, s[j] = sf;
        }
        for (int h = 0; h < heads; h++) {
            const uint16_t *xr = x + i * xs + (int64_t)h * hs;
            uint16_t *o = out + (i * heads + h) * (int64_t)hs;
            for (int j = 0; j < half; j++) {
                int a = neox ? j : 2 * j, b = neox ? j + half : 2 * j + 1;
                float x1 = from_bf16(xr[a]), x2 = from_bf16(xr[b]);
                float p = from_bf16(to_bf16(x1 * c[j])), q = from_bf16(to_bf16(x2 * s[j]));
                float u = from_bf16(to_bf16(x2 * c[j])), v = from_bf16(to_bf16(x1 * s[j]));
                o[a] = to_bf16(p - q);
                o[b] = to_bf16(u + v);
            }
            for (int j = rot; j < hs; j++) o[j] = xr[j];
        }
    }
}

int rope_bf16(uint16_t *q_out, uint16_t *k_out, const uint16_t *q, int64_t qs, const uint16_t *k, int64_t ks,
              const int64_t *pos, int64_t positions, const void *cache, int cache_bf16, int64_t t, int hq, int hk,
              int hs, int rot, int neox) {
    if (rot < 2 || rot % 2 || rot > hs || rot > 1024) return -103;
    for (int64_t i = 0; i < t; i++)
        if ((uint64_t)pos[i] >= (uint64_t)positions) return -100;
    rope_rows(q_out, q, qs, pos, cache, cache_bf16, t, hq, hs, rot, neox);
    rope_rows(k_out, k, ks, pos, cache, cache_bf16, t, hk, hs, rot, neox);
    return 0;
}

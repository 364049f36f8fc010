/* SGLang's seeded Gumbel-max sampler on the CPU, one call per batch: out[i] = argmax_j(logprobs[i][j] + g_ij),
 * g_ij = -log(-log(u_ij)), u_ij = murmur3(seed_i, position_i, j) / (2^32 - 1), called by sample_cpu.py.
 *
 * Why: runtime_ext (fixes/sampling_seed.py) gives every sampled request a seed, so SGLang samples
 * every non-greedy decode step through multinomial_with_seed (sglang/srt/layers/sampler.py): on the CPU
 * a murmur hash of every (row, vocabulary entry) in int64 torch ops (the CPU shim of sgl_kernel's
 * murmur_hash32_cpu), then the noise in float64 tensors: about a quarter of a decode step of
 * SmolLM2 at batch 32 (py-spy). Here each element is hashed, turned into noise and compared in
 * registers, rows and vocabulary chunks spread over the threads.
 *
 * Arithmetic: SGLang's, step for step. The hash is MurmurHash3 x86_32 of the 16 bytes (seed low
 * word, seed high word, position's low word, column), as sglang/kernels/ops/sampling/murmur_hash.py
 * writes it. In float64: u = h / 4294967295, log, clamped to [-DBL_MAX, -2^-32], negated, log,
 * negated, plus the logprob widened from float32; the first maximum wins and a NaN wins over
 * any number (torch.argmax). log is the C library's: torch's may differ from it in the last bit,
 * which changes a draw only where two candidates tie to 1e-16 (tests/unit/runtime_ext/test_sample_cpu.py).
 * Entries that provably cannot win are skipped before their logs (best_in).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#define CHUNK 4096 /* vocabulary entries per task */

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

static inline uint32_t mix(uint32_t h, uint32_t k) {
    k *= 0xcc9e2d51u;
    k = rotl32(k, 15) * 0x1b873593u;
    h = rotl32(h ^ k, 13);
    return h * 5u + 0xe6546b64u;
}

static inline uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

static inline double gumbel(uint32_t row_hash, uint32_t column) {
    double x = log((double)fmix32(mix(row_hash, column) ^ 16u) / 4294967295.0);
    x = x < -DBL_MAX ? -DBL_MAX : (x > -0x1p-32 ? -0x1p-32 : x);
    return -log(-x);
}

/* Noise never exceeds G_MAX (-log(u) is clamped at 2^-32 or more), so an entry whose logprob is more
 * than G_MAX below the best value so far cannot win. Nor can an entry whose hash is at most
 * below[k] while the best value so far is level[k] or more above its logprob: u <= below[k] /
 * (2^32 - 1) < exp(-exp(-(level[k] - 1e-9))) makes its noise below level[k] - 1e-9 (the margin
 * dwarfs log's last-bit error and the rounding of the sums). Skipped entries cannot win or tie, so
 * the draw is the one every entry would give; only the few left are computed in full. */
#define G_MAX 22.1808 /* -log(2^-32) = 22.18071 */
static const double level[] = {16.0, 8.0, 4.0, 2.0, 1.0, 0.5, 0.0};
#define LEVELS ((int)(sizeof level / sizeof level[0]))
static uint32_t below[LEVELS];

static void init_below(void) {
    for (int k = 0; k < LEVELS; k++) below[k] = (uint32_t)(exp(-exp(-(level[k] - 1e-9))) * 4294967295.0) - 1u;
}

/* Whether entry j (hash h) cannot reach top: its logprob is gap = top - logprob below it. */
static inline int cannot_win(double gap, uint32_t h) {
    if (gap > G_MAX) return 1;
    for (int k = 0; k < LEVELS; k++)
        if (gap >= level[k]) return h <= below[k];
    return 0;
}

/* The best column of a row within [j0, j1): index and value (a NaN logprob is the best). The
 * largest logprob's entry is computed first so that most others are skipped. */
static void best_in(const float *row, uint32_t row_hash, int64_t j0, int64_t j1, int64_t *at, double *value) {
    int64_t first = j0;
    for (int64_t j = j0; j < j1; j++) {
        if (isnan(row[j])) {
            *at = j, *value = NAN;
            return;
        }
        if (row[j] > row[first]) first = j;
    }
    int64_t best = first;
    double top = gumbel(row_hash, (uint32_t)first) + (double)row[first];
    for (int64_t j = j0; j < j1; j++) {
        uint32_t h = fmix32(mix(row_hash, (uint32_t)j) ^ 16u);
        if (j == first || cannot_win(top - (double)row[j], h)) continue;
        double v = gumbel(row_hash, (uint32_t)j) + (double)row[j];
        if (v > top || (v == top && j < best)) top = v, best = j;
    }
    *at = best, *value = top;
}

/* out[n] int64; logprobs rows `stride` floats apart, m columns (m <= 2^32); seeds, positions int64 [n].
 * at/value: n * ceil(m / CHUNK) scratch entries. 0, or -2 for an argument out of range. */
int seeded_gumbel_argmax(int64_t *out, const float *logprobs, int64_t stride, const int64_t *seeds,
                         const int64_t *positions, int n, int64_t m, int64_t *at, double *value) {
    if (n < 1 || m < 1 || m > 4294967296LL || stride < m) return -2;
    int64_t chunks = (m + CHUNK - 1) / CHUNK;
    if (!below[0]) init_below(); /* (a race here writes the same values) */
#pragma omp parallel for schedule(static) if ((int64_t)n * m >= 8192)
    for (int64_t task = 0; task < n * chunks; task++) {
        int64_t i = task / chunks, j0 = (task % chunks) * CHUNK, j1 = j0 + CHUNK < m ? j0 + CHUNK : m;
        uint64_t seed = (uint64_t)seeds[i];
        uint32_t row_hash = mix(mix(mix(0u, (uint32_t)seed), (uint32_t)(seed >> 32)), (uint32_t)positions[i]);
        best_in(logprobs + i * stride, row_hash, j0, j1, &at[task], &value[task]);
    }
    for (int i = 0; i < n; i++) { /* chunks in order: the first maximum (or NaN) of the row */
        int64_t best = at[(int64_t)i * chunks];
        double top = value[(int64_t)i * chunks];
        for (int64_t c = 1; c < chunks && !isnan(top); c++) {
            double v = value[(int64_t)i * chunks + c];
            if (v > top || isnan(v)) top = v, best = at[(int64_t)i * chunks + c];
        }
        out[i] = best;
    }
    return 0;
}

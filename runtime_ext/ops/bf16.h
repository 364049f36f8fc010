/* bfloat16 <-> float32 for the decode kernels (linear_cpu.c, attention_cpu.c, norm_cpu.c): exact widening,
 * and narrowing rounded to nearest even with NaN kept a NaN, as c10::BFloat16 rounds. cpu_build hashes
 * this file into every build that includes it. */
#ifndef STRUCTSERVE_BF16_H
#define STRUCTSERVE_BF16_H
#include <stdint.h>
#include <string.h>

static inline float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
#endif

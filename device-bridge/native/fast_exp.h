/*
 * exp in float precision, the one C copy of dev.ttpipe.device.cpu.FloatExp.exp, operation for
 * operation: Cody-Waite range reduction x = k ln2 + r, |r| <= ln2 / 2, Cephes' degree-5 minimax
 * polynomial for e^r, and 2^k from the exponent bits as two normal halves. Arguments below -87.33654
 * give 0, above 88.72283 infinity; NaN stays NaN.
 *
 * Included by the cpu backend's kernels (cpu/ttpipe_cpu.c) and the reference bridge library
 * (reference/internal.h), so both give the Java twin's bits. That needs -ffp-contract=off (no FMA
 * contraction) and no -ffast-math in every file that includes it. static inline: nothing exported.
 */
#ifndef TTPIPE_FAST_EXP_H
#define TTPIPE_FAST_EXP_H

#include <stdint.h>
#include <string.h>

static inline float fexp(float x) {
    const float log2e = 1.44269504088896341f, ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    const float magic = 12582912.0f, min_arg = -87.33654f, max_arg = 88.72283f; /* magic: 1.5 * 2^23 */
    float c = x < min_arg ? min_arg : x > max_arg ? max_arg : x;
    float t = c * log2e + magic;
    float k = t - magic;                 /* round(c / ln2) */
    int32_t tb, mb;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&mb, &magic, sizeof mb);
    int32_t ki = tb - mb;                /* the same integer, from the bits */
    float r = c - k * ln2_hi - k * ln2_lo;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    int32_t half = ki >> 1;              /* -63..64: 2^k as two normal halves */
    /* Unsigned shifts: Java's int shift bits, and no signed overflow (undefined in C) for a NaN argument. */
    uint32_t e1 = (uint32_t) (half + 127) << 23, e2 = (uint32_t) (ki - half + 127) << 23;
    float f1, f2;
    memcpy(&f1, &e1, sizeof f1);
    memcpy(&f2, &e2, sizeof f2);
    float scaled = p * f1 * f2;
    return x < min_arg ? 0.0f : x > max_arg ? __builtin_inff() : scaled;
}

#endif

/*
 * The cpu backend's memory-bound and elementwise kernels in C, bound with JNA by
 * dev.ttpipe.device.cpu.CpuNative, and the fma engine's GEMM on bf16 operands (ttpipe_cpu_gemm_bf16, at the end: its
 * bits are its written definition, which CpuNativeTest holds in Java). Each other function computes exactly what its
 * Java twin computes (Elementwise, FlashAttention, FloatExp, Norms, Optimizers, Reductions, Permute), operation by
 * operation, so the two give the same bits:
 *
 *  - no contraction of a * b + c into an FMA (-ffp-contract=off), no reassociation (no -ffast-math);
 *    each vector lane then performs the scalar code's IEEE operations, and a vectorised loop equals
 *    the scalar one;
 *  - reductions keep LANES partial results, element j going to partial j % LANES, combined in lane
 *    order at the end: the order is written in the source (Java does the same), so the compiler may
 *    put the partials in vector registers without changing a bit;
 *  - no libm: exp is FloatExp's Cody-Waite reduction and Cephes polynomial (../fast_exp.h, shared with
 *    the reference bridge library), sqrt the IEEE instruction;
 *    the one log (of a softmax row's sum) stays in Java.
 *
 * Built by Maven (device-bridge/pom.xml) with -O3; on x86-64 each kernel is cloned for AVX-512,
 * AVX2 and baseline SSE2 and the loader picks the clone the CPU runs (GCC's target_clones). To check one
 * level alone, build with -DTTPIPE_NO_CLONES -march=x86-64-v3 (or v2, x86-64) and run CpuNativeTest.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../fast_exp.h" /* fexp: FloatExp.exp, operation for operation */

#define EXPORT __attribute__((visibility("default")))
/* Inlined into each clone, so it is compiled for the clone's target. */
#define INLINE static inline __attribute__((always_inline))
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TTPIPE_NO_CLONES)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

enum { LANES = 16 };

/*
 * The LANES partials as GCC vectors: vf16 holds 16 floats, a vd8 pair the 16 double partials (lanes 0-7, 8-15). Each
 * lane performs the scalar code's operations on its own partial, so the bits are the scalar loop's; written out
 * because GCC does not vectorise the 16-lane arrays (it leaves them scalar). Loads are unaligned (memcpy); a clone
 * without 512-bit registers splits each vector into narrower ones.
 */
typedef float vf16 __attribute__((vector_size(64)));
typedef float vf8 __attribute__((vector_size(32)));
typedef double vd8 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));

INLINE void load16(vf16 *v, const float *p) {
    memcpy(v, p, sizeof *v);
}

/* p[0..15] widened to double: lanes 0-7 into lo, 8-15 into hi. */
INLINE void widen16(vd8 *lo, vd8 *hi, const float *p) {
    vf8 a, b;
    memcpy(&a, p, sizeof a);
    memcpy(&b, p + 8, sizeof b);
    *lo = __builtin_convertvector(a, vd8);
    *hi = __builtin_convertvector(b, vd8);
}

/* v[0..15] widened to double, as widen16. */
INLINE void widen16v(vd8 *lo, vd8 *hi, const vf16 *v) {
    float t[LANES];
    memcpy(t, v, sizeof t);
    widen16(lo, hi, t);
}

/* The partials back into their array, for the scalar tail and the combine in lane order. */
INLINE void store_partials(double *acc, const vd8 *lo, const vd8 *hi) {
    memcpy(acc, lo, sizeof *lo);
    memcpy(acc + 8, hi, sizeof *hi);
}

/* m[l] = x[l] > m[l] ? x[l] : m[l] per lane (a NaN in x leaves m[l]): the scalar max's select, bit for bit. */
INLINE void max_lanes(vf16 *m, const float *p) {
    vf16 x;
    vi16 xi, mi;
    memcpy(&x, p, sizeof x);
    vi16 gt = x > *m;
    memcpy(&xi, &x, sizeof xi);
    memcpy(&mi, m, sizeof mi);
    mi = (xi & gt) | (mi & ~gt);
    memcpy(m, &mi, sizeof mi);
}

static const float GELU_C = 0.797884560802865355879892119869f; /* (float) sqrt(2 / pi) */
static const float GELU_A = 0.044715f;

static inline float from_bits(int32_t i) {
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

static inline float sigmoid(float x) {
    return 1.0f / (1.0f + fexp(-x));
}

EXPORT int ttpipe_cpu_abi_version(void) {
    return 11;
}

/*
 * The bf16 dot-product peak, measured (MachinePeak.bf16Gflops): `iterations` passes of 12 independent
 * chains of vdpbf16ps on zmm registers (each instruction 16 fp32 lanes x 2 bf16 products x 2 FLOPs = 64
 * FLOPs); returns the FLOPs done, or 0 where the CPU has no avx512_bf16 (nothing runs). The chains are in
 * assembly: C would let the compiler merge twelve identical chains into one.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx512f,avx512bf16"))) static void bf16_dot_chains(long n) {
    __asm__ volatile(
        "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
        "vmovaps %%zmm0, %%zmm1\n\t vmovaps %%zmm0, %%zmm2\n\t vmovaps %%zmm0, %%zmm3\n\t"
        "vmovaps %%zmm0, %%zmm4\n\t vmovaps %%zmm0, %%zmm5\n\t vmovaps %%zmm0, %%zmm6\n\t"
        "vmovaps %%zmm0, %%zmm7\n\t vmovaps %%zmm0, %%zmm8\n\t vmovaps %%zmm0, %%zmm9\n\t"
        "vmovaps %%zmm0, %%zmm10\n\t vmovaps %%zmm0, %%zmm11\n\t"
        "vpternlogd $0xff, %%zmm12, %%zmm12, %%zmm12\n\t"      /* every bit set */
        "vpsrlw $2, %%zmm12, %%zmm12\n\t"                     /* bf16 0x3fff, 1.99 */
        "vpsrlw $3, %%zmm12, %%zmm13\n\t"                     /* bf16 0x07ff, about 2^-112: the sums stay finite */
        "1:\n\t"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm0\n\t vdpbf16ps %%zmm13, %%zmm12, %%zmm1\n\t"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm2\n\t vdpbf16ps %%zmm13, %%zmm12, %%zmm3\n\t"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm4\n\t vdpbf16ps %%zmm13, %%zmm12, %%zmm5\n\t"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm6\n\t vdpbf16ps %%zmm13, %%zmm12, %%zmm7\n\t"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm8\n\t vdpbf16ps %%zmm13, %%zmm12, %%zmm9\n\t"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm10\n\t vdpbf16ps %%zmm13, %%zmm12, %%zmm11\n\t"
        "dec %0\n\t"
        "jnz 1b\n\t"
        "vzeroupper\n\t"
        : "+r"(n)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
          "xmm13", "cc");
}
#endif

EXPORT int64_t ttpipe_cpu_bf16_dot_chains(int64_t iterations) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    if (iterations <= 0 || !__builtin_cpu_supports("avx512bf16")) return 0;
    bf16_dot_chains(iterations);
    return iterations * 12 * 64;
#else
    (void) iterations;
    return 0;
#endif
}

/*
 * What this build holds, as data (reading it runs no code, so a loader can check it before calling a
 * function the CPU might not execute): "clones" for the cloned build, else the one x86-64 level the
 * compiler targeted (-DTTPIPE_NO_CLONES -march=...), or "generic" off x86-64.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TTPIPE_NO_CLONES)
#define TTPIPE_BUILD "clones"
#elif defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512CD__) \
    && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define TTPIPE_BUILD "x86-64-v4"
#elif defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__BMI2__)
#define TTPIPE_BUILD "x86-64-v3"
#elif defined(__x86_64__) && defined(__SSE4_2__) && defined(__POPCNT__)
#define TTPIPE_BUILD "x86-64-v2"
#elif defined(__x86_64__)
#define TTPIPE_BUILD "x86-64"
#else
#define TTPIPE_BUILD "generic"
#endif
EXPORT const char ttpipe_cpu_build[] = TTPIPE_BUILD;

/* Which clone the loader picks, for run records: the target_clones resolver's own test of the CPU. */
EXPORT const char *ttpipe_cpu_variant(void) {
#if defined(TTPIPE_NO_CLONES)
    return TTPIPE_BUILD;
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v4")) return "avx512";
    if (__builtin_cpu_supports("x86-64-v3")) return "avx2";
    return "sse2";
#else
    return "generic";
#endif
}

/*
 * bf16 <-> fp32 (Convert, BFloat16): widening is a shift; narrowing rounds to nearest even, and a NaN keeps its
 * sign and top payload bits and is forced quiet, as BFloat16.fromFloat does.
 */
static inline uint16_t to_bf16(uint32_t bits) {
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) return (uint16_t) ((bits >> 16) | 0x0040u);
    return (uint16_t) ((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/*
 * Kernels that take bf16 arrays: a kernel's `types` has bit i set when its i-th array operand (in the order its comment
 * lists) holds bf16, else fp32. The kernel computes on fp32 as before, on pieces of at most STAGE elements: a bf16 input
 * piece is widened into scratch first (exact), a bf16 output piece is computed in scratch and rounded once at the end,
 * so the bits are those of widening the whole array, the fp32 kernel, then rounding the whole result (Fp32Staging),
 * with only bf16 bytes moving through memory.
 */
enum { STAGE = 2048 };

INLINE float widen(uint16_t h) {
    return from_bits((int32_t) ((uint32_t) h << 16));
}

/* A piece of an input array as fp32: the array itself (fp32), or its widened copy in scratch (bf16). */
INLINE const float *stage_in(const void *base, int64_t off, int64_t len, int bf16, float *scratch) {
    if (!bf16) return (const float *) base + off;
    const uint16_t *h = (const uint16_t *) base + off;
    for (int64_t j = 0; j < len; j++) scratch[j] = widen(h[j]);
    return scratch;
}

/* Where a kernel writes a piece of an output array: the array itself (fp32), or scratch to round afterwards (bf16). */
INLINE float *stage_out(void *base, int64_t off, int bf16, float *scratch) {
    return bf16 ? scratch : (float *) base + off;
}

/* A piece of an output array in read-modify-write: as stage_in, written back by stage_done. */

/* Rounds a bf16 output piece computed in scratch into the array. */
INLINE void stage_done(void *base, int64_t off, int64_t len, int bf16, const float *scratch) {
    if (!bf16) return;
    uint16_t *h = (uint16_t *) base + off;
    for (int64_t j = 0; j < len; j++) {
        uint32_t b;
        memcpy(&b, &scratch[j], sizeof b);
        h[j] = to_bf16(b);
    }
}

/* Scratch for `count` staged rows of `len` floats when any of `types` is bf16 (NULL otherwise, or if malloc fails). */
INLINE float *stage_scratch(int types, int count, int64_t len) {
    return types ? (float *) malloc((size_t) count * (size_t) len * sizeof(float)) : NULL;
}

CLONES EXPORT void ttpipe_cpu_bf16_to_float(uint32_t *restrict out, const uint16_t *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = (uint32_t) x[i] << 16;
}

CLONES EXPORT void ttpipe_cpu_float_to_bf16(uint16_t *restrict out, const uint32_t *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = to_bf16(x[i]);
}

/* fp32 to the nearest bf16-representable fp32 value; out may be x. */
CLONES EXPORT void ttpipe_cpu_round_to_bf16(uint32_t *out, const uint32_t *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = (uint32_t) to_bf16(x[i]) << 16;
}

/*
 * A tile of fp32 sums, rows x cols (row strides ldc in c, ldo in out), plus bias[j] if bias is not null, rounded once to
 * bf16 (Convert.tileToBf16).
 */
CLONES EXPORT void ttpipe_cpu_tile_to_bf16(uint16_t *restrict out, int64_t ldo, const float *restrict c, int64_t ldc,
                                           int64_t rows, int64_t cols, const float *restrict bias) {
    for (int64_t i = 0; i < rows; i++) {
        const float *ci = c + i * ldc;
        uint16_t *oi = out + i * ldo;
        if (bias) {
            for (int64_t j = 0; j < cols; j++) {
                float v = ci[j] + bias[j];
                uint32_t b;
                memcpy(&b, &v, sizeof b);
                oi[j] = to_bf16(b);
            }
        } else {
            for (int64_t j = 0; j < cols; j++) {
                uint32_t b;
                memcpy(&b, &ci[j], sizeof b);
                oi[j] = to_bf16(b);
            }
        }
    }
}

/* The activations one element at a time; the loops below inline them, so every layout computes the same operations. */
INLINE float gelu1(float v) {
    float u = GELU_C * (v + GELU_A * v * v * v);
    return v * sigmoid(2.0f * u);
}

/* GELU's derivative at v: its gradient is g times this, the last operation. */
INLINE float gelu_slope(float v) {
    float u = GELU_C * (v + GELU_A * v * v * v);
    float du = GELU_C * (1.0f + 3.0f * GELU_A * v * v);
    float s = sigmoid(2.0f * u);
    return s + 2.0f * v * s * (1.0f - s) * du;
}

INLINE float gelu_backward1(float g, float v) {
    return g * gelu_slope(v);
}

INLINE float silu1(float v) {
    return v * sigmoid(v);
}

/* SiLU's gradient is (g * sigmoid(v)) * silu_factor(v), in that order. */
INLINE float silu_factor(float v) {
    return 1.0f + v * (1.0f - sigmoid(v));
}

INLINE float silu_backward1(float g, float v) {
    return g * sigmoid(v) * silu_factor(v);
}

/*
 * The activations of a bf16 argument as tables: a bf16 value is one of 65536, so each function of v alone is computed
 * once for every one of them, by the code above, when the library loads (about 1 ms), and a kernel whose x is bf16 looks
 * its values up instead of computing them. A table holds the very float the code computes, so the results (and the
 * gradients, whose last operations on g stay in the kernels) keep their bits, NaNs included.
 */
static float gelu_of[65536], gelu_slope_of[65536], silu_of[65536], sigmoid_of[65536], silu_factor_of[65536];

__attribute__((constructor)) static void activation_tables(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float v = from_bits((int32_t) (h << 16));
        gelu_of[h] = gelu1(v);
        gelu_slope_of[h] = gelu_slope(v);
        silu_of[h] = silu1(v);
        sigmoid_of[h] = sigmoid(v);
        silu_factor_of[h] = silu_factor(v);
    }
}

INLINE uint16_t round_bf16(float v) {
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    return to_bf16(b);
}

/*
 * out = f(x) over n elements; arrays: out, x. All fp32: in place. Otherwise staged a piece at a time (a bf16 x is
 * looked up in a table instead: unary_table). Every way computes f on the same fp32 values.
 */
INLINE void unary_typed(float (*f)(float), void *out, const void *x, int64_t n, int types) {
    if (!types) {
        float *restrict o = (float *) out;
        const float *restrict a = (const float *) x;
        for (int64_t i = 0; i < n; i++) o[i] = f(a[i]);
        return;
    }
    float sx[STAGE], so[STAGE];
    for (int64_t c = 0; c < n; c += STAGE) {
        int64_t len = n - c < STAGE ? n - c : STAGE;
        const float *restrict xs = stage_in(x, c, len, types & 2, sx);
        float *restrict os = stage_out(out, c, types & 1, so);
        for (int64_t i = 0; i < len; i++) os[i] = f(xs[i]);
        stage_done(out, c, len, types & 1, os);
    }
}

/* dx = f'(x) dy over n elements; arrays: dx, dy, x; the layouts as unary_typed. */
INLINE void backward_typed(float (*f)(float, float), void *dx, const void *dy, const void *x, int64_t n, int types) {
    if (!types) {
        float *restrict o = (float *) dx;
        const float *restrict g = (const float *) dy, *restrict a = (const float *) x;
        for (int64_t i = 0; i < n; i++) o[i] = f(g[i], a[i]);
        return;
    }
    float sy[STAGE], sx[STAGE], so[STAGE];
    for (int64_t c = 0; c < n; c += STAGE) {
        int64_t len = n - c < STAGE ? n - c : STAGE;
        const float *restrict ys = stage_in(dy, c, len, types & 2, sy);
        const float *restrict xs = stage_in(x, c, len, types & 4, sx);
        float *restrict os = stage_out(dx, c, types & 1, so);
        for (int64_t i = 0; i < len; i++) os[i] = f(ys[i], xs[i]);
        stage_done(dx, c, len, types & 1, os);
    }
}

/* out = f(x) for a bf16 x, looked up in f's table (activation_tables); out fp32, or rounded to bf16 (out_bf16). */
INLINE void unary_table(const float *restrict table, void *out, const uint16_t *restrict x, int64_t n, int out_bf16) {
    if (out_bf16) {
        uint16_t *restrict o = (uint16_t *) out;
        for (int64_t i = 0; i < n; i++) o[i] = round_bf16(table[x[i]]);
    } else {
        float *restrict o = (float *) out;
        for (int64_t i = 0; i < n; i++) o[i] = table[x[i]];
    }
}

/* dx = g * a[x] (then * b[x] when b is not null) for a bf16 x, g = dy widened (dy_bf16) or as is; dx rounded (dx_bf16). */
INLINE void backward_table_as(const float *restrict a, const float *restrict b, void *dx, const void *dy,
                              const uint16_t *restrict x, int64_t n, int dy_bf16, int dx_bf16) {
    const uint16_t *restrict g16 = (const uint16_t *) dy;
    const float *restrict g32 = (const float *) dy;
    uint16_t *restrict o16 = (uint16_t *) dx;
    float *restrict o32 = (float *) dx;
    for (int64_t i = 0; i < n; i++) {
        float v = (dy_bf16 ? widen(g16[i]) : g32[i]) * a[x[i]];
        if (b) v = v * b[x[i]];
        if (dx_bf16) o16[i] = round_bf16(v);
        else o32[i] = v;
    }
}

/* backward_table_as for the layouts of `types` (dx bit 0, dy bit 1; x is bf16). */
INLINE void backward_table(const float *a, const float *b, void *dx, const void *dy, const uint16_t *x, int64_t n,
                           int types) {
    switch (types & 3) {
        case 0: backward_table_as(a, b, dx, dy, x, n, 0, 0); break;
        case 1: backward_table_as(a, b, dx, dy, x, n, 0, 1); break;
        case 2: backward_table_as(a, b, dx, dy, x, n, 1, 0); break;
        default: backward_table_as(a, b, dx, dy, x, n, 1, 1); break;
    }
}

CLONES EXPORT void ttpipe_cpu_gelu(void *out, const void *x, int64_t n, int types) {
    if (types & 2) unary_table(gelu_of, out, (const uint16_t *) x, n, types & 1);
    else unary_typed(gelu1, out, x, n, types);
}

CLONES EXPORT void ttpipe_cpu_gelu_backward(void *dx, const void *dy, const void *x, int64_t n, int types) {
    if (types & 4) backward_table(gelu_slope_of, NULL, dx, dy, (const uint16_t *) x, n, types);
    else backward_typed(gelu_backward1, dx, dy, x, n, types);
}

CLONES EXPORT void ttpipe_cpu_silu(void *out, const void *x, int64_t n, int types) {
    if (types & 2) unary_table(silu_of, out, (const uint16_t *) x, n, types & 1);
    else unary_typed(silu1, out, x, n, types);
}

CLONES EXPORT void ttpipe_cpu_silu_backward(void *dx, const void *dy, const void *x, int64_t n, int types) {
    if (types & 4) backward_table(sigmoid_of, silu_factor_of, dx, dy, (const uint16_t *) x, n, types);
    else backward_typed(silu_backward1, dx, dy, x, n, types);
}

/* The number of keys row r of a block sees: first + r clamped to [0, keys] when causal, else keys. */
static inline int seen(int first, int r, int keys, int causal) {
    if (!causal) return keys;
    int m = first + r;
    return m < 0 ? 0 : m > keys ? keys : m;
}

/* The max of row[0..n) in LANES partials (element j to partial j % LANES, `>` keeps the partial), combined in lane order. */
INLINE float row_max(const float *restrict row, int64_t n) {
    float mx[LANES];
    for (int l = 0; l < LANES; l++) mx[l] = from_bits((int32_t) 0xff800000); /* -inf */
    int64_t j = 0;
    vf16 mv;
    load16(&mv, mx);
    for (; j + LANES <= n; j += LANES) max_lanes(&mv, row + j);
    memcpy(mx, &mv, sizeof mv);
    for (int l = 0; j + l < n; l++) mx[l] = row[j + l] > mx[l] ? row[j + l] : mx[l];
    float max = mx[0];
    for (int l = 1; l < LANES; l++) max = mx[l] > max ? mx[l] : max;
    return max;
}

/* The sum of e[0..n) in double, LANES partials (element j to partial j % LANES) combined in lane order. */
INLINE double lane_sum(const float *restrict e, int64_t n) {
    double acc[LANES];
    int64_t j = 0;
    vd8 lo = {0}, hi = {0};
    for (; j + LANES <= n; j += LANES) {
        vd8 a, b;
        widen16(&a, &b, e + j);
        lo += a;
        hi += b;
    }
    store_partials(acc, &lo, &hi);
    for (int l = 0; j + l < n; l++) acc[l] += e[j + l];
    double sum = acc[0];
    for (int l = 1; l < LANES; l++) sum += acc[l];
    return sum;
}

/* e[j] = exp(x[j] - max) for j < n; returns lane_sum of them. */
INLINE double exp_sum(float *restrict e, const float *restrict x, int64_t n, float max) {
    for (int64_t j = 0; j < n; j++) e[j] = fexp(x[j] - max);
    return lane_sum(e, n);
}

/* exp_sum in place: e[j] = exp(e[j] - max). */
INLINE double exp_sum_in_place(float *restrict e, int64_t n, float max) {
    for (int64_t j = 0; j < n; j++) e[j] = fexp(e[j] - max);
    return lane_sum(e, n);
}

/*
 * A block's score tile s [rows, keys] to probabilities in place, row by row (FlashAttention.softmaxRows):
 * row r sees seen(first, r) keys, the rest become 0. Writes each row's max and sum of exp(s - max)
 * (in double) to max[r] and sum[r]; the caller takes the log.
 */
INLINE void softmax_rows(float *restrict s, uint16_t *restrict pb, int rows, int keys, int first, int causal,
                         float *restrict max_out, double *restrict sum_out) {
    for (int r = 0; r < rows; r++) {
        float *row = s + (int64_t) r * keys;
        int m = seen(first, r, keys, causal);
        float max = row_max(row, m);
        double sum = exp_sum_in_place(row, m, max);
        float inv = (float) (1.0 / sum);
        int j;
        if (pb) {
            uint16_t *out = pb + (int64_t) r * keys;
            for (j = 0; j < m; j++) out[j] = round_bf16(row[j] * inv);
            for (j = m; j < keys; j++) out[j] = 0;
        } else {
            for (j = 0; j < m; j++) row[j] *= inv;
            for (j = m; j < keys; j++) row[j] = 0.0f;
        }
        max_out[r] = max;
        sum_out[r] = sum;
    }
}

CLONES EXPORT void ttpipe_cpu_softmax_rows(float *restrict s, int rows, int keys, int first, int causal,
                                           float *restrict max_out, double *restrict sum_out) {
    softmax_rows(s, NULL, rows, keys, first, causal, max_out, sum_out);
}

/*
 * softmax_rows for a bf16 block: the probabilities go, rounded to bf16, to pb [rows, keys] instead of back into s (whose
 * contents are then undefined). The bits of ttpipe_cpu_softmax_rows then ttpipe_cpu_tile_to_bf16, in one pass.
 */
CLONES EXPORT void ttpipe_cpu_softmax_rows_bf16(float *restrict s, uint16_t *restrict pb, int rows, int keys, int first,
                                                int causal, float *restrict max_out, double *restrict sum_out) {
    softmax_rows(s, pb, rows, keys, first, causal, max_out, sum_out);
}

/*
 * Cross-entropy's log-sum-exp, without the log (which stays in Java): for each of `rows` rows of x [rows, v], its max
 * (max_out) and the sum of exp(x - max) (sum_out), x unchanged; scratch holds v floats. types bit 0: x is bf16 (each
 * row widened into scratch first: the bits of widening the whole array). Softmax.crossEntropy.
 */
CLONES EXPORT void ttpipe_cpu_row_max_sumexp(const void *restrict x, int64_t rows, int v, float *restrict scratch,
                                             float *restrict max_out, double *restrict sum_out, int types) {
    for (int64_t r = 0; r < rows; r++) {
        float max;
        if (types & 1) {
            const uint16_t *h = (const uint16_t *) x + r * v;
            for (int j = 0; j < v; j++) scratch[j] = widen(h[j]);
            max = row_max(scratch, v);
            sum_out[r] = exp_sum_in_place(scratch, v, max);
        } else {
            const float *row = (const float *) x + r * v;
            max = row_max(row, v);
            sum_out[r] = exp_sum(scratch, row, v, max);
        }
        max_out[r] = max;
    }
}

/*
 * Cross-entropy's gradient for rows [lo, hi) of x [rows, v]: dx = scale (softmax(x) - onehot(target)), the softmax as
 * exp(x - max) times (float) (scale / sum); a row whose target is `ignore` gets 0. types bit 0: dx is bf16 (each row
 * computed in scratch, then rounded once), bit 1: x is bf16 (each row widened into scratch first); scratch holds 2 v
 * floats when either is set. Softmax.crossEntropyBackward.
 */
CLONES EXPORT void ttpipe_cpu_cross_entropy_backward_rows(void *restrict dx, const void *restrict x,
                                                          const int32_t *restrict targets, int64_t lo, int64_t hi, int v,
                                                          int ignore, float scale, float *restrict scratch, int types) {
    for (int64_t r = lo; r < hi; r++) {
        float *d = (types & 1) ? scratch : (float *) dx + r * v;
        const float *row = (const float *) x + r * v;
        if (types & 2) {
            const uint16_t *h = (const uint16_t *) x + r * v;
            for (int j = 0; j < v; j++) scratch[v + j] = widen(h[j]);
            row = scratch + v;
        }
        int t = targets[r];
        if (t == ignore) {
            for (int j = 0; j < v; j++) d[j] = 0.0f;
        } else {
            float max = row_max(row, v);
            double sum = exp_sum(d, row, v, max);
            float k = (float) (scale / sum);
            for (int j = 0; j < v; j++) d[j] *= k;
            d[t] -= scale;
        }
        if (types & 1) {
            uint16_t *o = (uint16_t *) dx + r * v;
            for (int j = 0; j < v; j++) o[j] = round_bf16(d[j]);
        }
    }
}

/* D = sum of g[e] y[e] over hd elements in double, LANES partials combined in lane order (one row of dO and o). */
INLINE float row_dot(const float *restrict g, const float *restrict y, int hd) {
    double acc[LANES];
    int e = 0;
    vd8 lo = {0}, hi = {0};
    for (; e + LANES <= hd; e += LANES) {
        vd8 ga, gb, ya, yb;
        widen16(&ga, &gb, g + e);
        widen16(&ya, &yb, y + e);
        lo += ga * ya;
        hi += gb * yb;
    }
    store_partials(acc, &lo, &hi);
    for (int l = 0; e + l < hd; l++) acc[l] += (double) g[e + l] * (double) y[e + l];
    double dd = acc[0];
    for (int l = 1; l < LANES; l++) dd += acc[l];
    return (float) dd;
}

/*
 * The backward rows of a block (FlashAttention.backwardRows): p [rows, keys] holds scale q k^T and
 * becomes P = exp(p - lse); ds [rows, keys] holds dO v^T and becomes scale P (ds - D) with
 * D = dO_i . o_i (in double); keys a row does not see become 0. dO and o point at the block's first
 * row, hd floats per row; lse at its first row's log-sum-exp.
 */
CLONES EXPORT void ttpipe_cpu_attention_backward_rows(float *restrict p, float *restrict ds, int rows, int keys,
                                                      int first, int causal, const float *restrict lse,
                                                      const float *restrict dO, const float *restrict o, int hd,
                                                      float scale) {
    for (int r = 0; r < rows; r++) {
        float *pr = p + (int64_t) r * keys;
        float *dr = ds + (int64_t) r * keys;
        int m = seen(first, r, keys, causal);
        float d = row_dot(dO + (int64_t) r * hd, o + (int64_t) r * hd, hd);
        float l0 = lse[r];
        for (int j = 0; j < m; j++) {
            float pj = fexp(pr[j] - l0);
            pr[j] = pj;
            dr[j] = scale * pj * (dr[j] - d);
        }
        for (int j = m; j < keys; j++) {
            pr[j] = 0.0f;
            dr[j] = 0.0f;
        }
    }
}

/*
 * The backward rows of a bf16 block: dO and o are bf16 (hd per row), and P and dS go, rounded to bf16, to pb and dsb
 * [rows, keys] instead of back into p and ds. The bits of widening dO and o, ttpipe_cpu_attention_backward_rows, then
 * ttpipe_cpu_tile_to_bf16 of both tiles, a row at a time: P and dS of a row (a piece of up to STAGE keys) in fp32 on the
 * stack, then both rounded. Computing and rounding them in one loop gave the same bits 1.6 times slower: GCC vectorised
 * that loop worse than these two.
 */
CLONES EXPORT void ttpipe_cpu_attention_backward_rows_bf16(const float *restrict p, const float *restrict ds,
                                                           uint16_t *restrict pb, uint16_t *restrict dsb, int rows,
                                                           int keys, int first, int causal, const float *restrict lse,
                                                           const uint16_t *restrict dO, const uint16_t *restrict o,
                                                           int hd, float scale) {
    float rows_in[2 * 256];               /* a row of dO and o widened: here, or on the heap for hd > 256 */
    float *g = hd <= 256 ? rows_in : (float *) malloc(2 * (size_t) hd * sizeof(float));
    if (!g) abort();
    float *y = g + hd;
    float sp[STAGE], sd[STAGE];           /* a piece of a row's P and dS, before rounding */
    for (int r = 0; r < rows; r++) {
        const float *pr = p + (int64_t) r * keys;
        const float *dr = ds + (int64_t) r * keys;
        uint16_t *pbr = pb + (int64_t) r * keys, *dsr = dsb + (int64_t) r * keys;
        int m = seen(first, r, keys, causal);
        for (int e = 0; e < hd; e++) {
            g[e] = widen(dO[(int64_t) r * hd + e]);
            y[e] = widen(o[(int64_t) r * hd + e]);
        }
        float d = row_dot(g, y, hd);
        float l0 = lse[r];
        for (int j0 = 0; j0 < m; j0 += STAGE) {
            int len = m - j0 < STAGE ? m - j0 : STAGE;
            for (int j = 0; j < len; j++) {
                float pj = fexp(pr[j0 + j] - l0);
                sp[j] = pj;
                sd[j] = scale * pj * (dr[j0 + j] - d);
            }
            ttpipe_cpu_float_to_bf16(pbr + j0, (const uint32_t *) sp, len);
            ttpipe_cpu_float_to_bf16(dsr + j0, (const uint32_t *) sd, len);
        }
        for (int j = m; j < keys; j++) {
            pbr[j] = 0;
            dsr[j] = 0;
        }
    }
    if (g != rows_in) free(g);
}

/* One row of binary with out and a bf16 and b bf16 (bbf16) or fp32, each element widened, computed and rounded in one pass. */
INLINE void binary_bf16_row(uint16_t *restrict o, const uint16_t *restrict x, const void *y, int bbf16, int64_t nb,
                            int mul) {
    if (bbf16) {
        const uint16_t *restrict h = (const uint16_t *) y;
        if (mul) {
            for (int64_t j = 0; j < nb; j++) o[j] = round_bf16(widen(x[j]) * widen(h[j]));
        } else {
            for (int64_t j = 0; j < nb; j++) o[j] = round_bf16(widen(x[j]) + widen(h[j]));
        }
    } else {
        const float *restrict f = (const float *) y;
        if (mul) {
            for (int64_t j = 0; j < nb; j++) o[j] = round_bf16(widen(x[j]) * f[j]);
        } else {
            for (int64_t j = 0; j < nb; j++) o[j] = round_bf16(widen(x[j]) + f[j]);
        }
    }
}

/* out[r * nb + j] = a[r * nb + j] + b[j] (or *) for r < rows (Elementwise.binary; nb == n is one row). */
CLONES EXPORT void ttpipe_cpu_binary(void *out, const void *a, const void *b, int64_t rows, int64_t nb, int mul,
                                     int types) {
    if ((types & 3) == 3) {                /* out and a bf16: one pass, in registers */
        for (int64_t r = 0; r < rows; r++)
            binary_bf16_row((uint16_t *) out + r * nb, (const uint16_t *) a + r * nb, b, types & 4, nb, mul);
        return;
    }
    float sa[STAGE], sb[STAGE], so[STAGE];
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < nb; c += STAGE) {
            int64_t len = nb - c < STAGE ? nb - c : STAGE;
            const float *x = stage_in(a, r * nb + c, len, types & 2, sa);
            const float *y = stage_in(b, c, len, types & 4, sb);
            float *o = stage_out(out, r * nb + c, types & 1, so);
            if (mul) {
                for (int64_t j = 0; j < len; j++) o[j] = x[j] * y[j];
            } else {
                for (int64_t j = 0; j < len; j++) o[j] = x[j] + y[j];
            }
            stage_done(out, r * nb + c, len, types & 1, o);
        }
    }
}

/* AdamW over n elements (Optimizers.adamw), in place. */
CLONES EXPORT void ttpipe_cpu_adamw(float *restrict param, const float *restrict grad, float *restrict m,
                                    float *restrict v, int64_t n, float b1, float b2, float gs, float decay,
                                    float step_size, float bc2_sqrt, float eps) {
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = (float) __builtin_sqrt((double) vi) / bc2_sqrt + eps;
        param[i] = param[i] * decay - step_size * mi / denom;
    }
}

/*
 * LayerNorm forward of rows [lo, hi) of x [rows, d] (Norms.layerNorm): mean and variance in double
 * with LANES partials, y = (x - mean) * rstd * gamma + beta (beta may be null).
 */
/* Arrays: y, x (gamma, beta, mean and rstd are fp32). */
CLONES EXPORT void ttpipe_cpu_layernorm(void *y, float *restrict mean, float *restrict rstd, const void *x,
                                        const float *restrict gamma, const float *restrict beta, int64_t lo, int64_t hi,
                                        int d, float eps, int types) {
    float *scratch = stage_scratch(types, 2, d);
    if (types && !scratch) abort();
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = stage_in(x, r * d, d, types & 2, scratch);
        float *yr = stage_out(y, r * d, types & 1, scratch ? scratch + d : NULL);
        double s[LANES], ss[LANES];
        int j = 0;
        vd8 slo = {0}, shi = {0}, sslo = {0}, sshi = {0};
        for (; j + LANES <= d; j += LANES) {
            vd8 a, b;
            widen16(&a, &b, xr + j);
            slo += a;
            shi += b;
            sslo += a * a;
            sshi += b * b;
        }
        store_partials(s, &slo, &shi);
        store_partials(ss, &sslo, &sshi);
        for (int l = 0; j + l < d; l++) {
            double v = xr[j + l];
            s[l] += v;
            ss[l] += v * v;
        }
        double st = s[0], sst = ss[0];
        for (int l = 1; l < LANES; l++) {
            st += s[l];
            sst += ss[l];
        }
        double mu = st / d;
        double var = sst / d - mu * mu;
        if (!(var > 0.0)) var = var != var ? var : 0.0; /* Math.max(0.0, var): NaN stays NaN */
        float rs = (float) (1.0 / __builtin_sqrt(var + eps));
        float mf = (float) mu;
        if (beta) {
            for (j = 0; j < d; j++) yr[j] = (xr[j] - mf) * rs * gamma[j] + beta[j];
        } else {
            for (j = 0; j < d; j++) yr[j] = (xr[j] - mf) * rs * gamma[j] + 0.0f;
        }
        mean[r] = mf;
        rstd[r] = rs;
        stage_done(y, r * d, d, types & 1, yr);
    }
    free(scratch);
}

/*
 * LayerNorm's input gradient for rows [lo, hi) (Norms.layerNormBackwardInput):
 * dx = rstd (g - mean(g) - xhat mean(g xhat)), g = gamma dy, the means in double with LANES partials.
 */
/* Arrays: dx, dy, x (gamma, mean and rstd are fp32). */
CLONES EXPORT void ttpipe_cpu_layernorm_backward_input(void *dx, const void *dy, const void *x,
                                                       const float *restrict gamma, const float *restrict mean,
                                                       const float *restrict rstd, int64_t lo, int64_t hi, int d,
                                                       int types) {
    float *scratch = stage_scratch(types, 3, d);
    if (types && !scratch) abort();
    for (int64_t r = lo; r < hi; r++) {
        const float *dyr = stage_in(dy, r * d, d, types & 2, scratch);
        const float *xr = stage_in(x, r * d, d, types & 4, scratch ? scratch + d : NULL);
        float *dxr = stage_out(dx, r * d, types & 1, scratch ? scratch + 2 * (int64_t) d : NULL);
        float m = mean[r];
        float rs = rstd[r];
        double sg[LANES], sgx[LANES];
        int j = 0;
        vd8 glo = {0}, ghi = {0}, gxlo = {0}, gxhi = {0};
        double rsd = rs;
        for (; j + LANES <= d; j += LANES) {
            vf16 gm, dv, xv;
            load16(&gm, gamma + j);
            load16(&dv, dyr + j);
            load16(&xv, xr + j);
            vf16 gf = gm * dv, xc = xv - m;
            vd8 ga, gb, ca, cb;
            widen16v(&ga, &gb, &gf);                     /* double g = gamma * dy (a float product) */
            widen16v(&ca, &cb, &xc);                     /* (double) (x - m) */
            glo += ga;
            ghi += gb;
            gxlo += ga * ca * rsd;                       /* g * (x - m) * rs, left to right, in double */
            gxhi += gb * cb * rsd;
        }
        store_partials(sg, &glo, &ghi);
        store_partials(sgx, &gxlo, &gxhi);
        for (int l = 0; j + l < d; l++) {
            double g = gamma[j + l] * dyr[j + l];
            sg[l] += g;
            sgx[l] += g * (xr[j + l] - m) * rs;
        }
        double sgt = sg[0], sgxt = sgx[0];
        for (int l = 1; l < LANES; l++) {
            sgt += sg[l];
            sgxt += sgx[l];
        }
        float mg = (float) (sgt / d);
        float mgx = (float) (sgxt / d);
        for (j = 0; j < d; j++) {
            float xhat = (xr[j] - m) * rs;
            float g = gamma[j] * dyr[j];
            dxr[j] = rs * (g - mg - xhat * mgx);
        }
        stage_done(dx, r * d, d, types & 1, dxr);
    }
    free(scratch);
}

/*
 * A permutation's output rows [lo, hi) of 4-byte elements (Permute.permute): output row r gathers len
 * elements from x at stride step, starting where its index over out_dims[0 .. rank-2] (row-major) and
 * in_stride put it.
 */
/* Where output row r of a permutation starts in x (elements). */
INLINE int64_t permute_row(int64_t r, int rank, const int32_t *out_dims, const int32_t *in_stride) {
    int64_t ib = 0, rem = r;
    for (int i = rank - 2; i >= 0; i--) {
        ib += (rem % out_dims[i]) * in_stride[i];
        rem /= out_dims[i];
    }
    return ib;
}

CLONES EXPORT void ttpipe_cpu_permute4(int32_t *restrict out, const int32_t *restrict x, int rank,
                                       const int32_t *out_dims, const int32_t *in_stride, int64_t lo, int64_t hi,
                                       int len, int step) {
    for (int64_t r = lo; r < hi; r++) {
        int32_t *o = out + r * len;
        const int32_t *src = x + permute_row(r, rank, out_dims, in_stride);
        if (step == 1) {
            memcpy(o, src, (size_t) len * sizeof *o);
        } else {
            for (int j = 0; j < len; j++) o[j] = src[(int64_t) j * step];
        }
    }
}

/* The same for 2-byte elements (bf16). */
CLONES EXPORT void ttpipe_cpu_permute2(int16_t *restrict out, const int16_t *restrict x, int rank,
                                       const int32_t *out_dims, const int32_t *in_stride, int64_t lo, int64_t hi,
                                       int len, int step) {
    for (int64_t r = lo; r < hi; r++) {
        int16_t *o = out + r * len;
        const int16_t *src = x + permute_row(r, rank, out_dims, in_stride);
        if (step == 1) {
            memcpy(o, src, (size_t) len * sizeof *o);
        } else {
            for (int j = 0; j < len; j++) o[j] = src[(int64_t) j * step];
        }
    }
}

/*
 * LayerNorm's weight gradients for columns [lo, hi) (Norms.layerNormBackwardWeight): dgamma[j] (+)= sum over
 * rows of dy (x - mean) rstd, dbeta[j] (+)= sum of dy, row by row in order.
 */
/* Arrays: dy, x (mean, rstd, dgamma and dbeta are fp32). */
CLONES EXPORT void ttpipe_cpu_layernorm_backward_weight(const void *dy, const void *x, const float *restrict mean,
                                                        const float *restrict rstd, float *restrict dgamma,
                                                        float *restrict dbeta, int64_t rows, int d, int lo, int hi,
                                                        int accumulate, int types) {
    if (!accumulate) {
        for (int j = lo; j < hi; j++) dgamma[j] = dbeta[j] = 0.0f;
    }
    int64_t len = hi - lo;
    if (types == 3) {                      /* dy and x bf16: each element widened as it is read */
        float *restrict dg = dgamma + lo, *restrict db = dbeta + lo;
        for (int64_t r = 0; r < rows; r++) {
            const uint16_t *restrict g = (const uint16_t *) dy + r * d + lo, *restrict xr = (const uint16_t *) x + r * d + lo;
            float m = mean[r];
            float rs = rstd[r];
            for (int64_t j = 0; j < len; j++) {
                float gj = widen(g[j]);
                dg[j] = dg[j] + gj * (widen(xr[j]) - m) * rs;
                db[j] = db[j] + gj;
            }
        }
        return;
    }
    float *scratch = stage_scratch(types, 2, len);
    if (types && !scratch) abort();
    for (int64_t r = 0; r < rows; r++) {
        const float *g = stage_in(dy, r * d + lo, len, types & 1, scratch);
        const float *xr = stage_in(x, r * d + lo, len, types & 2, scratch ? scratch + len : NULL);
        float m = mean[r];
        float rs = rstd[r];
        float *dg = dgamma + lo, *db = dbeta + lo;
        for (int64_t j = 0; j < len; j++) {
            dg[j] = dg[j] + g[j] * (xr[j] - m) * rs;
            db[j] = db[j] + g[j];
        }
    }
    free(scratch);
}

/* out[j] (+)= sum over rows of x[r * n + j] for j in [lo, hi), row by row in order (Reductions.sumRows). */
/* Arrays: x (out is fp32). */
CLONES EXPORT void ttpipe_cpu_sum_rows(const void *x, float *restrict out, int64_t rows, int64_t n, int64_t lo,
                                       int64_t hi, int accumulate, int types) {
    if (!accumulate) {
        for (int64_t j = lo; j < hi; j++) out[j] = 0.0f;
    }
    float *restrict o = out + lo;
    if (types & 1) {                       /* bf16 rows, each element widened as it is added */
        for (int64_t r = 0; r < rows; r++) {
            const uint16_t *restrict h = (const uint16_t *) x + r * n + lo;
            for (int64_t j = 0; j < hi - lo; j++) o[j] += widen(h[j]);
        }
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict row = (const float *) x + r * n + lo;
        for (int64_t j = 0; j < hi - lo; j++) o[j] += row[j];
    }
}

/* The sum of x[i]^2 in double over n elements, LANES partials (Reductions.sumSquares' chunks). */
CLONES EXPORT double ttpipe_cpu_sum_squares(const float *restrict x, int64_t n) {
    double acc[LANES];
    int64_t i = 0;
    vd8 lo = {0}, hi = {0};
    for (; i + LANES <= n; i += LANES) {
        vd8 a, b;
        widen16(&a, &b, x + i);
        lo += a * a;
        hi += b * b;
    }
    store_partials(acc, &lo, &hi);
    for (int l = 0; i + l < n; l++) {
        double v = x[i + l];
        acc[l] += v * v;
    }
    double s = acc[0];
    for (int l = 1; l < LANES; l++) s += acc[l];
    return s;
}

/*
 * C = alpha op(A) op(B) + beta C with A and B bf16 and C fp32, row-major (op: transposed when ta / tb; A is [m, k],
 * stored [k, m] when ta, B [k, n], stored [n, k] when tb), for CPUs without a bf16 dot product: the operands are widened
 * to fp32 while they are packed into cache-sized panels (BLIS's layout: A in MR-row slivers, B in NR-column slivers, both
 * [kc] deep), so no fp32 copy of an operand ever goes through memory, and the products are fp32 FMAs. One thread.
 *
 * The bits are a function of the shape alone, whichever kernel runs (AVX-512, AVX2): element (i, j) is, for each block of
 * GB_KC indices p (from 0), s = the FMA chain s = fma(a[i][p], b[p][j], s) from s = 0 in increasing p; the first block
 * gives c = alpha s (beta == 0) or alpha s + beta c, each later one c = c + alpha s, every operation rounded as written
 * (no contraction). A product of two bf16 values is exact in fp32, so these are the bf16 products, summed in fp32.
 */
enum { GB_KC = 384, GB_MC = 96 };

/* Per thread: the packed panels of A (GB_MC + MR rows) and of B (as many NR-column slivers as n needs), grown as needed. */
static pthread_key_t gb_key;
static pthread_once_t gb_once = PTHREAD_ONCE_INIT;
struct gb_work {
    size_t cap;
    float *buf;
};

static void gb_free(void *p) {
    struct gb_work *w = p;
    free(w->buf);
    free(w);
}

static void gb_init(void) {
    pthread_key_create(&gb_key, gb_free);
}

static float *gb_buffer(size_t floats) {
    pthread_once(&gb_once, gb_init);
    struct gb_work *w = pthread_getspecific(gb_key);
    if (!w) {
        w = calloc(1, sizeof *w);
        if (!w) return NULL;
        if (pthread_setspecific(gb_key, w) != 0) {
            free(w);
            return NULL;
        }
    }
    if (w->cap < floats) {
        free(w->buf);
        w->buf = aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
        w->cap = w->buf ? floats : 0;
    }
    return w->buf;
}

/* Indices q0 .. kc of gb_pack_a's rows of A stored as rows (not ta): one element at a time (the whole of them, or the tail
 * a vectorised pack leaves). */
INLINE void gb_pack_a_rows(float *restrict pa, int mr, const uint16_t *a, int lda, int i0, int rows, int p0, int q0, int kc) {
    for (int r = 0; r < mr; r++) {
        if (r < rows) {
            const uint16_t *s = a + (int64_t) (i0 + r) * lda + p0;
            for (int p = q0; p < kc; p++) pa[p * mr + r] = widen(s[p]);
        } else {
            for (int p = q0; p < kc; p++) pa[p * mr + r] = 0.0f;
        }
    }
}

/* Rows i0 .. i0+rows of op(A), columns p0 .. p0+kc, widened into pa as [kc][mr] (rows past `rows` zero). */
INLINE void gb_pack_a(float *restrict pa, int mr, const uint16_t *a, int lda, int ta, int i0, int rows, int p0, int kc) {
    if (!ta) {
        gb_pack_a_rows(pa, mr, a, lda, i0, rows, p0, 0, kc);
    } else {
        for (int p = 0; p < kc; p++) {
            const uint16_t *s = a + (int64_t) (p0 + p) * lda + i0;
            int r = 0;
            for (; r < rows; r++) pa[p * mr + r] = widen(s[r]);
            for (; r < mr; r++) pa[p * mr + r] = 0.0f;
        }
    }
}

/* Indices q0 .. kc of gb_pack_b's B stored transposed (tb): 16 indices at a time, so the strided writes stay in L1 (the
 * whole of them, or the tail a vectorised pack leaves). */
INLINE void gb_pack_b_cols(float *restrict pb, int nr, const uint16_t *b, int ldb, int j0, int cols, int p0, int q0,
                           int kc) {
    for (; q0 < kc; q0 += 16) {
        int qn = kc - q0 < 16 ? kc - q0 : 16;
        for (int c = 0; c < nr; c++) {
            float *d = pb + (int64_t) q0 * nr + c;
            if (c < cols) {
                const uint16_t *s = b + (int64_t) (j0 + c) * ldb + p0 + q0;
                for (int p = 0; p < qn; p++) d[p * nr] = widen(s[p]);
            } else {
                for (int p = 0; p < qn; p++) d[p * nr] = 0.0f;
            }
        }
    }
}

/* Rows p0 .. p0+kc of op(B), columns j0 .. j0+cols, widened into pb as [kc][nr] (columns past `cols` zero). */
INLINE void gb_pack_b(float *restrict pb, int nr, const uint16_t *b, int ldb, int tb, int j0, int cols, int p0, int kc) {
    if (!tb) {
        for (int p = 0; p < kc; p++) {
            const uint16_t *s = b + (int64_t) (p0 + p) * ldb + j0;
            int c = 0;
            for (; c < cols; c++) pb[p * nr + c] = widen(s[c]);
            for (; c < nr; c++) pb[p * nr + c] = 0.0f;
        }
        return;
    }
    gb_pack_b_cols(pb, nr, b, ldb, j0, cols, p0, 0, kc);
}

/* The epilogue of one element: c from the block's sum s, as the comment above says. */
INLINE float gb_store(float s, float c, float alpha, float beta, int first) {
    float v = alpha * s;
    if (!first) return c + v;
    return beta == 0.0f ? v : v + beta * c;
}

/*
 * The epilogue of a partial sliver from its sums t [mr][nr]; with out (the last block of ttpipe_cpu_gemm_bf16_out), each
 * element plus bias[q] (bias not NULL) rounded to bf16 into out [rows][ldo] instead of C.
 */
INLINE void gb_store_partial(const float *t, int nr, float *c, int ldc, int rows, int cols, float alpha, float beta,
                             int first, uint16_t *out, int64_t ldo, const float *bias) {
    for (int r = 0; r < rows; r++) {
        for (int q = 0; q < cols; q++) {
            float v = gb_store(t[r * nr + q], first && beta == 0.0f ? 0.0f : c[(int64_t) r * ldc + q], alpha, beta, first);
            if (!out) {
                c[(int64_t) r * ldc + q] = v;
                continue;
            }
            if (bias) v = v + bias[q];
            out[r * ldo + q] = round_bf16(v);
        }
    }
}

typedef void (*gb_kernel_fn)(int kc, const float *pa, const float *pb, float *c, int ldc, int rows, int cols, float alpha,
                             float beta, int first, uint16_t *out, int64_t ldo, const float *bias);
typedef void (*gb_pack_fn)(float *restrict dst, int w, const uint16_t *src, int ld, int trans, int at, int count, int p0,
                           int kc);

/*
 * Where block p0 (a multiple of GB_KC) of the panels of an op(B) of n columns starts, in floats. The panels hold every
 * block of GB_KC indices in turn, each as gb_run packs it (slivers of nr columns, each [kc][nr] floats or
 * [(kc + 1) / 2][nr] words of pairs), so every block before the last is full.
 */
static inline size_t gb_panel_block(int nr, int pairs, int n, int p0) {
    return (size_t) (p0 / GB_KC) * (pairs ? GB_KC / 2 : GB_KC) * nr * ((n + nr - 1) / nr);
}

/*
 * The blocked loops around a kernel of mr x nr slivers and its packing. With out, the last block's slivers go, plus bias,
 * rounded to bf16 to out instead of C (see ttpipe_cpu_gemm_bf16_out). With pre, B is not packed: its panels are those
 * gb_pack_panels wrote for an op(B) of [pre_k, pre_n] whose first k rows and n columns are this product's (pre_k >= k,
 * pre_n >= n). A block whose packed panel holds a value where this product's has the zero past kc (pairs, kc odd and short
 * of the packed block) is packed from b instead, so the kernel reads the panel gb_run would have packed. 0, or -1 when the
 * panels cannot be allocated.
 */
INLINE int gb_run(int mr, int nr, int pairs, gb_kernel_fn kern, gb_pack_fn pack_a, gb_pack_fn pack_b, int ta, int tb, int m,
                  int n, int k, float alpha, const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta, float *c,
                  int ldc, uint16_t *out, int64_t ldo, const float *bias, const float *pre, int pre_n, int pre_k) {
    int slivers = (n + nr - 1) / nr;
    int mc = GB_MC / mr * mr;
    size_t bfloats = (size_t) GB_KC * nr * slivers, afloats = (size_t) GB_KC * (mc + mr);
    float *work = gb_buffer(afloats + bfloats);
    if (!work) return -1;
    float *pa = work, *pb = work + afloats;
    for (int p0 = 0; p0 < k; p0 += GB_KC) {
        int kc = k - p0 < GB_KC ? k - p0 : GB_KC;
        int depth = pairs ? (kc + 1) / 2 : kc;          /* a panel's rows: indices, or pairs of them */
        uint16_t *last = p0 + kc >= k ? out : NULL;
        const float *panels = pb;
        size_t stride = (size_t) depth * nr;            /* from one sliver's panel to the next */
        int packed = pre_k - p0 < GB_KC ? pre_k - p0 : GB_KC;
        if (pre && !(pairs && (kc & 1) && kc < packed)) {
            panels = pre + gb_panel_block(nr, pairs, pre_n, p0);
            stride = (size_t) (pairs ? (packed + 1) / 2 : packed) * nr;
        } else {
            for (int s = 0; s < slivers; s++) {
                int j0 = s * nr;
                pack_b(pb + (size_t) s * depth * nr, nr, b, ldb, tb, j0, n - j0 < nr ? n - j0 : nr, p0, kc);
            }
        }
        for (int ib = 0; ib < m; ib += mc) {
            int rows = m - ib < mc ? m - ib : mc, na = (rows + mr - 1) / mr;
            for (int q = 0; q < na; q++) {
                int i0 = ib + q * mr;
                pack_a(pa + (size_t) q * depth * mr, mr, a, lda, ta, i0, m - i0 < mr ? m - i0 : mr, p0, kc);
            }
            for (int s = 0; s < slivers; s++) {
                int j0 = s * nr, cols = n - j0 < nr ? n - j0 : nr;
                for (int q = 0; q < na; q++) {
                    int i0 = ib + q * mr;
                    kern(kc, pa + (size_t) q * depth * mr, panels + s * stride, c ? c + (int64_t) i0 * ldc + j0 : NULL,
                         ldc, m - i0 < mr ? m - i0 : mr, cols, alpha, beta, p0 == 0, last ? last + i0 * ldo + j0 : NULL,
                         ldo, last && bias ? bias + j0 : NULL);
                }
            }
        }
    }
    return 0;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) \
    && (!defined(TTPIPE_NO_CLONES) || (defined(__AVX2__) && defined(__FMA__)))
#include <immintrin.h>
#define GB_X86 1
#if defined(TTPIPE_NO_CLONES)
#define GB_TARGET512 /* the whole file is built for one level */
#define GB_TARGET256
#else
#define GB_TARGET512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define GB_TARGET256 __attribute__((target("avx2,fma")))
#endif

#if !defined(TTPIPE_NO_CLONES) || (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__))
#define GB_AVX512 1
/* 12 x 32: 24 accumulators of 16 lanes. */
/* 16 floats rounded to bf16 (to_bf16 in every lane: nearest even, a NaN kept quiet with its sign and top payload). */
GB_TARGET512 static inline __m256i gb_round16(__m512 v) {
    __m512i b = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

/* The epilogue of a 12 x 32 sliver from its sums t [12][32] (see gb_store and gb_store_partial). */
GB_TARGET512 static inline void gb_epilogue512(const float *t, float *c, int ldc, int rows, int cols, float alpha,
                                               float beta, int first, uint16_t *out, int64_t ldo, const float *bias) {
    enum { MR = 12, NR = 32 };
    if (rows == MR && cols == NR) {
        __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
        for (int r = 0; r < MR; r++) {
            for (int h = 0; h < 2; h++) {
                float *cp = c ? c + (int64_t) r * ldc + 16 * h : NULL;
                __m512 v = _mm512_mul_ps(va, _mm512_load_ps(t + r * NR + 16 * h));
                if (!first) v = _mm512_add_ps(_mm512_loadu_ps(cp), v);
                else if (beta != 0.0f) v = _mm512_add_ps(v, _mm512_mul_ps(vb, _mm512_loadu_ps(cp)));
                if (!out) {
                    _mm512_storeu_ps(cp, v);
                    continue;
                }
                if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + 16 * h));
                _mm256_storeu_si256((__m256i *) (out + r * ldo + 16 * h), gb_round16(v));
            }
        }
        return;
    }
    gb_store_partial(t, NR, c, ldc, rows, cols, alpha, beta, first, out, ldo, bias);
}

/*
 * A 12 x 32 kernel's end: its sums leave the registers into a tile first (an epilogue indexing acc would keep acc in
 * memory through the kernel's loop), then gb_epilogue512.
 */
GB_TARGET512 INLINE void gb_finish512(__m512 acc[12][2], float *c, int ldc, int rows, int cols, float alpha, float beta,
                                      int first, uint16_t *out, int64_t ldo, const float *bias) {
    float t[12 * 32] __attribute__((aligned(64)));
    for (int r = 0; r < 12; r++) {
        _mm512_store_ps(t + r * 32, acc[r][0]);
        _mm512_store_ps(t + r * 32 + 16, acc[r][1]);
    }
    gb_epilogue512(t, c, ldc, rows, cols, alpha, beta, first, out, ldo, bias);
}

GB_TARGET512 static void gb_kernel_avx512(int kc, const float *pa, const float *pb, float *c, int ldc, int rows, int cols,
                                          float alpha, float beta, int first, uint16_t *out, int64_t ldo,
                                          const float *bias) {
    enum { MR = 12, NR = 32 };
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int p = 0; p < kc; p++) {
        __m512 b0 = _mm512_load_ps(pb + p * NR), b1 = _mm512_load_ps(pb + p * NR + 16);
        for (int r = 0; r < MR; r++) {
            __m512 av = _mm512_set1_ps(pa[p * MR + r]);
            acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
        }
    }
    gb_finish512(acc, c, ldc, rows, cols, alpha, beta, first, out, ldo, bias);
}

/* 16 bf16 values widened to 16 floats. */
GB_TARGET512 static inline __m512 gb_widen16(const uint16_t *s) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *) s));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* r[i][j] -> r[j][i] for a 16 x 16 block of floats in 16 registers. */
GB_TARGET512 static inline void gb_transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int h = 0; h < 16; h += 8) {
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xdd);
        }
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}

/*
 * `count` (<= 16) source rows of 16 bf16 values each (row i at src + i ld), widened and transposed: out[q] holds
 * element q of every row (rows past count zero).
 */
GB_TARGET512 static inline void gb_rows16(__m512 out[16], const uint16_t *src, int64_t ld, int count) {
    for (int i = 0; i < 16; i++) {
        out[i] = i < count ? gb_widen16(src + i * ld) : _mm512_setzero_ps();
        if (i < count) _mm_prefetch((const char *) (src + i * ld + 32), _MM_HINT_T0);   /* the row's next 32 values */
    }
    gb_transpose16(out);
}

/*
 * gb_pack_a for rows of A stored as rows (not ta): 16 indices p at a time through a register transpose instead of
 * strided scalar stores; the rest as gb_pack_a. The same values in the same places.
 */
GB_TARGET512 static void gb_pack_a_avx512(float *restrict pa, int mr, const uint16_t *a, int lda, int ta, int i0, int rows,
                                          int p0, int kc) {
    if (mr > 16) {
        gb_pack_a(pa, mr, a, lda, ta, i0, rows, p0, kc);
        return;
    }
    __mmask16 lanes = (__mmask16) ((1u << mr) - 1);
    if (ta) {                                            /* each p's rows are contiguous: a masked load of `rows` */
        __mmask16 valid = (__mmask16) ((1u << rows) - 1);
        for (int p = 0; p < kc; p++) {
            __m256i h = _mm256_maskz_loadu_epi16(valid, a + (int64_t) (p0 + p) * lda + i0);
            __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            _mm512_mask_storeu_ps(pa + p * mr, lanes, v);
        }
        return;
    }
    int q0 = 0;
    for (; q0 + 16 <= kc; q0 += 16) {
        __m512 r[16];
        gb_rows16(r, a + (int64_t) i0 * lda + p0 + q0, lda, rows);
        for (int q = 0; q < 16; q++) _mm512_mask_storeu_ps(pa + (q0 + q) * mr, lanes, r[q]);
    }
    gb_pack_a_rows(pa, mr, a, lda, i0, rows, p0, q0, kc);
}

/* gb_pack_b for B stored transposed (tb), 16 columns by 16 indices at a time, as gb_pack_a_avx512; the rest as gb_pack_b. */
GB_TARGET512 static void gb_pack_b_avx512(float *restrict pb, int nr, const uint16_t *b, int ldb, int tb, int j0, int cols,
                                          int p0, int kc) {
    if (nr % 16 != 0) {
        gb_pack_b(pb, nr, b, ldb, tb, j0, cols, p0, kc);
        return;
    }
    if (!tb) {                                           /* each p's columns are contiguous: masked loads of `cols` */
        for (int p = 0; p < kc; p++) {
            const uint16_t *src = b + (int64_t) (p0 + p) * ldb + j0;
            for (int h = 0; h < nr; h += 16) {
                int count = cols - h < 0 ? 0 : cols - h > 16 ? 16 : cols - h;
                __m256i w = _mm256_maskz_loadu_epi16((__mmask16) ((1u << count) - 1), src + h);
                __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(w), 16));
                _mm512_storeu_ps(pb + (int64_t) p * nr + h, v);
            }
        }
        return;
    }
    int q0 = 0;
    for (; q0 + 16 <= kc; q0 += 16) {
        for (int h = 0; h < nr; h += 16) {
            __m512 r[16];
            int count = cols - h < 0 ? 0 : cols - h > 16 ? 16 : cols - h;
            gb_rows16(r, b + (int64_t) (j0 + h) * ldb + p0 + q0, ldb, count);
            for (int q = 0; q < 16; q++) _mm512_storeu_ps(pb + (int64_t) (q0 + q) * nr + h, r[q]);
        }
    }
    gb_pack_b_cols(pb, nr, b, ldb, j0, cols, p0, q0, kc);
}

GB_TARGET512 static int gb_avx512(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                                  const uint16_t *b, int ldb, float beta, float *c, int ldc, uint16_t *out, int64_t ldo,
                                  const float *bias, const float *pre, int pre_n, int pre_k) {
    return gb_run(12, 32, 0, gb_kernel_avx512, gb_pack_a_avx512, gb_pack_b_avx512, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                  out, ldo, bias, pre, pre_n, pre_k);
}

/*
 * The dot engine (ttpipe_cpu_gemm_bf16dot): the loops, blocks and epilogue above around a 12 x 32 kernel of vdpbf16ps,
 * the bf16 dot product (avx512_bf16). Its panels hold pairs: indices p and p + 1 of a row of op(A) or a column of op(B)
 * as one 32-bit word, p in the low half (a pair past kc has a zero high half), so a panel is half as deep. Each
 * vdpbf16ps adds to a lane the products of one pair as the instruction defines it (Intel's SDM: s + a[p+1] b[p+1], then
 * + a[p] b[p], each rounded to nearest even; denormal inputs and results taken as zero).
 */
#if !defined(TTPIPE_NO_CLONES) || defined(__AVX512BF16__)
#define GB_DOT 1
#if defined(TTPIPE_NO_CLONES)
#define GB_TARGETDOT
#else
#define GB_TARGETDOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))
#endif

/* Indices p0 .. p0 + left (left <= 32) of `count` (<= 16) rows (row i at src + i ld) as 16 pairs each, transposed:
 * out[q] holds pair q of every row (rows past count, and indices past left, zero). */
GB_TARGETDOT static inline void gb_pairs16(__m512i out[16], const uint16_t *src, int64_t ld, int count, int left) {
    __mmask32 m = left >= 32 ? (__mmask32) 0xffffffffu : (__mmask32) ((1u << left) - 1);
    __m512 r[16];
    for (int i = 0; i < 16; i++) {
        r[i] = _mm512_castsi512_ps(i < count ? _mm512_maskz_loadu_epi16(m, src + i * ld) : _mm512_setzero_si512());
        if (left > 32 && i < count) _mm_prefetch((const char *) (src + i * ld + 32), _MM_HINT_T0);   /* the next 16 pairs */
    }
    gb_transpose16(r);
    for (int i = 0; i < 16; i++) out[i] = _mm512_castps_si512(r[i]);
}

/* Two rows of `count` (<= 16) bf16 values each, zipped into 16 pairs: lo[c] | hi[c] << 16 (hi NULL: zero). */
GB_TARGETDOT static inline __m512i gb_zip16(const uint16_t *lo, const uint16_t *hi, int count) {
    __mmask16 m = (__mmask16) ((1u << count) - 1);
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, lo));
    if (!hi) return w;
    return _mm512_or_si512(w, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, hi)), 16));
}

/* Rows i0 .. i0+rows of op(A), indices p0 .. p0+kc, as pairs into pa [(kc + 1) / 2][mr] (mr <= 16; rows past `rows` zero). */
GB_TARGETDOT static void gb_pack_a_dot(float *restrict dst, int mr, const uint16_t *a, int lda, int ta, int i0, int rows,
                                       int p0, int kc) {
    uint32_t *pa = (uint32_t *) dst;
    __mmask16 lanes = (__mmask16) ((1u << mr) - 1);
    int kp = (kc + 1) / 2;
    if (ta) {                                            /* op(A)'s column p is a row of the stored A */
        for (int q = 0; q < kp; q++) {
            const uint16_t *s = a + (int64_t) (p0 + 2 * q) * lda + i0;
            _mm512_mask_storeu_epi32(pa + q * mr, lanes, gb_zip16(s, 2 * q + 1 < kc ? s + lda : NULL, rows));
        }
        return;
    }
    for (int q0 = 0; q0 < kp; q0 += 16) {
        __m512i r[16];
        gb_pairs16(r, a + (int64_t) i0 * lda + p0 + 2 * q0, lda, rows, kc - 2 * q0);
        for (int q = 0; q < 16 && q0 + q < kp; q++) _mm512_mask_storeu_epi32(pa + (q0 + q) * mr, lanes, r[q]);
    }
}

/* Columns j0 .. j0+cols of op(B), indices p0 .. p0+kc, as pairs into pb [(kc + 1) / 2][nr] (nr a multiple of 16). */
GB_TARGETDOT static void gb_pack_b_dot(float *restrict dst, int nr, const uint16_t *b, int ldb, int tb, int j0, int cols,
                                       int p0, int kc) {
    uint32_t *pb = (uint32_t *) dst;
    int kp = (kc + 1) / 2;
    for (int h = 0; h < nr; h += 16) {
        int count = cols - h < 0 ? 0 : cols - h > 16 ? 16 : cols - h;
        if (!tb) {                                       /* op(B)'s row p is a row of the stored B */
            for (int q = 0; q < kp; q++) {
                const uint16_t *s = b + (int64_t) (p0 + 2 * q) * ldb + j0 + h;
                _mm512_storeu_si512(pb + (int64_t) q * nr + h, gb_zip16(s, 2 * q + 1 < kc ? s + ldb : NULL, count));
            }
            continue;
        }
        for (int q0 = 0; q0 < kp; q0 += 16) {
            __m512i r[16];
            gb_pairs16(r, b + (int64_t) (j0 + h) * ldb + p0 + 2 * q0, ldb, count, kc - 2 * q0);
            for (int q = 0; q < 16 && q0 + q < kp; q++) _mm512_storeu_si512(pb + (int64_t) (q0 + q) * nr + h, r[q]);
        }
    }
}

GB_TARGETDOT static void gb_kernel_dot(int kc, const float *pa_, const float *pb_, float *c, int ldc, int rows, int cols,
                                       float alpha, float beta, int first, uint16_t *out, int64_t ldo, const float *bias) {
    enum { MR = 12, NR = 32 };
    const uint32_t *pa = (const uint32_t *) pa_, *pb = (const uint32_t *) pb_;
    int kp = (kc + 1) / 2;
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int p = 0; p < kp; p++) {
        __m512bh b0 = (__m512bh) _mm512_load_si512(pb + p * NR), b1 = (__m512bh) _mm512_load_si512(pb + p * NR + 16);
        for (int r = 0; r < MR; r++) {
            __m512bh av = (__m512bh) _mm512_set1_epi32((int) pa[p * MR + r]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
        }
    }
    gb_finish512(acc, c, ldc, rows, cols, alpha, beta, first, out, ldo, bias);
}

GB_TARGETDOT static int gb_dot(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                               const uint16_t *b, int ldb, float beta, float *c, int ldc, uint16_t *out, int64_t ldo,
                               const float *bias, const float *pre, int pre_n, int pre_k) {
    return gb_run(12, 32, 1, gb_kernel_dot, gb_pack_a_dot, gb_pack_b_dot, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                  out, ldo, bias, pre, pre_n, pre_k);
}
#endif
#endif

/* 6 x 16: 12 accumulators of 8 lanes (16 ymm registers). */
/* 8 floats rounded to bf16, as gb_round16. */
GB_TARGET256 static inline __m128i gb_round8(__m256 v) {
    __m256i b = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40)), nan);
    __m256i p = _mm256_packus_epi32(r, r);              /* each 128-bit half: its four values, twice */
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
}

GB_TARGET256 static void gb_kernel_avx2(int kc, const float *pa, const float *pb, float *c, int ldc, int rows, int cols,
                                        float alpha, float beta, int first, uint16_t *out, int64_t ldo, const float *bias) {
    enum { MR = 6, NR = 16 };
    __m256 acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int p = 0; p < kc; p++) {
        __m256 b0 = _mm256_load_ps(pb + p * NR), b1 = _mm256_load_ps(pb + p * NR + 8);
        for (int r = 0; r < MR; r++) {
            __m256 av = _mm256_broadcast_ss(pa + p * MR + r);
            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
        }
    }
    /* the sums leave the registers first: an epilogue indexing acc would keep it in memory through the loop above */
    float t[MR * NR] __attribute__((aligned(32)));
    for (int r = 0; r < MR; r++) {
        _mm256_store_ps(t + r * NR, acc[r][0]);
        _mm256_store_ps(t + r * NR + 8, acc[r][1]);
    }
    if (rows == MR && cols == NR) {
        __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
        for (int r = 0; r < MR; r++) {
            for (int h = 0; h < 2; h++) {
                float *cp = c ? c + (int64_t) r * ldc + 8 * h : NULL;
                __m256 v = _mm256_mul_ps(va, _mm256_load_ps(t + r * NR + 8 * h));
                if (!first) v = _mm256_add_ps(_mm256_loadu_ps(cp), v);
                else if (beta != 0.0f) v = _mm256_add_ps(v, _mm256_mul_ps(vb, _mm256_loadu_ps(cp)));
                if (!out) {
                    _mm256_storeu_ps(cp, v);
                    continue;
                }
                if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + 8 * h));
                _mm_storeu_si128((__m128i *) (out + r * ldo + 8 * h), gb_round8(v));
            }
        }
        return;
    }
    gb_store_partial(t, NR, c, ldc, rows, cols, alpha, beta, first, out, ldo, bias);
}

/* 8 bf16 values widened to 8 floats. */
GB_TARGET256 static inline __m256 gb_widen8(const uint16_t *s) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *) s));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* `count` (<= 8) source rows of 8 bf16 values (row i at src + i ld), widened and transposed: out[q] holds element q of each. */
GB_TARGET256 static inline void gb_rows8(__m256 r[8], const uint16_t *src, int64_t ld, int count) {
    for (int i = 0; i < 8; i++) r[i] = i < count ? gb_widen8(src + i * ld) : _mm256_setzero_ps();
    __m256 t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
        t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
    }
    for (int i = 0; i < 8; i++) r[i] = t[i];
}

/* gb_pack_a for rows of A stored as rows (not ta), 8 indices p at a time through a register transpose; else gb_pack_a. */
GB_TARGET256 static void gb_pack_a_avx2(float *restrict pa, int mr, const uint16_t *a, int lda, int ta, int i0, int rows,
                                        int p0, int kc) {
    if (ta || mr > 8) {
        gb_pack_a(pa, mr, a, lda, ta, i0, rows, p0, kc);
        return;
    }
    int q0 = 0;
    for (; q0 + 8 <= kc; q0 += 8) {
        __m256 r[8];
        float t[8];
        gb_rows8(r, a + (int64_t) i0 * lda + p0 + q0, lda, rows);
        for (int q = 0; q < 8; q++) {                    /* mr (< 8) lanes of each: through a small buffer */
            _mm256_storeu_ps(t, r[q]);
            memcpy(pa + (q0 + q) * mr, t, (size_t) mr * sizeof(float));
        }
    }
    gb_pack_a_rows(pa, mr, a, lda, i0, rows, p0, q0, kc);
}

/* gb_pack_b for B stored transposed (tb), 8 columns by 8 indices at a time; else gb_pack_b. */
GB_TARGET256 static void gb_pack_b_avx2(float *restrict pb, int nr, const uint16_t *b, int ldb, int tb, int j0, int cols,
                                        int p0, int kc) {
    if (!tb || nr % 8 != 0) {
        gb_pack_b(pb, nr, b, ldb, tb, j0, cols, p0, kc);
        return;
    }
    int q0 = 0;
    for (; q0 + 8 <= kc; q0 += 8) {
        for (int h = 0; h < nr; h += 8) {
            __m256 r[8];
            int count = cols - h < 0 ? 0 : cols - h > 8 ? 8 : cols - h;
            gb_rows8(r, b + (int64_t) (j0 + h) * ldb + p0 + q0, ldb, count);
            for (int q = 0; q < 8; q++) _mm256_storeu_ps(pb + (int64_t) (q0 + q) * nr + h, r[q]);
        }
    }
    gb_pack_b_cols(pb, nr, b, ldb, j0, cols, p0, q0, kc);
}

GB_TARGET256 static int gb_avx2(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                                const uint16_t *b, int ldb, float beta, float *c, int ldc, uint16_t *out, int64_t ldo,
                                const float *bias, const float *pre, int pre_n, int pre_k) {
    return gb_run(6, 16, 0, gb_kernel_avx2, gb_pack_a_avx2, gb_pack_b_avx2, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                  out, ldo, bias, pre, pre_n, pre_k);
}
#endif

/* Which kernel ttpipe_cpu_gemm_bf16 runs here: "avx512", "avx2", or NULL where none (no FMA: the caller uses another engine). */
EXPORT const char *ttpipe_cpu_gemm_bf16_kernel(void) {
#if defined(GB_X86) && defined(TTPIPE_NO_CLONES)
#if defined(GB_AVX512)
    return "avx512";
#else
    return "avx2";
#endif
#elif defined(GB_X86)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")
        && __builtin_cpu_supports("fma")) {
        return "avx512";
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
    return NULL;
#else
    return NULL;
#endif
}

#if defined(GB_X86)
/* The kernel this CPU runs, once: 2 avx512, 1 avx2, 0 none. */
static int gb_kernel_here(void) {
    static int kernel = -1;
    if (kernel < 0) {
        const char *kn = ttpipe_cpu_gemm_bf16_kernel();
        kernel = kn == NULL ? 0 : kn[3] == '5' ? 2 : 1;
    }
    return kernel;
}
#endif

/* Whether the dot engine runs here, asked once: 1 on a CPU with avx512_bf16 (and AVX-512 F, BW, VL), else 0. */
EXPORT int ttpipe_cpu_gemm_bf16dot_available(void) {
#if defined(GB_DOT) && defined(TTPIPE_NO_CLONES)
    return 1;
#elif defined(GB_DOT)
    static int here = -1;
    if (here < 0) {
        __builtin_cpu_init();
        here = __builtin_cpu_supports("avx512bf16") && gb_kernel_here() == 2;
    }
    return here;
#else
    return 0;
#endif
}

/* gb_run on this CPU's kernel (k > 0), or with dot the dot engine's; -2 where none runs. */
static int gb_dispatch(int dot, int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                       const uint16_t *b, int ldb, float beta, float *c, int ldc, uint16_t *out, int64_t ldo,
                       const float *bias, const float *pre, int pre_n, int pre_k) {
#if defined(GB_DOT)
    if (dot) {
        if (!ttpipe_cpu_gemm_bf16dot_available()) return -2;
        return gb_dot(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, out, ldo, bias, pre, pre_n, pre_k);
    }
#else
    if (dot) return -2;
#endif
#if defined(GB_X86)
    int kernel = gb_kernel_here();
#if defined(GB_AVX512)
    if (kernel == 2) {
        return gb_avx512(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, out, ldo, bias, pre, pre_n, pre_k);
    }
#endif
    if (kernel >= 1) return gb_avx2(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, out, ldo, bias, pre, pre_n, pre_k);
#endif
    (void) ta; (void) tb; (void) m; (void) n; (void) k; (void) alpha; (void) a; (void) lda; (void) b; (void) ldb; (void) beta;
    (void) c; (void) ldc; (void) out; (void) ldo; (void) bias; (void) pre; (void) pre_n; (void) pre_k;
    return -2;
}

/* The B packer of the engine gb_dispatch runs here (dot: the dot engine's) and its sliver width; NULL where none runs. */
static gb_pack_fn gb_packer(int dot, int *nr) {
    *nr = 0;
#if defined(GB_DOT)
    if (dot) {
        *nr = 32;
        return ttpipe_cpu_gemm_bf16dot_available() ? gb_pack_b_dot : NULL;
    }
#endif
#if defined(GB_X86)
    int kernel = dot ? 0 : gb_kernel_here();
#if defined(GB_AVX512)
    if (kernel == 2) {
        *nr = 32;
        return gb_pack_b_avx512;
    }
#endif
    if (kernel >= 1) {
        *nr = 16;
        return gb_pack_b_avx2;
    }
#endif
    (void) dot;
    return NULL;
}

/*
 * The panels gb_run would pack from op(B) [k, n] (n, k > 0; tb: B stored transposed), for gb_dispatch's pre, into
 * *panels; a NULL *panels is first allocated (the caller frees it) to hold those of any op(B) of [k, n]. 0, -1 when it
 * cannot be allocated, -2 where the engine does not run.
 */
static int gb_pack_panels(int dot, int tb, int n, int k, const uint16_t *b, int ldb, float **panels) {
    int nr;
    gb_pack_fn pack_b = gb_packer(dot, &nr);
    if (!pack_b) return -2;
    if (!*panels) {
        size_t floats = gb_panel_block(nr, dot, n, (k + GB_KC - 1) / GB_KC * GB_KC);   /* as many full blocks */
        *panels = aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
        if (!*panels) return -1;
    }
    int slivers = (n + nr - 1) / nr;
    for (int p0 = 0; p0 < k; p0 += GB_KC) {
        int kc = k - p0 < GB_KC ? k - p0 : GB_KC;
        float *block = *panels + gb_panel_block(nr, dot, n, p0);
        size_t depth = (size_t) (dot ? (kc + 1) / 2 : kc) * nr;
        for (int s = 0; s < slivers; s++) {
            int j0 = s * nr;
            pack_b(block + s * depth, nr, b, ldb, tb, j0, n - j0 < nr ? n - j0 : nr, p0, kc);
        }
    }
    return 0;
}

/* ttpipe_cpu_gemm_bf16 or, with dot, ttpipe_cpu_gemm_bf16dot. */
static int gb_gemm(int dot, int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda, const uint16_t *b,
                   int ldb, float beta, float *c, int ldc) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0) {                                       /* no products: C = beta C, as a GEMM does */
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < n; j++) c[(int64_t) i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(int64_t) i * ldc + j];
        }
        return (dot ? ttpipe_cpu_gemm_bf16dot_available() : ttpipe_cpu_gemm_bf16_kernel() != NULL) ? 0 : -2;
    }
    return gb_dispatch(dot, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL, 0, NULL, NULL, 0, 0);
}

/* 0, -1 when the panels cannot be allocated, -2 where no kernel runs (ttpipe_cpu_gemm_bf16_kernel is NULL). */
EXPORT int ttpipe_cpu_gemm_bf16(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                                const uint16_t *b, int ldb, float beta, float *c, int ldc) {
    return gb_gemm(0, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ttpipe_cpu_gemm_bf16 on the dot engine (see gb_dot): -2 where ttpipe_cpu_gemm_bf16dot_available is 0. */
EXPORT int ttpipe_cpu_gemm_bf16dot(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                                   const uint16_t *b, int ldb, float beta, float *c, int ldc) {
    return gb_gemm(1, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/*
 * ttpipe_cpu_gemm_bf16 (dot 0) or ttpipe_cpu_gemm_bf16dot (dot 1) with beta 0 into a bf16 out [m, n] (row stride ldo):
 * each element's fp32 value, plus bias[j] when bias is not NULL, rounded once, written by the kernel as it finishes the
 * last block of GB_KC indices; the blocks before it keep their sums in c [m, n] (row stride ldc), which only k > GB_KC
 * needs (else NULL will do). The bits of the GEMM then ttpipe_cpu_tile_to_bf16, without the fp32 result going through
 * memory. k > 0. 0, -1 when the panels cannot be allocated, -2 where no kernel runs, -3 when k > GB_KC and c is NULL.
 */
EXPORT int ttpipe_cpu_gemm_bf16_out(int dot, int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                                    const uint16_t *b, int ldb, float *c, int ldc, uint16_t *out, int ldo,
                                    const float *bias) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0 || (k > GB_KC && !c)) return -3;
    return gb_dispatch(dot, ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc, out, ldo, bias, NULL, 0, 0);
}

/* The k indices the fma and dot engines sum in one block: ttpipe_cpu_gemm_bf16_out needs c beyond it. */
EXPORT int ttpipe_cpu_gemm_bf16_block(void) {
    return GB_KC;
}

/*
 * Fused bf16 attention on the fma (dot 0) or dot (dot 1) engine: FlashAttention.forwardBf16 and backwardBf16's loops over
 * (batch, head) pairs bh in [lo, hi) and their blocks of ATT_BLOCK query rows, with the same products, row kernels and
 * roundings, so the same bits. What the fusion saves: each pair's K and V are packed into the engines' panels once (the
 * tile path packs them again for every block), and a block's output is rounded by the kernel as it finishes it.
 * q [n, t, hd], k and v [n, tk, hd], o [n, t, hd] bf16, causal: key j for query i when j <= i + tk - t.
 */
enum { ATT_BLOCK = 64 };

/* The keys row i sees (FlashAttention.seen). */
static int att_seen(int i, int t, int tk, int causal) {
    if (!causal) return tk;
    int m = i + tk - t + 1;
    return m < 0 ? 0 : m > tk ? tk : m;
}

/*
 * A product of the fused attention on the engine: gb_dispatch, with k = 0 as a GEMM has it (C = beta C, or out = 0, as
 * the tile path's zero result rounded) and an empty C a no-op.
 */
static int att_mul(int dot, int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                   const uint16_t *b, int ldb, float beta, float *c, int ldc, uint16_t *out, int ldo, const float *pre,
                   int pre_n, int pre_k) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0) {
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < n; j++) {
                if (out) out[(int64_t) i * ldo + j] = 0;
                else c[(int64_t) i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(int64_t) i * ldc + j];
            }
        }
        return 0;
    }
    return gb_dispatch(dot, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, out, ldo, NULL, pre, pre_n, pre_k);
}

/*
 * The forward pass for pairs [lo, hi): o, and each query row's softmax max and sum of exps (max_out and sum_out [hi - lo,
 * t], the rows of pair lo first: FlashAttention takes the log). 0, -1 when scratch cannot be allocated, -2 where the
 * engine does not run.
 */
EXPORT int ttpipe_cpu_attention_forward_bf16(int dot, int lo, int hi, const uint16_t *q, const uint16_t *k,
                                             const uint16_t *v, uint16_t *o, float *max_out, double *sum_out, int t,
                                             int tk, int hd, float scale, int causal) {
    if (hi <= lo || t <= 0 || hd <= 0) return 0;
    if (dot ? !ttpipe_cpu_gemm_bf16dot_available() : ttpipe_cpu_gemm_bf16_kernel() == NULL) return -2;
    int width = tk > 0 ? tk : 1;
    float *s = malloc((size_t) ATT_BLOCK * width * sizeof(float));
    uint16_t *pb = malloc((size_t) ATT_BLOCK * width * sizeof(uint16_t));
    float *sums = malloc((size_t) ATT_BLOCK * hd * sizeof(float));    /* P V past one block of keys */
    float *kt = NULL, *vp = NULL;                                  /* a pair's K^T [hd, tk] and V [tk, hd] as B */
    int rc = s && pb && sums ? 0 : -1;
    for (int bh = lo; bh < hi && rc == 0; bh++) {
        int64_t qb = (int64_t) bh * t * hd, kb = (int64_t) bh * tk * hd;
        if (tk > 0) rc = gb_pack_panels(dot, 1, tk, hd, k + kb, hd, &kt);
        if (tk > 0 && rc == 0) rc = gb_pack_panels(dot, 0, hd, tk, v + kb, hd, &vp);
        for (int i0 = 0; i0 < t && rc == 0; i0 += ATT_BLOCK) {
            int rows = t - i0 < ATT_BLOCK ? t - i0 : ATT_BLOCK;
            int keys = att_seen(i0 + rows - 1, t, tk, causal), ld = keys > 0 ? keys : 1;
            int64_t at = (int64_t) (bh - lo) * t + i0;
            rc = att_mul(dot, 0, 1, rows, keys, hd, scale, q + qb + (int64_t) i0 * hd, hd, k + kb, hd, 0.0f, s, ld, NULL, 0,
                         kt, tk, hd);
            if (rc != 0) break;
            ttpipe_cpu_softmax_rows_bf16(s, pb, rows, keys, i0 + tk - t + 1, causal, max_out + at, sum_out + at);
            rc = att_mul(dot, 0, 0, rows, hd, keys, 1.0f, pb, ld, v + kb, hd, 0.0f, sums, hd, o + qb + (int64_t) i0 * hd,
                         hd, vp, hd, tk);
        }
    }
    free(kt);
    free(vp);
    free(s);
    free(pb);
    free(sums);
    return rc;
}

/*
 * The backward pass for pairs [lo, hi): dq, dk and dv from q, k, v, the forward's o and lse (its rows' log-sum-exp) and
 * dO, the blocks last to first. 0, -1 when scratch cannot be allocated, -2 where the engine does not run.
 */
EXPORT int ttpipe_cpu_attention_backward_bf16(int dot, int lo, int hi, const uint16_t *q, const uint16_t *k,
                                              const uint16_t *v, const uint16_t *o, const float *lse, const uint16_t *dO,
                                              uint16_t *dq, uint16_t *dk, uint16_t *dv, int t, int tk, int hd, float scale,
                                              int causal) {
    if (hi <= lo || t <= 0 || hd <= 0) return 0;
    if (dot ? !ttpipe_cpu_gemm_bf16dot_available() : ttpipe_cpu_gemm_bf16_kernel() == NULL) return -2;
    size_t tile = (size_t) ATT_BLOCK * (tk > 0 ? tk : 1), kv = (size_t) (tk > 0 ? tk : 1) * hd;
    float *p = malloc(tile * sizeof(float)), *ds = malloc(tile * sizeof(float));
    uint16_t *pb = malloc(tile * sizeof(uint16_t)), *dsb = malloc(tile * sizeof(uint16_t));
    float *dkb = malloc(kv * sizeof(float)), *dvb = malloc(kv * sizeof(float));
    float *sums = malloc((size_t) ATT_BLOCK * hd * sizeof(float));    /* dS K past one block of keys */
    float *kt = NULL, *vt = NULL, *kp = NULL;                      /* a pair's K^T, V^T [hd, tk] and K [tk, hd] as B */
    int rc = p && ds && pb && dsb && dkb && dvb && sums ? 0 : -1;
    for (int bh = lo; bh < hi && rc == 0; bh++) {
        int64_t qb = (int64_t) bh * t * hd, kb = (int64_t) bh * tk * hd;
        if (tk > 0) rc = gb_pack_panels(dot, 1, tk, hd, k + kb, hd, &kt);
        if (tk > 0 && rc == 0) rc = gb_pack_panels(dot, 1, tk, hd, v + kb, hd, &vt);
        if (tk > 0 && rc == 0) rc = gb_pack_panels(dot, 0, hd, tk, k + kb, hd, &kp);
        int first = 1;
        for (int i0 = (t - 1) / ATT_BLOCK * ATT_BLOCK; i0 >= 0 && rc == 0; i0 -= ATT_BLOCK) {
            int rows = t - i0 < ATT_BLOCK ? t - i0 : ATT_BLOCK;
            int keys = att_seen(i0 + rows - 1, t, tk, causal), ld = keys > 0 ? keys : 1;
            const uint16_t *qi = q + qb + (int64_t) i0 * hd, *gi = dO + qb + (int64_t) i0 * hd;
            float beta = first ? 0.0f : 1.0f;
            rc = att_mul(dot, 0, 1, rows, keys, hd, scale, qi, hd, k + kb, hd, 0.0f, p, ld, NULL, 0, kt, tk, hd);
            if (rc == 0) rc = att_mul(dot, 0, 1, rows, keys, hd, 1.0f, gi, hd, v + kb, hd, 0.0f, ds, ld, NULL, 0, vt, tk, hd);
            if (rc != 0) break;
            ttpipe_cpu_attention_backward_rows_bf16(p, ds, pb, dsb, rows, keys, i0 + tk - t + 1, causal,
                                                    lse + (int64_t) bh * t + i0, gi, o + qb + (int64_t) i0 * hd, hd, scale);
            /* dV[0:keys] (+)= P^T dO_blk, dK[0:keys] (+)= dS^T Q_blk, dQ_blk = dS K[0:keys] */
            rc = att_mul(dot, 1, 0, keys, hd, rows, 1.0f, pb, ld, gi, hd, beta, dvb, hd, NULL, 0, NULL, 0, 0);
            if (rc == 0) rc = att_mul(dot, 1, 0, keys, hd, rows, 1.0f, dsb, ld, qi, hd, beta, dkb, hd, NULL, 0, NULL, 0, 0);
            if (rc == 0) {
                rc = att_mul(dot, 0, 0, rows, hd, keys, 1.0f, dsb, ld, k + kb, hd, 0.0f, sums, hd,
                             dq + qb + (int64_t) i0 * hd, hd, kp, hd, tk);
            }
            first = 0;
        }
        if (rc == 0) {
            ttpipe_cpu_float_to_bf16(dk + kb, (const uint32_t *) dkb, (int64_t) tk * hd);
            ttpipe_cpu_float_to_bf16(dv + kb, (const uint32_t *) dvb, (int64_t) tk * hd);
        }
    }
    free(kt);
    free(vt);
    free(kp);
    free(p);
    free(ds);
    free(pb);
    free(dsb);
    free(dkb);
    free(dvb);
    free(sums);
    return rc;
}

package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DType;

/**
 * The native kernels on pieces of either float dtype, reading and writing bf16 themselves: each kernel widens bf16
 * input into fp32 scratch a few thousand elements at a time, computes in fp32 as its fp32 twin does, and rounds bf16
 * output once ({@code types} in ttpipe_cpu.c). The bits are those of staging whole pieces through fp32
 * ({@link Fp32Staging}); only bf16 bytes cross memory. Only while {@link CpuNative#active()}.
 */
final class DirectKernels {
    private DirectKernels() {
    }

    /** One array operand: a device piece and whether it holds bf16. */
    record Arr(NativeBuffer buffer, boolean bf16) {
        static Arr of(CpuTensor t, int d) {
            return new Arr(t.piece(d), t.dtype() == DType.BF16);
        }

        int bytes() {
            return bf16 ? 2 : 4;
        }

        /** Bit {@code i} of a kernel's types when bf16. */
        int bit(int i) {
            return bf16 ? 1 << i : 0;
        }

        /** The address, after checking that the piece holds {@code n} elements (the kernels do not check). */
        long address(long n) {
            if (n < 0 || n * bytes() > buffer.capacity) {
                throw new IndexOutOfBoundsException(n + " elements of " + bytes() + " bytes in a buffer of " + buffer.capacity);
            }
            return buffer.address;
        }
    }

    /** Whether the direct kernels take these dtypes: native kernels loaded, only FP32 and BF16, at least one BF16. */
    static boolean applies(DType... types) {
        boolean any = false;
        for (DType t : types) {
            if (t != DType.FP32 && t != DType.BF16) return false;
            any |= t == DType.BF16;
        }
        return any && CpuNative.active();
    }

    static void activation(Parallel par, boolean gelu, Arr out, Arr x, int n) {
        long o = out.address(n), a = x.address(n);
        int types = out.bit(0) | x.bit(1);
        Elementwise.NativeUnary f = gelu ? CpuNative::ttpipe_cpu_gelu : CpuNative::ttpipe_cpu_silu;
        par.range(n, Elementwise.GRAIN, (lo, hi) -> f.run(o + (long) out.bytes() * lo, a + (long) x.bytes() * lo, hi - lo, types));
    }

    static void activationBackward(Parallel par, boolean gelu, Arr dx, Arr dy, Arr x, int n) {
        long o = dx.address(n), g = dy.address(n), a = x.address(n);
        int types = dx.bit(0) | dy.bit(1) | x.bit(2);
        Elementwise.NativeBackward f = gelu ? CpuNative::ttpipe_cpu_gelu_backward : CpuNative::ttpipe_cpu_silu_backward;
        par.range(n, Elementwise.GRAIN, (lo, hi) -> f.run(o + (long) dx.bytes() * lo, g + (long) dy.bytes() * lo,
                a + (long) x.bytes() * lo, hi - lo, types));
    }

    /** out = a + b or a * b, b (nb elements) repeated over a's n; n a multiple of nb. */
    static void binary(Parallel par, Arr out, Arr a, Arr b, int n, int nb, boolean mul) {
        long o = out.address(n), x = a.address(n), y = b.address(nb);
        int types = out.bit(0) | a.bit(1) | b.bit(2), m = mul ? 1 : 0;
        int so = out.bytes(), sa = a.bytes(), sb = b.bytes();
        if (nb == n) {
            par.range(n, Elementwise.GRAIN, (lo, hi) ->
                    CpuNative.ttpipe_cpu_binary(o + (long) so * lo, x + (long) sa * lo, y + (long) sb * lo, 1, hi - lo, m, types));
        } else {
            par.range(n / nb, Math.max(1, Elementwise.GRAIN / nb), (lo, hi) ->
                    CpuNative.ttpipe_cpu_binary(o + (long) so * lo * nb, x + (long) sa * lo * nb, y, hi - lo, nb, m, types));
        }
    }

    private static long floats(NativeBuffer b, long n) {
        return new Arr(b, false).address(n);
    }

    private static int rowGrain(int d) {
        return Math.max(1, Elementwise.GRAIN / Math.max(1, d));
    }

    /** LayerNorm forward (gamma, beta, mean and rstd fp32; beta may be null). */
    static void layerNorm(Parallel par, Arr y, NativeBuffer mean, NativeBuffer rstd, Arr x, NativeBuffer gamma,
                          NativeBuffer beta, int rows, int d, float eps) {
        long n = (long) rows * d;
        long ya = y.address(n), xa = x.address(n), ma = floats(mean, rows), ra = floats(rstd, rows), ga = floats(gamma, d);
        long ba = beta == null ? 0 : floats(beta, d);
        int types = y.bit(0) | x.bit(1);
        par.range(rows, rowGrain(d), (lo, hi) -> CpuNative.ttpipe_cpu_layernorm(ya, ma, ra, xa, ga, ba, lo, hi, d, eps, types));
    }

    /** LayerNorm's input gradient (gamma, mean and rstd fp32). */
    static void layerNormBackwardInput(Parallel par, Arr dx, Arr dy, Arr x, NativeBuffer gamma, NativeBuffer mean,
                                       NativeBuffer rstd, int rows, int d) {
        long n = (long) rows * d;
        long da = dx.address(n), ya = dy.address(n), xa = x.address(n);
        long ga = floats(gamma, d), ma = floats(mean, rows), ra = floats(rstd, rows);
        int types = dx.bit(0) | dy.bit(1) | x.bit(2);
        par.range(rows, rowGrain(d), (lo, hi) ->
                CpuNative.ttpipe_cpu_layernorm_backward_input(da, ya, xa, ga, ma, ra, lo, hi, d, types));
    }

    /** LayerNorm's weight gradients, both (mean, rstd, dGamma and dBeta fp32). */
    static void layerNormBackwardWeight(Parallel par, Arr dy, Arr x, NativeBuffer mean, NativeBuffer rstd,
                                        NativeBuffer dGamma, NativeBuffer dBeta, int rows, int d, boolean accumulate) {
        long n = (long) rows * d;
        long ya = dy.address(n), xa = x.address(n), ma = floats(mean, rows), ra = floats(rstd, rows);
        long ga = floats(dGamma, d), ba = floats(dBeta, d);
        int types = dy.bit(0) | x.bit(1);
        par.range(d, 32, (lo, hi) -> CpuNative.ttpipe_cpu_layernorm_backward_weight(ya, xa, ma, ra, ga, ba, rows, d, lo, hi,
                accumulate ? 1 : 0, types));
    }

    /** out (fp32, n) (+)= the sum of x's rows. */
    static void sumRows(Parallel par, Arr x, NativeBuffer out, int rows, int n, boolean accumulate) {
        long xa = x.address((long) rows * n), oa = floats(out, n);
        int types = x.bit(0);
        par.range(n, 32, (lo, hi) -> CpuNative.ttpipe_cpu_sum_rows(xa, oa, rows, n, lo, hi, accumulate ? 1 : 0, types));
    }
}

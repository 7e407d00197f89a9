package dev.ttpipe.device.cpu;

import java.nio.FloatBuffer;

/**
 * Elementwise kernels on one device's fp32 pieces, parallel over element ranges. Inputs and
 * output may be the same buffer (each element is read before it is written).
 */
final class Elementwise {
    static final int GRAIN = 1 << 14;
    /** Elements a kernel stages through heap scratch at a time. */
    private static final int BLOCK = 4096;

    private static final float GELU_C = (float) Math.sqrt(2.0 / Math.PI);
    private static final float GELU_A = 0.044715f;

    private Elementwise() {
    }

    static void fill(Parallel par, FloatBuffer out, int n, float v) {
        par.range(n, GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) out.put(i, v);
        });
    }

    /** out = a + b or a * b, with b (nb elements) repeated over a's n elements. */
    static void binary(Parallel par, FloatBuffer out, FloatBuffer a, FloatBuffer b, int n, int nb, boolean mul) {
        if (nb > 0 && n % nb == 0 && CpuNative.active()) {
            long o = CpuNative.address(out, n), x = CpuNative.address(a, n), y = CpuNative.address(b, nb);
            int m = mul ? 1 : 0;
            if (nb == n) {
                par.range(n, GRAIN, (lo, hi) -> CpuNative.ttpipe_cpu_binary(o + 4L * lo, x + 4L * lo, y + 4L * lo, 1, hi - lo, m, 0));
            } else {
                par.range(n / nb, Math.max(1, GRAIN / nb), (lo, hi) ->
                        CpuNative.ttpipe_cpu_binary(o + 4L * lo * nb, x + 4L * lo * nb, y, hi - lo, nb, m, 0));
            }
            return;
        }
        if (nb == n) {
            par.range(n, GRAIN, mul ? (lo, hi) -> {
                for (int i = lo; i < hi; i++) out.put(i, a.get(i) * b.get(i));
            } : (lo, hi) -> {
                for (int i = lo; i < hi; i++) out.put(i, a.get(i) + b.get(i));
            });
            return;
        }
        int rows = nb == 0 ? 0 : n / nb;
        par.range(rows, Math.max(1, GRAIN / Math.max(1, nb)), (lo, hi) -> {
            for (int r = lo; r < hi; r++) {
                int base = r * nb;
                if (mul) {
                    for (int j = 0; j < nb; j++) out.put(base + j, a.get(base + j) * b.get(j));
                } else {
                    for (int j = 0; j < nb; j++) out.put(base + j, a.get(base + j) + b.get(j));
                }
            }
        });
    }

    static void scale(Parallel par, FloatBuffer out, FloatBuffer a, int n, float s) {
        par.range(n, GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) out.put(i, s * a.get(i));
        });
    }

    /** a += alpha * b. */
    static void axpy(Parallel par, FloatBuffer a, FloatBuffer b, int n, float alpha) {
        par.range(n, GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) a.put(i, a.get(i) + alpha * b.get(i));
        });
    }

    /** Throws unless {@code b} holds {@code n} floats: the native kernels do not check their bounds. */
    private static long floats(NativeBuffer b, int n) {
        if (n < 0 || 4L * n > b.capacity) {
            throw new IndexOutOfBoundsException(n + " floats in a buffer of " + b.capacity + " bytes");
        }
        return b.address;
    }

    /** A native elementwise kernel over n floats at the given addresses: out = f(x). */
    @FunctionalInterface
    interface NativeUnary {
        void run(long out, long x, long n, int types);
    }

    /** A native elementwise backward kernel: dx = dy * f'(x). */
    @FunctionalInterface
    interface NativeBackward {
        void run(long dx, long dy, long x, long n, int types);
    }

    private static void unary(Parallel par, NativeBuffer out, NativeBuffer x, int n, NativeUnary f) {
        long o = floats(out, n), a = floats(x, n);
        par.range(n, GRAIN, (lo, hi) -> f.run(o + 4L * lo, a + 4L * lo, hi - lo, 0));
    }

    private static void backward(Parallel par, NativeBuffer dx, NativeBuffer dy, NativeBuffer x, int n, NativeBackward f) {
        long o = floats(dx, n), g = floats(dy, n), a = floats(x, n);
        par.range(n, GRAIN, (lo, hi) -> f.run(o + 4L * lo, g + 4L * lo, a + 4L * lo, hi - lo, 0));
    }

    /** {@link #gelu(Parallel, FloatBuffer, FloatBuffer, int)} through {@link CpuNative} when it is loaded: the same bits. */
    static void gelu(Parallel par, NativeBuffer out, NativeBuffer x, int n) {
        if (CpuNative.active()) unary(par, out, x, n, CpuNative::ttpipe_cpu_gelu);
        else gelu(par, out.floats, x.floats, n);
    }

    /** {@link #geluBackward(Parallel, FloatBuffer, FloatBuffer, FloatBuffer, int)}, native when loaded. */
    static void geluBackward(Parallel par, NativeBuffer dx, NativeBuffer dy, NativeBuffer x, int n) {
        if (CpuNative.active()) backward(par, dx, dy, x, n, CpuNative::ttpipe_cpu_gelu_backward);
        else geluBackward(par, dx.floats, dy.floats, x.floats, n);
    }

    /** {@link #silu(Parallel, FloatBuffer, FloatBuffer, int)}, native when loaded. */
    static void silu(Parallel par, NativeBuffer out, NativeBuffer x, int n) {
        if (CpuNative.active()) unary(par, out, x, n, CpuNative::ttpipe_cpu_silu);
        else silu(par, out.floats, x.floats, n);
    }

    /** {@link #siluBackward(Parallel, FloatBuffer, FloatBuffer, FloatBuffer, int)}, native when loaded. */
    static void siluBackward(Parallel par, NativeBuffer dx, NativeBuffer dy, NativeBuffer x, int n) {
        if (CpuNative.active()) backward(par, dx, dy, x, n, CpuNative::ttpipe_cpu_silu_backward);
        else siluBackward(par, dx.floats, dy.floats, x.floats, n);
    }

    /**
     * GELU, tanh approximation: {@code 0.5 x (1 + tanh(u))} with {@code u = sqrt(2/pi) (x + 0.044715 x^3)},
     * computed as {@code x * sigmoid(2u)}: no tanh, no cancellation for large |x|.
     */
    static void gelu(Parallel par, FloatBuffer out, FloatBuffer x, int n) {
        par.range(n, GRAIN, (lo, hi) -> {
            float[] buf = new float[Math.min(BLOCK, hi - lo)];        // heap scratch: bulk copies, a tight loop
            for (int c = lo; c < hi; c += buf.length) {
                int len = Math.min(buf.length, hi - c);
                x.get(c, buf, 0, len);
                for (int i = 0; i < len; i++) {
                    float v = buf[i];
                    float u = GELU_C * (v + GELU_A * v * v * v);
                    buf[i] = v * FloatExp.sigmoid(2f * u);
                }
                out.put(c, buf, 0, len);
            }
        });
    }

    /** d gelu / dx = s + 2 x s (1 - s) u', with s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2). */
    static void geluBackward(Parallel par, FloatBuffer dx, FloatBuffer dy, FloatBuffer x, int n) {
        par.range(n, GRAIN, (lo, hi) -> {
            float[] xs = new float[Math.min(BLOCK, hi - lo)];
            float[] g = new float[xs.length];
            for (int c = lo; c < hi; c += xs.length) {
                int len = Math.min(xs.length, hi - c);
                x.get(c, xs, 0, len);
                dy.get(c, g, 0, len);
                for (int i = 0; i < len; i++) {
                    float v = xs[i];
                    float u = GELU_C * (v + GELU_A * v * v * v);
                    float du = GELU_C * (1f + 3f * GELU_A * v * v);
                    float s = FloatExp.sigmoid(2f * u);
                    g[i] = g[i] * (s + 2f * v * s * (1f - s) * du);
                }
                dx.put(c, g, 0, len);
            }
        });
    }

    /** silu(x) = x * sigmoid(x). */
    static void silu(Parallel par, FloatBuffer out, FloatBuffer x, int n) {
        par.range(n, GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) {
                float v = x.get(i);
                out.put(i, v * FloatExp.sigmoid(v));
            }
        });
    }

    /** d silu / dx = s (1 + x (1 - s)). */
    static void siluBackward(Parallel par, FloatBuffer dx, FloatBuffer dy, FloatBuffer x, int n) {
        par.range(n, GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) {
                float v = x.get(i);
                float s = FloatExp.sigmoid(v);
                dx.put(i, dy.get(i) * s * (1f + v * (1f - s)));
            }
        });
    }

    /**
     * Inverted dropout on one device's piece: element (row r, column j) of the piece is logical
     * element {@code piece.globalIndex(r) + j}, mask entry {@code elementOffset} further; it is
     * kept when the mask's uniform is at least p.
     */
    static void dropout(Parallel par, FloatBuffer out, FloatBuffer x, LocalPiece piece, float p, long seed,
                        long elementOffset) {
        int cols = piece.rowLength();
        float keepScale = 1f / (1f - p);
        par.range(piece.rows(), Math.max(1, GRAIN / Math.max(1, cols)), (lo, hi) -> {
            for (int r = lo; r < hi; r++) {
                long g = elementOffset + piece.globalIndex(r);
                int base = r * cols;
                for (int j = 0; j < cols; j++) {
                    boolean keep = DropoutMask.uniform(seed, g + j) >= p;
                    out.put(base + j, keep ? x.get(base + j) * keepScale : 0f);
                }
            }
        });
    }
}

package dev.ttpipe.device.cpu;

import java.nio.FloatBuffer;

/**
 * Sums and their inverses on one device's pieces: sumRows, sum over a dim, sum of squares,
 * repeatInterleave and sumGroups. A tensor seen as [outer, k, inner] around the dim in question.
 */
final class Reductions {
    private static final int BLOCK = 4096;

    private Reductions() {
    }

    /**
     * out[j] (+)= sum over rows of x[r, j], added row by row in order; parallel over columns. Each chunk of
     * columns sums in heap scratch (one bulk read of its slice of each row), which the JIT vectorises.
     */
    static void sumRows(Parallel par, FloatBuffer x, FloatBuffer out, int rows, int n, boolean accumulate) {
        if (CpuNative.active()) {
            long xa = CpuNative.address(x, (long) rows * n), oa = CpuNative.address(out, n);
            par.range(n, 32, (lo, hi) -> CpuNative.ttpipe_cpu_sum_rows(xa, oa, rows, n, lo, hi, accumulate ? 1 : 0, 0));
            return;
        }
        par.range(n, 32, (lo, hi) -> {
            int len = hi - lo;
            float[] acc = new float[len];
            float[] row = new float[len];
            if (accumulate) out.get(lo, acc, 0, len);
            for (int r = 0; r < rows; r++) {
                x.get(r * n + lo, row, 0, len);
                for (int j = 0; j < len; j++) acc[j] += row[j];
            }
            out.put(lo, acc, 0, len);
        });
    }

    /** out[o, i] = sum over kk of x[o, kk, i]. */
    static void sum(Parallel par, FloatBuffer out, FloatBuffer x, int outer, int k, int inner) {
        int blocks = (inner + BLOCK - 1) / BLOCK;
        par.range(outer * blocks, Math.max(1, Elementwise.GRAIN / Math.max(1, Math.min(inner, BLOCK) * Math.max(1, k))),
                (lo, hi) -> {
                    for (int t = lo; t < hi; t++) {
                        int o = t / blocks;
                        int i0 = (t % blocks) * BLOCK;
                        int i1 = Math.min(inner, i0 + BLOCK);
                        int ob = o * inner;
                        for (int i = i0; i < i1; i++) out.put(ob + i, 0f);
                        for (int kk = 0; kk < k; kk++) {
                            int xb = (o * k + kk) * inner;
                            for (int i = i0; i < i1; i++) out.put(ob + i, out.get(ob + i) + x.get(xb + i));
                        }
                    }
                });
    }

    /**
     * The sum of squares in double: per chunk of the range, {@value FlashAttention#LANES} partial sums (element i of
     * the chunk to partial i % LANES) added in lane order, as ttpipe_cpu_sum_squares does; chunks in order.
     */
    static double sumSquares(Parallel par, FloatBuffer x, int n) {
        if (CpuNative.active()) {
            long xa = CpuNative.address(x, n);
            return par.sum(n, Elementwise.GRAIN, (lo, hi) -> CpuNative.ttpipe_cpu_sum_squares(xa + 4L * lo, hi - lo));
        }
        int lanes = FlashAttention.LANES;
        return par.sum(n, Elementwise.GRAIN, (lo, hi) -> {
            double[] acc = new double[lanes];
            for (int i = lo; i < hi; i++) {
                double v = x.get(i);
                acc[(i - lo) % lanes] += v * v;
            }
            double s = acc[0];
            for (int l = 1; l < lanes; l++) s += acc[l];
            return s;
        });
    }

    /** out[o, kk * r + j, i] = x[o, kk, i] for j in [0, r). */
    static void repeatInterleave(Parallel par, FloatBuffer out, FloatBuffer x, int outer, int k, int inner, int repeats) {
        par.range(outer * k, Math.max(1, Elementwise.GRAIN / Math.max(1, inner * repeats)), (lo, hi) -> {
            for (int s = lo; s < hi; s++) {
                int o = s / k;
                int kk = s % k;
                for (int j = 0; j < repeats; j++) out.put(((o * k + kk) * repeats + j) * inner, x, s * inner, inner);
            }
        });
    }

    /** out[o, kk, i] = sum over j in [0, g) of x[o, kk * g + j, i]. */
    static void sumGroups(Parallel par, FloatBuffer out, FloatBuffer x, int outer, int kOut, int g, int inner) {
        par.range(outer * kOut, Math.max(1, Elementwise.GRAIN / Math.max(1, inner * g)), (lo, hi) -> {
            for (int s = lo; s < hi; s++) {
                int ob = s * inner;
                int xb = s * g * inner;
                for (int i = 0; i < inner; i++) {
                    float acc = 0f;
                    for (int j = 0; j < g; j++) acc += x.get(xb + j * inner + i);
                    out.put(ob + i, acc);
                }
            }
        });
    }
}

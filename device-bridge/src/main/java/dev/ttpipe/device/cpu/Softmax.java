package dev.ttpipe.device.cpu;

import dev.ttpipe.device.BFloat16;

import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.util.Arrays;

/**
 * Row-wise softmax and cross-entropy over the last dim of one device's piece, parallel over rows,
 * numerically stable (max subtracted; sums and log-sum-exp in double).
 */
final class Softmax {
    private Softmax() {
    }

    private static int rowGrain(int d) {
        return Math.max(1, Elementwise.GRAIN / Math.max(1, d));
    }

    /**
     * y = softmax(scale * x) over rows of {@code tk}. With {@code causal}, row r is query
     * {@code q = r % tqLocal + qOffset} of {@code tqGlobal} and sees keys {@code j <= q + tk - tqGlobal};
     * the rest of the row is 0 (a row that sees no key is all 0).
     */
    static void forward(Parallel par, FloatBuffer y, FloatBuffer x, int rows, int tk, float scale, boolean causal,
                        int tqLocal, int tqGlobal, int qOffset) {
        par.range(rows, rowGrain(tk), (lo, hi) -> {
            for (int r = lo; r < hi; r++) {
                int base = r * tk;
                int valid = tk;
                if (causal) {
                    long q = r % tqLocal + (long) qOffset;
                    valid = (int) Math.max(0, Math.min(tk, q + tk - tqGlobal + 1));
                }
                float max = Float.NEGATIVE_INFINITY;
                for (int j = 0; j < valid; j++) max = Math.max(max, scale * x.get(base + j));
                double sum = 0;
                for (int j = 0; j < valid; j++) {
                    float e = FloatExp.exp(scale * x.get(base + j) - max);
                    y.put(base + j, e);
                    sum += e;
                }
                float inv = (float) (1.0 / sum);
                for (int j = 0; j < valid; j++) y.put(base + j, y.get(base + j) * inv);
                for (int j = valid; j < tk; j++) y.put(base + j, 0f);
            }
        });
    }

    /** dx = scale * y * (dy - sum(dy * y)). */
    static void backward(Parallel par, FloatBuffer dx, FloatBuffer y, FloatBuffer dy, int rows, int d, float scale) {
        par.range(rows, rowGrain(d), (lo, hi) -> {
            for (int r = lo; r < hi; r++) {
                int base = r * d;
                double s = 0;
                for (int j = 0; j < d; j++) s += (double) dy.get(base + j) * y.get(base + j);
                float sf = (float) s;
                for (int j = 0; j < d; j++) dx.put(base + j, scale * y.get(base + j) * (dy.get(base + j) - sf));
            }
        });
    }

    /**
     * Sum over rows whose target is not {@code ignore} of {@code logsumexp(x) - x[target]}, each row's log-sum-exp as
     * {@code max + log(sum of exp(x - max))} with the max and the sum in {@value FlashAttention#LANES} partials
     * ({@link #rowMax}, {@link #expSum}; the native kernel computes the same two, the log is Java's).
     */
    static double crossEntropy(Parallel par, FloatBuffer logits, IntBuffer targets, int rows, int v, int ignore) {
        if (CpuNative.active()) {
            return crossEntropyNative(par, CpuNative.address(logits, (long) rows * v), 0, logits::get, targets, rows, v,
                    ignore);
        }
        return par.sum(rows, rowGrain(v), (lo, hi) -> {
            float[] row = new float[v];
            double total = 0;
            for (int r = lo; r < hi; r++) {
                int t = targets.get(r);
                if (t == ignore) continue;
                logits.get(r * v, row, 0, v);
                float max = rowMax(row, v);
                total += max + Math.log(expSum(row, v, max)) - logits.get(r * v + t);
            }
            return total;
        });
    }

    /** {@link #crossEntropy} on a device piece of either float dtype, read by the native kernel as it is (DirectKernels). */
    static double crossEntropy(Parallel par, DirectKernels.Arr logits, IntBuffer targets, int rows, int v, int ignore) {
        NativeBuffer b = logits.buffer();
        IntToFloat at = logits.bf16() ? i -> BFloat16.toFloat(b.shorts.get(i)) : b.floats::get;
        return crossEntropyNative(par, logits.address((long) rows * v), logits.bit(0), at, targets, rows, v, ignore);
    }

    /** Element i of the logits as fp32. */
    @FunctionalInterface
    private interface IntToFloat {
        float get(int i);
    }

    private static double crossEntropyNative(Parallel par, long x, int types, IntToFloat at, IntBuffer targets, int rows,
                                             int v, int ignore) {
        int bytes = (types & 1) != 0 ? 2 : 4;
        return par.sum(rows, rowGrain(v), (lo, hi) -> {
            int n = hi - lo;
            float[] max = new float[n];
            double[] sum = new double[n];
            NativeBuffer stats = NativeBuffer.malloc(12 * n);
            NativeBuffer scratch = NativeBuffer.malloc(4 * Math.max(1, v));
            try {
                CpuNative.ttpipe_cpu_row_max_sumexp(x + (long) bytes * lo * v, n, v, scratch.address,
                        stats.address + 8L * n, stats.address, types);
                stats.bytes.asDoubleBuffer().get(0, sum, 0, n);
                stats.floats.get(2 * n, max, 0, n);
            } finally {
                stats.free();
                scratch.free();
            }
            double total = 0;
            for (int r = lo; r < hi; r++) {
                int t = targets.get(r);
                if (t == ignore) continue;
                total += max[r - lo] + Math.log(sum[r - lo]) - at.get(r * v + t);
            }
            return total;
        });
    }

    /**
     * dx = scale * (softmax(x) - onehot(target)); rows with the ignore index are 0. One exp per logit; the softmax is
     * exp(x - max) times {@code (float) (scale / sum)}, max and sum as {@link #crossEntropy} takes them. Native where the
     * kernels are loaded (the same bits).
     */
    static void crossEntropyBackward(Parallel par, FloatBuffer dx, FloatBuffer logits, IntBuffer targets, int rows,
                                     int v, int ignore, float scale) {
        if (CpuNative.active()) {
            backwardNative(par, CpuNative.address(dx, (long) rows * v), CpuNative.address(logits, (long) rows * v), 0,
                    targets, rows, v, ignore, scale);
            return;
        }
        par.range(rows, rowGrain(v), (lo, hi) -> {
            float[] row = new float[v];
            for (int r = lo; r < hi; r++) {
                int base = r * v;
                int t = targets.get(r);
                if (t == ignore) {
                    for (int j = 0; j < v; j++) dx.put(base + j, 0f);
                    continue;
                }
                logits.get(base, row, 0, v);
                float max = rowMax(row, v);
                double sum = expSum(row, v, max);                   // row now holds the exps
                float k = (float) (scale / sum);
                for (int j = 0; j < v; j++) row[j] *= k;
                row[t] -= scale;
                dx.put(base, row, 0, v);
            }
        });
    }

    /** {@link #crossEntropyBackward} on device pieces of either float dtype, read and written by the native kernel as they are. */
    static void crossEntropyBackward(Parallel par, DirectKernels.Arr dx, DirectKernels.Arr logits, IntBuffer targets,
                                     int rows, int v, int ignore, float scale) {
        long n = (long) rows * v;
        backwardNative(par, dx.address(n), logits.address(n), dx.bit(0) | logits.bit(1), targets, rows, v, ignore, scale);
    }

    private static void backwardNative(Parallel par, long dx, long x, int types, IntBuffer targets, int rows, int v,
                                       int ignore, float scale) {
        long t = CpuNative.address(targets, rows);
        par.range(rows, rowGrain(v), (lo, hi) -> {
            NativeBuffer scratch = types == 0 ? null : NativeBuffer.malloc(8 * Math.max(1, v));
            try {
                CpuNative.ttpipe_cpu_cross_entropy_backward_rows(dx, x, t, lo, hi, v, ignore, scale,
                        scratch == null ? 0 : scratch.address, types);
            } finally {
                if (scratch != null) scratch.free();
            }
        });
    }

    /** The max of row[0..n) in LANES partials ({@code >} keeps the partial), combined in lane order; as ttpipe_cpu.c. */
    static float rowMax(float[] row, int n) {
        float[] mx = new float[FlashAttention.LANES];
        Arrays.fill(mx, Float.NEGATIVE_INFINITY);
        for (int j = 0; j < n; j++) {
            int l = j % FlashAttention.LANES;
            mx[l] = row[j] > mx[l] ? row[j] : mx[l];
        }
        float max = mx[0];
        for (int l = 1; l < FlashAttention.LANES; l++) max = mx[l] > max ? mx[l] : max;
        return max;
    }

    /** row[j] = exp(row[j] - max) for j < n; returns their sum in double, LANES partials in lane order; as ttpipe_cpu.c. */
    static double expSum(float[] row, int n, float max) {
        double[] acc = new double[FlashAttention.LANES];
        for (int j = 0; j < n; j++) {
            row[j] = FloatExp.exp(row[j] - max);
            acc[j % FlashAttention.LANES] += row[j];
        }
        double sum = acc[0];
        for (int l = 1; l < FlashAttention.LANES; l++) sum += acc[l];
        return sum;
    }
}

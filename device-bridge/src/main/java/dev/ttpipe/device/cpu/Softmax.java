package dev.ttpipe.device.cpu;

import java.nio.FloatBuffer;
import java.nio.IntBuffer;

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

    /** Sum over rows whose target is not {@code ignore} of {@code logsumexp(x) - x[target]}. */
    static double crossEntropy(Parallel par, FloatBuffer logits, IntBuffer targets, int rows, int v, int ignore) {
        return par.sum(rows, rowGrain(v), (lo, hi) -> {
            double total = 0;
            for (int r = lo; r < hi; r++) {
                int t = targets.get(r);
                if (t == ignore) continue;
                total += logSumExp(logits, r * v, v) - logits.get(r * v + t);
            }
            return total;
        });
    }

    /** dx = scale * (softmax(x) - onehot(target)); rows with the ignore index are 0. One exp per logit. */
    static void crossEntropyBackward(Parallel par, FloatBuffer dx, FloatBuffer logits, IntBuffer targets, int rows,
                                     int v, int ignore, float scale) {
        par.range(rows, rowGrain(v), (lo, hi) -> {
            for (int r = lo; r < hi; r++) {
                int base = r * v;
                int t = targets.get(r);
                if (t == ignore) {
                    for (int j = 0; j < v; j++) dx.put(base + j, 0f);
                    continue;
                }
                float max = Float.NEGATIVE_INFINITY;
                for (int j = 0; j < v; j++) max = Math.max(max, logits.get(base + j));
                double sum = 0;
                for (int j = 0; j < v; j++) {
                    float e = FloatExp.exp(logits.get(base + j) - max);
                    dx.put(base + j, e);
                    sum += e;
                }
                float k = (float) (scale / sum);
                for (int j = 0; j < v; j++) dx.put(base + j, dx.get(base + j) * k);
                dx.put(base + t, dx.get(base + t) - scale);
            }
        });
    }

    /** log(sum(exp(x))) of one row, stable: the max plus the log of a sum of values <= 1. */
    private static double logSumExp(FloatBuffer x, int base, int n) {
        float max = Float.NEGATIVE_INFINITY;
        for (int j = 0; j < n; j++) max = Math.max(max, x.get(base + j));
        double s = 0;
        for (int j = 0; j < n; j++) s += FloatExp.exp(x.get(base + j) - max);
        return max + Math.log(s);
    }
}

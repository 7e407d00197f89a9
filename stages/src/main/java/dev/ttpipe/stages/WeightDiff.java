package dev.ttpipe.stages;

import java.util.Map;

/**
 * How far two sets of weights are apart: for every parameter, ||a - b|| / ||b|| (L2 norms over the
 * whole tensor), and the largest of these. The correctness contract's measure: a norm-wise relative
 * difference is insensitive to single near-zero elements whose value is pure rounding noise.
 */
public record WeightDiff(String worstParam, double maxRelative) {

    public static WeightDiff compare(Map<String, float[]> a, Map<String, float[]> reference) {
        if (!a.keySet().equals(reference.keySet())) {
            throw new IllegalArgumentException("parameter names differ: " + a.keySet() + " vs " + reference.keySet());
        }
        String worst = null;
        double max = 0;
        for (Map.Entry<String, float[]> e : reference.entrySet()) {
            float[] x = a.get(e.getKey()), y = e.getValue();
            if (x.length != y.length) {
                throw new IllegalArgumentException(e.getKey() + ": " + x.length + " vs " + y.length + " elements");
            }
            double diff = 0, norm = 0;
            for (int i = 0; i < y.length; i++) {
                double d = (double) x[i] - y[i];
                diff += d * d;
                norm += (double) y[i] * y[i];
            }
            double rel = Math.sqrt(diff) / Math.max(Math.sqrt(norm), 1e-30);
            if (Double.isNaN(rel)) rel = Double.POSITIVE_INFINITY;
            if (worst == null || rel > max) {
                max = rel;
                worst = e.getKey();
            }
        }
        return new WeightDiff(worst, max);
    }
}

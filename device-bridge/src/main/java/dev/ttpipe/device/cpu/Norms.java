package dev.ttpipe.device.cpu;

import java.nio.FloatBuffer;
import java.util.Arrays;

/**
 * LayerNorm and RMSNorm over the last dim of one device's piece ([rows, d] row-major), forward and
 * backward side by side. Row statistics accumulate in double. Forward and input-backward run
 * parallel over rows; weight-backward runs parallel over columns (each thread owns a column range
 * of dGamma/dBeta, so there is no race and the sum order does not depend on the thread count).
 */
final class Norms {
    private Norms() {
    }

    private static int rowGrain(int d) {
        return Math.max(1, Elementwise.GRAIN / Math.max(1, d));
    }

    // ---- layernorm: y = (x - mean) * rstd * gamma + beta ---------------------------------------

    /** The lanes of the row statistics' partial sums (element j to partial j % LANES), as in ttpipe_cpu.c. */
    static final int LANES = FlashAttention.LANES;

    static void layerNorm(Parallel par, FloatBuffer y, FloatBuffer mean, FloatBuffer rstd, FloatBuffer x,
                          FloatBuffer gamma, FloatBuffer beta, int rows, int d, float eps) {
        if (CpuNative.active()) {
            long n = (long) rows * d;
            long ya = CpuNative.address(y, n), ma = CpuNative.address(mean, rows), ra = CpuNative.address(rstd, rows);
            long xa = CpuNative.address(x, n), ga = CpuNative.address(gamma, d), ba = CpuNative.address(beta, d);
            par.range(rows, rowGrain(d), (lo, hi) -> CpuNative.ttpipe_cpu_layernorm(ya, ma, ra, xa, ga, ba, lo, hi, d, eps, 0));
            return;
        }
        par.range(rows, rowGrain(d), (lo, hi) -> {
            double[] s = new double[LANES];
            double[] ss = new double[LANES];
            for (int r = lo; r < hi; r++) {
                int base = r * d;
                Arrays.fill(s, 0.0);
                Arrays.fill(ss, 0.0);
                for (int j = 0; j < d; j++) {
                    double v = x.get(base + j);
                    s[j % LANES] += v;
                    ss[j % LANES] += v * v;
                }
                double st = s[0];
                double sst = ss[0];
                for (int l = 1; l < LANES; l++) {
                    st += s[l];
                    sst += ss[l];
                }
                double m = st / d;
                double var = Math.max(0.0, sst / d - m * m); // one pass; double keeps the cancellation harmless
                float rs = (float) (1.0 / Math.sqrt(var + eps));
                float mf = (float) m;
                for (int j = 0; j < d; j++) {
                    float xhat = (x.get(base + j) - mf) * rs;
                    y.put(base + j, xhat * gamma.get(j) + (beta == null ? 0f : beta.get(j)));
                }
                mean.put(r, mf);
                rstd.put(r, rs);
            }
        });
    }

    /** dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gamma * dy. */
    static void layerNormBackwardInput(Parallel par, FloatBuffer dx, FloatBuffer dy, FloatBuffer x, FloatBuffer gamma,
                                       FloatBuffer mean, FloatBuffer rstd, int rows, int d) {
        if (CpuNative.active()) {
            long n = (long) rows * d;
            long da = CpuNative.address(dx, n), ya = CpuNative.address(dy, n), xa = CpuNative.address(x, n);
            long ga = CpuNative.address(gamma, d), ma = CpuNative.address(mean, rows), ra = CpuNative.address(rstd, rows);
            par.range(rows, rowGrain(d), (lo, hi) -> CpuNative.ttpipe_cpu_layernorm_backward_input(da, ya, xa, ga, ma, ra, lo, hi, d, 0));
            return;
        }
        par.range(rows, rowGrain(d), (lo, hi) -> {
            float[] gam = new float[d];                  // heap copies of a row: the same sums, no buffer access per element
            float[] dyr = new float[d];
            float[] xr = new float[d];
            double[] sg = new double[LANES];
            double[] sgx = new double[LANES];
            gamma.get(0, gam, 0, d);
            for (int r = lo; r < hi; r++) {
                int base = r * d;
                dy.get(base, dyr, 0, d);
                x.get(base, xr, 0, d);
                float m = mean.get(r);
                float rs = rstd.get(r);
                Arrays.fill(sg, 0.0);
                Arrays.fill(sgx, 0.0);
                for (int j = 0; j < d; j++) {
                    double g = gam[j] * dyr[j];
                    sg[j % LANES] += g;
                    sgx[j % LANES] += g * (xr[j] - m) * rs;
                }
                double sgt = sg[0];
                double sgxt = sgx[0];
                for (int l = 1; l < LANES; l++) {
                    sgt += sg[l];
                    sgxt += sgx[l];
                }
                float mg = (float) (sgt / d);
                float mgx = (float) (sgxt / d);
                for (int j = 0; j < d; j++) {
                    float xhat = (xr[j] - m) * rs;
                    float g = gam[j] * dyr[j];
                    dyr[j] = rs * (g - mg - xhat * mgx);
                }
                dx.put(base, dyr, 0, d);
            }
        });
    }

    /** dGamma (+)= sum over rows of dy * xhat; dBeta (+)= sum over rows of dy. Either may be null. */
    static void layerNormBackwardWeight(Parallel par, FloatBuffer dy, FloatBuffer x, FloatBuffer mean, FloatBuffer rstd,
                                        FloatBuffer dGamma, FloatBuffer dBeta, int rows, int d, boolean accumulate) {
        if (dGamma != null && dBeta != null && CpuNative.active()) {
            long n = (long) rows * d;
            long ya = CpuNative.address(dy, n), xa = CpuNative.address(x, n), ma = CpuNative.address(mean, rows);
            long ra = CpuNative.address(rstd, rows), ga = CpuNative.address(dGamma, d), ba = CpuNative.address(dBeta, d);
            par.range(d, 32, (lo, hi) -> CpuNative.ttpipe_cpu_layernorm_backward_weight(ya, xa, ma, ra, ga, ba, rows, d, lo, hi,
                    accumulate ? 1 : 0, 0));
            return;
        }
        par.range(d, 32, (lo, hi) -> {
            int len = hi - lo;                           // this chunk's columns, summed in heap scratch row by row
            float[] gs = new float[len];
            float[] bs = new float[len];
            float[] dyr = new float[len];
            float[] xr = new float[len];
            if (accumulate) {
                if (dGamma != null) dGamma.get(lo, gs, 0, len);
                if (dBeta != null) dBeta.get(lo, bs, 0, len);
            }
            for (int r = 0; r < rows; r++) {
                int base = r * d;
                float m = mean.get(r);
                float rs = rstd.get(r);
                dy.get(base + lo, dyr, 0, len);
                x.get(base + lo, xr, 0, len);
                for (int j = 0; j < len; j++) {
                    float g = dyr[j];
                    gs[j] = gs[j] + g * (xr[j] - m) * rs;
                    bs[j] = bs[j] + g;
                }
            }
            if (dGamma != null) dGamma.put(lo, gs, 0, len);
            if (dBeta != null) dBeta.put(lo, bs, 0, len);
        });
    }

    // ---- rmsnorm: y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps) ------------------------

    static void rmsNorm(Parallel par, FloatBuffer y, FloatBuffer rstd, FloatBuffer x, FloatBuffer gamma, int rows,
                        int d, float eps) {
        par.range(rows, rowGrain(d), (lo, hi) -> {
            for (int r = lo; r < hi; r++) {
                int base = r * d;
                double ss = 0;
                for (int j = 0; j < d; j++) {
                    double v = x.get(base + j);
                    ss += v * v;
                }
                float rs = (float) (1.0 / Math.sqrt(ss / d + eps));
                for (int j = 0; j < d; j++) y.put(base + j, x.get(base + j) * rs * gamma.get(j));
                rstd.put(r, rs);
            }
        });
    }

    /** dx = rstd * (g - xhat * mean(g * xhat)), g = gamma * dy, xhat = x * rstd. */
    static void rmsNormBackwardInput(Parallel par, FloatBuffer dx, FloatBuffer dy, FloatBuffer x, FloatBuffer gamma,
                                     FloatBuffer rstd, int rows, int d) {
        par.range(rows, rowGrain(d), (lo, hi) -> {
            for (int r = lo; r < hi; r++) {
                int base = r * d;
                float rs = rstd.get(r);
                double sgx = 0;
                for (int j = 0; j < d; j++) sgx += (double) gamma.get(j) * dy.get(base + j) * x.get(base + j) * rs;
                float mgx = (float) (sgx / d);
                for (int j = 0; j < d; j++) {
                    float xhat = x.get(base + j) * rs;
                    dx.put(base + j, rs * (gamma.get(j) * dy.get(base + j) - xhat * mgx));
                }
            }
        });
    }

    /** dGamma (+)= sum over rows of dy * x * rstd. */
    static void rmsNormBackwardWeight(Parallel par, FloatBuffer dy, FloatBuffer x, FloatBuffer rstd, FloatBuffer dGamma,
                                      int rows, int d, boolean accumulate) {
        par.range(d, 32, (lo, hi) -> {
            if (!accumulate) {
                for (int j = lo; j < hi; j++) dGamma.put(j, 0f);
            }
            for (int r = 0; r < rows; r++) {
                int base = r * d;
                float rs = rstd.get(r);
                for (int j = lo; j < hi; j++) dGamma.put(j, dGamma.get(j) + dy.get(base + j) * x.get(base + j) * rs);
            }
        });
    }
}

package dev.ttpipe.device;

import java.util.function.ToDoubleFunction;

/**
 * Straightforward double-precision implementations of every op, on row-major host arrays: what
 * the backends are checked against (and, through finite differences, their backward passes).
 */
final class Reference {
    private Reference() {
    }

    static double[] toDouble(float[] x) {
        double[] d = new double[x.length];
        for (int i = 0; i < x.length; i++) d[i] = x[i];
        return d;
    }

    static float[] toFloat(double[] x) {
        float[] f = new float[x.length];
        for (int i = 0; i < x.length; i++) f[i] = (float) x[i];
        return f;
    }

    /** op(a) @ op(b) for batch matrices; a [batch, m, k] (or [batch, k, m] transposed), b [k, n] shared or per batch. */
    static double[] matmul(double[] a, double[] b, int batch, int m, int n, int k, boolean ta, boolean tb,
                           boolean batchedB) {
        double[] c = new double[batch * m * n];
        for (int p = 0; p < batch; p++) {
            int ao = p * m * k;
            int bo = batchedB ? p * k * n : 0;
            for (int i = 0; i < m; i++) {
                for (int j = 0; j < n; j++) {
                    double s = 0;
                    for (int q = 0; q < k; q++) {
                        double av = ta ? a[ao + q * m + i] : a[ao + i * k + q];
                        double bv = tb ? b[bo + j * k + q] : b[bo + q * n + j];
                        s += av * bv;
                    }
                    c[p * m * n + i * n + j] = s;
                }
            }
        }
        return c;
    }

    static double[] layerNorm(double[] x, double[] g, double[] b, int rows, int d, double eps) {
        double[] y = new double[x.length];
        for (int r = 0; r < rows; r++) {
            double m = 0;
            for (int j = 0; j < d; j++) m += x[r * d + j];
            m /= d;
            double v = 0;
            for (int j = 0; j < d; j++) v += (x[r * d + j] - m) * (x[r * d + j] - m);
            v /= d;
            double rs = 1 / Math.sqrt(v + eps);
            for (int j = 0; j < d; j++) y[r * d + j] = (x[r * d + j] - m) * rs * g[j] + (b == null ? 0 : b[j]);
        }
        return y;
    }

    static double[] rmsNorm(double[] x, double[] g, int rows, int d, double eps) {
        double[] y = new double[x.length];
        for (int r = 0; r < rows; r++) {
            double ss = 0;
            for (int j = 0; j < d; j++) ss += x[r * d + j] * x[r * d + j];
            double rs = 1 / Math.sqrt(ss / d + eps);
            for (int j = 0; j < d; j++) y[r * d + j] = x[r * d + j] * rs * g[j];
        }
        return y;
    }

    /** Softmax of scale * x over rows of tk; causal: row r is query r % tq, sees keys j <= q + tk - tq. */
    static double[] softmax(double[] x, int rows, int tk, double scale, boolean causal, int tq) {
        double[] y = new double[x.length];
        for (int r = 0; r < rows; r++) {
            int valid = causal ? Math.max(0, Math.min(tk, r % tq + tk - tq + 1)) : tk;
            double max = Double.NEGATIVE_INFINITY;
            for (int j = 0; j < valid; j++) max = Math.max(max, scale * x[r * tk + j]);
            double s = 0;
            for (int j = 0; j < valid; j++) s += Math.exp(scale * x[r * tk + j] - max);
            for (int j = 0; j < valid; j++) y[r * tk + j] = Math.exp(scale * x[r * tk + j] - max) / s;
        }
        return y;
    }

    static double gelu(double x) {
        return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
    }

    static double silu(double x) {
        return x / (1 + Math.exp(-x));
    }

    /** Rotary embedding on [B, H, T, hd]. */
    static double[] rope(double[] x, int bh, int t, int hd, double theta, boolean inverse) {
        double[] invFreq = new double[hd / 2];
        for (int i = 0; i < hd / 2; i++) invFreq[i] = Math.pow(theta, -2.0 * i / hd);
        return rope(x, bh, t, hd, invFreq, inverse);
    }

    /** Rotary embedding on [B, H, T, hd] with the given hd / 2 inverse frequencies. */
    static double[] rope(double[] x, int bh, int t, int hd, double[] invFreq, boolean inverse) {
        double[] y = new double[x.length];
        for (int r = 0; r < bh * t; r++) {
            int pos = r % t;
            for (int i = 0; i < hd / 2; i++) {
                double a = pos * invFreq[i] * (inverse ? -1 : 1);
                double x0 = x[r * hd + 2 * i];
                double x1 = x[r * hd + 2 * i + 1];
                y[r * hd + 2 * i] = x0 * Math.cos(a) - x1 * Math.sin(a);
                y[r * hd + 2 * i + 1] = x0 * Math.sin(a) + x1 * Math.cos(a);
            }
        }
        return y;
    }

    /**
     * Llama 3.1's rescaled inverse frequencies, written after Hugging Face's {@code _compute_llama3_parameters}
     * (whole-array selects, as its torch.where): the base {@code theta^(-2i/hd)}; where the wavelength
     * 2 pi / f exceeds {@code old / low}, f / factor; where it lies within [old / high, old / low], the blend
     * {@code (1 - s) f / factor + s f} with {@code s = (old / wavelength - low) / (high - low)}.
     */
    static double[] llama3InverseFrequencies(double theta, int hd, double factor, double low, double high, double old) {
        int n = hd / 2;
        double[] base = new double[n], wavelen = new double[n], scaled = new double[n], out = new double[n];
        for (int i = 0; i < n; i++) {
            base[i] = 1.0 / Math.pow(theta, (2.0 * i) / hd);
            wavelen[i] = 2 * Math.PI / base[i];
        }
        double lowFreqWavelen = old / low, highFreqWavelen = old / high;
        for (int i = 0; i < n; i++) scaled[i] = wavelen[i] > lowFreqWavelen ? base[i] / factor : base[i];
        for (int i = 0; i < n; i++) {
            double smooth = (old / wavelen[i] - low) / (high - low);
            double smoothed = (1 - smooth) * scaled[i] / factor + smooth * scaled[i];
            boolean medium = !(wavelen[i] < highFreqWavelen) && !(wavelen[i] > lowFreqWavelen);
            out[i] = medium ? smoothed : scaled[i];
        }
        return out;
    }

    /** Sum of per-row losses (rows whose target is the ignore index skipped). */
    static double crossEntropy(double[] logits, int[] targets, int v, int ignore) {
        double total = 0;
        for (int r = 0; r < targets.length; r++) {
            if (targets[r] == ignore) continue;
            double max = Double.NEGATIVE_INFINITY;
            for (int j = 0; j < v; j++) max = Math.max(max, logits[r * v + j]);
            double s = 0;
            for (int j = 0; j < v; j++) s += Math.exp(logits[r * v + j] - max);
            total += max + Math.log(s) - logits[r * v + targets[r]];
        }
        return total;
    }

    static double dot(double[] a, double[] b) {
        double s = 0;
        for (int i = 0; i < a.length; i++) s += a[i] * b[i];
        return s;
    }

    /** Central finite-difference gradient of f at x, in double. */
    static double[] gradient(ToDoubleFunction<double[]> f, double[] x, double eps) {
        double[] g = new double[x.length];
        double[] p = x.clone();
        for (int i = 0; i < x.length; i++) {
            p[i] = x[i] + eps;
            double up = f.applyAsDouble(p);
            p[i] = x[i] - eps;
            double down = f.applyAsDouble(p);
            p[i] = x[i];
            g[i] = (up - down) / (2 * eps);
        }
        return g;
    }
}

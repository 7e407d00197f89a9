package dev.ttpipe.stages.fp64;

import dev.ttpipe.device.AdamWParams;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.ReduceOp;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.device.SgdParams;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.spi.CheckedOps;
import dev.ttpipe.device.spi.DeviceMemory;
import dev.ttpipe.device.spi.MatmulDims;
import dev.ttpipe.device.spi.MeshTensor;
import dev.ttpipe.device.spi.SubmeshBase;

import java.util.Arrays;
import java.util.List;

/**
 * The bridge ops in double precision on one device, written from {@link dev.ttpipe.device.Ops}'s
 * contract as plain loops. {@link CheckedOps} checks arguments and derives shapes exactly as for
 * the real backends, so a program the stages issue runs here unchanged. The float arguments of
 * the ops (scales, eps, theta) are widened as given; dropout draws the cpu backend's mask.
 */
public final class Fp64Ops extends CheckedOps {
    private final List<DeviceMemory> memories;

    Fp64Ops(SubmeshBase sub) {
        super(sub);
        this.memories = sub.accounting();
    }

    // ---- what tests use beyond Ops -------------------------------------------------------------------

    /** The elements of a float tensor of the fp64 mesh, live (writing them changes the tensor). */
    public static double[] data(Tensor t) {
        return ((Fp64Tensor) t).doubles();
    }

    /** A replicated tensor holding {@code values} exactly. */
    public Tensor fromDoubles(double[] values, Shape shape) {
        Tensor t = zeros(shape, Layout.REPLICATED, DType.FP32);
        System.arraycopy(values, 0, data(t), 0, values.length);
        return t;
    }

    // ---- memory --------------------------------------------------------------------------------------

    @Override
    protected boolean isOwnTensor(Tensor t) {
        return t instanceof Fp64Tensor;
    }

    @Override
    protected MeshTensor allocate(Shape s, Layout layout, DType dtype) {
        if (s.numel() > Integer.MAX_VALUE - 8) throw new DeviceException("fp64: " + s + " is too large");
        int n = (int) s.numel();
        long bytes = (long) n * (dtype == DType.INT32 ? 4 : 8);
        DeviceMemory.allocateAll(memories, bytes);
        return new Fp64Tensor(submesh(), s, layout, dtype, new Fp64Tensor.Values(memories, dtype, n));
    }

    @Override
    protected MeshTensor view(MeshTensor base, Shape s, Layout layout) {
        base.storage().retain();
        return new Fp64Tensor(submesh(), s, layout, base.dtype(), (Fp64Tensor.Values) base.storage());
    }

    private static double[] d(MeshTensor t) {
        return ((Fp64Tensor) t).doubles();
    }

    private static int[] ids(MeshTensor t) {
        return ((Fp64Tensor) t).ints();
    }

    private static int n(MeshTensor t) {
        return (int) t.shape().numel();
    }

    private static int last(MeshTensor t) {
        return t.shape().last();
    }

    private static int rows(MeshTensor t) {
        return (int) t.shape().rows();
    }

    // ---- creation and movement -----------------------------------------------------------------------

    @Override
    protected void writeHostKernel(MeshTensor t, float[] data) {
        double[] o = d(t);
        for (int i = 0; i < data.length; i++) o[i] = data[i];
    }

    @Override
    protected void writeHostIntsKernel(MeshTensor t, int[] data) {
        System.arraycopy(data, 0, ids(t), 0, data.length);
    }

    @Override
    protected void writeLocalKernel(MeshTensor t, float[][] pieces) {
        writeHostKernel(t, pieces[0]);
    }

    @Override
    protected void fillKernel(MeshTensor t, float value) {
        if (t.dtype() == DType.INT32) Arrays.fill(ids(t), (int) value);
        else Arrays.fill(d(t), value);
    }

    @Override
    protected void copyKernel(MeshTensor dst, MeshTensor src) {
        int len = n(src);
        boolean di = dst.dtype() == DType.INT32, si = src.dtype() == DType.INT32;
        for (int i = 0; i < len; i++) {
            if (di && si) ids(dst)[i] = ids(src)[i];
            else if (di) ids(dst)[i] = (int) d(src)[i];
            else d(dst)[i] = si ? ids(src)[i] : d(src)[i];
        }
    }

    @Override
    protected void permuteKernel(MeshTensor out, MeshTensor x, int[] dims) {
        int[] in = x.shape().toArray();
        int rank = in.length;
        int[] stride = new int[rank];
        for (int i = rank - 1, s = 1; i >= 0; s *= in[i], i--) stride[i] = s;
        int[] outDims = out.shape().toArray();
        int[] idx = new int[rank];
        int total = n(x);
        for (int o = 0; o < total; o++) {
            int src = 0;
            for (int i = 0; i < rank; i++) src += idx[i] * stride[dims[i]];
            if (x.dtype() == DType.INT32) ids(out)[o] = ids(x)[src];
            else d(out)[o] = d(x)[src];
            for (int i = rank - 1; i >= 0 && ++idx[i] == outDims[i]; i--) idx[i] = 0;
        }
    }

    @Override
    protected MeshTensor adoptKernel(MeshTensor t) {
        throw new DeviceException("fp64 mesh: one submesh, nothing to adopt from");
    }

    // ---- matmul ----------------------------------------------------------------------------------------

    @Override
    protected void matmulKernel(MeshTensor out, MeshTensor a, MeshTensor b, boolean ta, boolean tb, float alpha,
                                float beta) {
        MatmulDims md = MatmulDims.of(a.shape(), ta, b.shape(), tb);
        int m = md.m(), nn = md.n(), k = md.k();
        double[] av = d(a), bv = d(b), cv = d(out);
        for (int s = 0; s < md.batch(); s++) {
            int ao = s * m * k, bo = md.batchedB() ? s * k * nn : 0, co = s * m * nn;
            for (int i = 0; i < m; i++) {
                for (int j = 0; j < nn; j++) {
                    double acc = 0;
                    for (int p = 0; p < k; p++) {
                        double x = ta ? av[ao + p * m + i] : av[ao + i * k + p];
                        double y = tb ? bv[bo + j * k + p] : bv[bo + p * nn + j];
                        acc += x * y;
                    }
                    int c = co + i * nn + j;
                    cv[c] = alpha * acc + (beta == 0f ? 0 : beta * cv[c]);
                }
            }
        }
    }

    // ---- embedding -------------------------------------------------------------------------------------

    @Override
    protected void embeddingKernel(MeshTensor out, MeshTensor idsT, MeshTensor table) {
        int dim = table.shape().dim(1);
        int[] id = ids(idsT);
        checkIds("embedding", id, table.shape().dim(0), Integer.MIN_VALUE);
        for (int r = 0; r < id.length; r++) System.arraycopy(d(table), id[r] * dim, d(out), r * dim, dim);
    }

    @Override
    protected void embeddingBackwardKernel(MeshTensor idsT, MeshTensor dOut, MeshTensor dTable, boolean accumulate) {
        int dim = dTable.shape().dim(1);
        int[] id = ids(idsT);
        checkIds("embeddingBackward", id, dTable.shape().dim(0), Integer.MIN_VALUE);
        double[] g = d(dTable);
        if (!accumulate) Arrays.fill(g, 0);
        for (int r = 0; r < id.length; r++) {
            for (int j = 0; j < dim; j++) g[id[r] * dim + j] += d(dOut)[r * dim + j];
        }
    }

    private static void checkIds(String op, int[] id, int v, int ignore) {
        for (int i = 0; i < id.length; i++) {
            if ((id[i] < 0 || id[i] >= v) && id[i] != ignore) {
                throw new DeviceException(op + ": id " + id[i] + " at position " + i + " is outside [0, " + v + ")");
            }
        }
    }

    // ---- normalisation: xhat = (x - mean) * rstd, y = xhat * gamma + beta --------------------------------

    @Override
    protected void layerNormKernel(MeshTensor y, MeshTensor mean, MeshTensor rstd, MeshTensor x, MeshTensor gamma,
                                   MeshTensor beta, float eps) {
        int dim = last(x);
        double[] xv = d(x), g = d(gamma), yv = d(y);
        for (int r = 0; r < rows(x); r++) {
            int o = r * dim;
            double mu = 0, var = 0;
            for (int j = 0; j < dim; j++) mu += xv[o + j];
            mu /= dim;
            for (int j = 0; j < dim; j++) var += (xv[o + j] - mu) * (xv[o + j] - mu);
            double rs = 1 / Math.sqrt(var / dim + eps);
            for (int j = 0; j < dim; j++) yv[o + j] = (xv[o + j] - mu) * rs * g[j] + (beta == null ? 0 : d(beta)[j]);
            d(mean)[r] = mu;
            d(rstd)[r] = rs;
        }
    }

    /** dx = rstd * (gdy - mean(gdy) - xhat * mean(gdy * xhat)), gdy = gamma * dy. */
    @Override
    protected void layerNormBackwardInputKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, MeshTensor gamma,
                                                MeshTensor mean, MeshTensor rstd) {
        normBackwardInput(dx, dy, x, gamma, d(mean), d(rstd));
    }

    @Override
    protected void layerNormBackwardWeightKernel(MeshTensor dy, MeshTensor x, MeshTensor mean, MeshTensor rstd,
                                                 MeshTensor dGamma, MeshTensor dBeta, boolean accumulate) {
        normBackwardWeight(dy, x, d(mean), d(rstd), dGamma, dBeta, accumulate);
    }

    @Override
    protected void rmsNormKernel(MeshTensor y, MeshTensor rstd, MeshTensor x, MeshTensor gamma, float eps) {
        int dim = last(x);
        double[] xv = d(x), g = d(gamma), yv = d(y);
        for (int r = 0; r < rows(x); r++) {
            int o = r * dim;
            double ss = 0;
            for (int j = 0; j < dim; j++) ss += xv[o + j] * xv[o + j];
            double rs = 1 / Math.sqrt(ss / dim + eps);
            for (int j = 0; j < dim; j++) yv[o + j] = xv[o + j] * rs * g[j];
            d(rstd)[r] = rs;
        }
    }

    /** RMSNorm is LayerNorm with mean 0 and no mean subtraction in the gradient: dx = rstd * (gdy - xhat * mean(gdy * xhat)). */
    @Override
    protected void rmsNormBackwardInputKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, MeshTensor gamma,
                                              MeshTensor rstd) {
        normBackwardInput(dx, dy, x, gamma, null, d(rstd));
    }

    @Override
    protected void rmsNormBackwardWeightKernel(MeshTensor dy, MeshTensor x, MeshTensor rstd, MeshTensor dGamma,
                                               boolean accumulate) {
        normBackwardWeight(dy, x, null, d(rstd), dGamma, null, accumulate);
    }

    /** {@code mean} null: RMSNorm. */
    private static void normBackwardInput(MeshTensor dx, MeshTensor dy, MeshTensor x, MeshTensor gamma, double[] mean,
                                          double[] rstd) {
        int dim = last(x);
        double[] xv = d(x), g = d(gamma), dyv = d(dy), dxv = d(dx);
        for (int r = 0; r < rows(x); r++) {
            int o = r * dim;
            double mu = mean == null ? 0 : mean[r], rs = rstd[r];
            double sg = 0, sgx = 0;
            for (int j = 0; j < dim; j++) {
                double gd = g[j] * dyv[o + j];
                sg += gd;
                sgx += gd * (xv[o + j] - mu) * rs;
            }
            double mg = mean == null ? 0 : sg / dim;
            for (int j = 0; j < dim; j++) {
                double xhat = (xv[o + j] - mu) * rs;
                dxv[o + j] = rs * (g[j] * dyv[o + j] - mg - xhat * sgx / dim);
            }
        }
    }

    private static void normBackwardWeight(MeshTensor dy, MeshTensor x, double[] mean, double[] rstd, MeshTensor dGamma,
                                           MeshTensor dBeta, boolean accumulate) {
        int dim = last(x);
        double[] xv = d(x), dyv = d(dy);
        if (!accumulate) {
            if (dGamma != null) Arrays.fill(d(dGamma), 0);
            if (dBeta != null) Arrays.fill(d(dBeta), 0);
        }
        for (int r = 0; r < rows(x); r++) {
            int o = r * dim;
            double mu = mean == null ? 0 : mean[r];
            for (int j = 0; j < dim; j++) {
                if (dGamma != null) d(dGamma)[j] += dyv[o + j] * (xv[o + j] - mu) * rstd[r];
                if (dBeta != null) d(dBeta)[j] += dyv[o + j];
            }
        }
    }

    // ---- softmax, activations, rotary --------------------------------------------------------------------

    @Override
    protected void softmaxKernel(MeshTensor y, MeshTensor x, float scale, boolean causal) {
        int tk = last(x);
        int rank = x.shape().rank();
        int tq = rank >= 2 ? x.shape().dim(rank - 2) : 1;
        double[] xv = d(x), yv = d(y);
        for (int r = 0; r < rows(x); r++) {
            int o = r * tk;
            int valid = causal ? Math.max(0, Math.min(tk, r % tq + tk - tq + 1)) : tk;
            double max = Double.NEGATIVE_INFINITY, sum = 0;
            for (int j = 0; j < valid; j++) max = Math.max(max, scale * xv[o + j]);
            for (int j = 0; j < valid; j++) sum += yv[o + j] = Math.exp(scale * xv[o + j] - max);
            for (int j = 0; j < tk; j++) yv[o + j] = j < valid ? yv[o + j] / sum : 0;
        }
    }

    @Override
    protected void softmaxBackwardKernel(MeshTensor dx, MeshTensor y, MeshTensor dy, float scale) {
        int dim = last(y);
        double[] yv = d(y), dyv = d(dy), dxv = d(dx);
        for (int r = 0; r < rows(y); r++) {
            int o = r * dim;
            double s = 0;
            for (int j = 0; j < dim; j++) s += dyv[o + j] * yv[o + j];
            for (int j = 0; j < dim; j++) dxv[o + j] = scale * yv[o + j] * (dyv[o + j] - s);
        }
    }

    private static final double GELU_C = Math.sqrt(2 / Math.PI), GELU_A = 0.044715;

    @Override
    protected void activationKernel(MeshTensor out, MeshTensor x, Activation f) {
        double[] xv = d(x), o = d(out);
        for (int i = 0; i < n(x); i++) {
            double v = xv[i];
            o[i] = f == Activation.GELU ? 0.5 * v * (1 + Math.tanh(GELU_C * (v + GELU_A * v * v * v)))
                    : v / (1 + Math.exp(-v));
        }
    }

    @Override
    protected void activationBackwardKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, Activation f) {
        double[] xv = d(x), g = d(dy), o = d(dx);
        for (int i = 0; i < n(x); i++) {
            double v = xv[i], deriv;
            if (f == Activation.GELU) {
                double t = Math.tanh(GELU_C * (v + GELU_A * v * v * v));
                deriv = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * GELU_C * (1 + 3 * GELU_A * v * v);
            } else {
                double s = 1 / (1 + Math.exp(-v));
                deriv = s * (1 + v * (1 - s));
            }
            o[i] = g[i] * deriv;
        }
    }

    /** x [B, H, T, hd]: pair (2i, 2i+1) at position t turns by t * inv_freq[i] (theta^(-2i/hd), rescaled if asked); inverse turns back. */
    @Override
    protected void ropeKernel(MeshTensor out, MeshTensor x, RopeFrequencies frequencies, boolean inverse) {
        int t = x.shape().dim(2), hd = x.shape().dim(3);
        double[] xv = d(x), o = d(out);
        double[] invFreq = frequencies.inverse(hd);
        for (int r = 0; r < rows(x); r++) {
            int base = r * hd;
            for (int i = 0; i < hd / 2; i++) {
                double angle = (r % t) * invFreq[i] * (inverse ? -1 : 1);
                double c = Math.cos(angle), s = Math.sin(angle);
                double x0 = xv[base + 2 * i], x1 = xv[base + 2 * i + 1];
                o[base + 2 * i] = x0 * c - x1 * s;
                o[base + 2 * i + 1] = x0 * s + x1 * c;
            }
        }
    }

    // ---- elementwise and reductions ------------------------------------------------------------------------

    @Override
    protected void binaryKernel(MeshTensor out, MeshTensor a, MeshTensor b, Binary op) {
        double[] av = d(a), bv = d(b), o = d(out);
        int nb = n(b);
        for (int i = 0; i < n(a); i++) o[i] = op == Binary.MUL ? av[i] * bv[i % nb] : av[i] + bv[i % nb];
    }

    @Override
    protected void scaleKernel(MeshTensor out, MeshTensor a, float s) {
        for (int i = 0; i < n(a); i++) d(out)[i] = s * d(a)[i];
    }

    @Override
    protected void axpyKernel(MeshTensor a, MeshTensor b, float alpha) {
        for (int i = 0; i < n(a); i++) d(a)[i] += alpha * d(b)[i];
    }

    @Override
    protected void sumRowsKernel(MeshTensor x, MeshTensor out, boolean accumulate) {
        int cols = last(x);
        if (!accumulate) Arrays.fill(d(out), 0);
        for (int i = 0; i < n(x); i++) d(out)[i % cols] += d(x)[i];
    }

    @Override
    protected void sumKernel(MeshTensor out, MeshTensor x, int dim) {
        int[] s = aroundDim(x.shape(), dim);
        double[] o = d(out), xv = d(x);
        Arrays.fill(o, 0);
        for (int a = 0; a < s[0]; a++) {
            for (int k = 0; k < s[1]; k++) {
                for (int i = 0; i < s[2]; i++) o[a * s[2] + i] += xv[(a * s[1] + k) * s[2] + i];
            }
        }
    }

    @Override
    protected double sumSquaresKernel(MeshTensor x) {
        double s = 0;
        for (int i = 0; i < n(x); i++) s += d(x)[i] * d(x)[i];
        return s;
    }

    @Override
    protected void repeatInterleaveKernel(MeshTensor out, MeshTensor x, int dim, int repeats) {
        int[] s = aroundDim(x.shape(), dim);
        for (int a = 0; a < s[0]; a++) {
            for (int k = 0; k < s[1]; k++) {
                for (int j = 0; j < repeats; j++) {
                    System.arraycopy(d(x), (a * s[1] + k) * s[2], d(out), ((a * s[1] + k) * repeats + j) * s[2], s[2]);
                }
            }
        }
    }

    @Override
    protected void sumGroupsKernel(MeshTensor out, MeshTensor x, int dim, int groupSize) {
        int[] s = aroundDim(x.shape(), dim);
        int kOut = s[1] / groupSize;
        double[] o = d(out);
        Arrays.fill(o, 0);
        for (int a = 0; a < s[0]; a++) {
            for (int k = 0; k < s[1]; k++) {
                for (int i = 0; i < s[2]; i++) o[(a * kOut + k / groupSize) * s[2] + i] += d(x)[(a * s[1] + k) * s[2] + i];
            }
        }
    }

    /** {outer, size of dim, inner}. */
    private static int[] aroundDim(Shape s, int dim) {
        int outer = 1, inner = 1;
        for (int i = 0; i < dim; i++) outer *= s.dim(i);
        for (int i = dim + 1; i < s.rank(); i++) inner *= s.dim(i);
        return new int[]{outer, s.dim(dim), inner};
    }

    // ---- loss --------------------------------------------------------------------------------------------------

    @Override
    protected LossOutput crossEntropyKernel(MeshTensor logits, MeshTensor targets, int ignoreIndex) {
        int v = last(logits);
        int[] t = ids(targets);
        checkIds("crossEntropy", t, v, ignoreIndex);
        double sum = 0;
        long count = 0;
        for (int r = 0; r < rows(logits); r++) {
            if (t[r] == ignoreIndex) continue;
            sum += logSumExp(d(logits), r * v, v) - d(logits)[r * v + t[r]];
            count++;
        }
        return new LossOutput(sum, count);
    }

    @Override
    protected void crossEntropyBackwardKernel(MeshTensor dLogits, MeshTensor logits, MeshTensor targets,
                                              int ignoreIndex, float scale) {
        int v = last(logits);
        int[] t = ids(targets);
        checkIds("crossEntropyBackward", t, v, ignoreIndex);
        double[] x = d(logits), o = d(dLogits);
        for (int r = 0; r < rows(logits); r++) {
            int base = r * v;
            double lse = logSumExp(x, base, v);
            for (int j = 0; j < v; j++) {
                o[base + j] = t[r] == ignoreIndex ? 0 : scale * (Math.exp(x[base + j] - lse) - (j == t[r] ? 1 : 0));
            }
        }
    }

    private static double logSumExp(double[] x, int base, int n) {
        double max = Double.NEGATIVE_INFINITY, s = 0;
        for (int j = 0; j < n; j++) max = Math.max(max, x[base + j]);
        for (int j = 0; j < n; j++) s += Math.exp(x[base + j] - max);
        return max + Math.log(s);
    }

    // ---- dropout -------------------------------------------------------------------------------------------------

    @Override
    protected void dropoutKernel(MeshTensor out, MeshTensor x, float p, long seed, long elementOffset) {
        double keepScale = 1.0 / (1.0 - p);
        for (int i = 0; i < n(x); i++) d(out)[i] = uniform(seed, elementOffset + i) >= p ? d(x)[i] * keepScale : 0;
    }

    /** The cpu backend's mask: SplitMix64's finaliser over seed + (index + 1) * golden ratio, top 24 bits. */
    private static float uniform(long seed, long index) {
        long z = seed + (index + 1) * 0x9E3779B97F4A7C15L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        z ^= z >>> 31;
        return (z >>> 40) * 0x1.0p-24f;
    }

    // ---- optimizers (torch.optim semantics, as the cpu backend) ---------------------------------------------------

    @Override
    protected void adamwKernel(MeshTensor param, MeshTensor grad, MeshTensor expAvg, MeshTensor expAvgSq,
                               AdamWParams p) {
        double bc1 = 1 - Math.pow(p.beta1(), p.step()), bc2 = 1 - Math.pow(p.beta2(), p.step());
        double[] w = d(param), m = d(expAvg), v = d(expAvgSq), g = d(grad);
        for (int i = 0; i < w.length; i++) {
            double gi = g[i] * p.gradScale();
            m[i] = p.beta1() * m[i] + (1 - p.beta1()) * gi;
            v[i] = p.beta2() * v[i] + (1 - p.beta2()) * gi * gi;
            w[i] = w[i] * (1 - (double) p.lr() * p.weightDecay()) - p.lr() / bc1 * m[i] / (Math.sqrt(v[i] / bc2) + p.eps());
        }
    }

    @Override
    protected void sgdKernel(MeshTensor param, MeshTensor grad, MeshTensor buf, SgdParams p) {
        double[] w = d(param), g = d(grad);
        for (int i = 0; i < w.length; i++) {
            double step = g[i] * p.gradScale() + p.weightDecay() * w[i];
            if (buf != null) {
                double b = p.step() == 1 ? step : p.momentum() * d(buf)[i] + (1 - p.dampening()) * step;
                d(buf)[i] = b;
                step = p.nesterov() ? step + p.momentum() * b : b;
            }
            w[i] -= p.lr() * step;
        }
    }

    // ---- collectives on a one-device mesh: every axis has size 1 ----------------------------------------------------

    @Override
    protected void allGatherKernel(MeshTensor out, MeshTensor x, int dim, int axis) {
        copyKernel(out, x);
    }

    @Override
    protected void reduceScatterKernel(MeshTensor out, MeshTensor x, int dim, int axis) {
        copyKernel(out, x);
    }

    @Override
    protected void allReduceKernel(MeshTensor out, MeshTensor x, int axis, ReduceOp op) {
        if (out != x) copyKernel(out, x);
    }
}

package dev.ttpipe.device;

import dev.ttpipe.device.cpu.CpuMeshDevice;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.Arrays;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * bf16 on the cpu backend (the matmul also on the ttnn backend's reference C library) against fp64 ({@link Reference}): a matmul with a BF16 operand multiplies
 * bf16 values (the FP32 operand rounded) and sums in fp32; row ops on BF16 compute in fp32 from the
 * stored bf16 values and round once; norm statistics and the loss stay fp32. Tolerances are bf16's
 * half ulp (2^-8 relative) per rounding, scaled by the sum of |products| for sums.
 */
class Bf16OpsTest {
    private static final double U16 = Math.scalb(1.0, -7);   // bf16 ulp at 1: a rounding is within U16 / 2 relative
    private static final double U32 = Math.scalb(1.0, -24);  // fp32 half ulp at 1
    private final Random rnd = new Random(7);
    private MeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults().withThreads(2));
    private Ops ops = mesh.asSubmesh().ops();

    @AfterEach
    void close() {
        mesh.close();
    }

    /** Replaces the cpu mesh with one of {@code backend}; skips where the ttnn reference library is not built. */
    private void use(String backend) {
        if (backend.equals("cpu")) return;
        mesh.close();
        try {
            mesh = Backends.open(backend, new MeshShape(1, 2), MeshOptions.defaults().withThreads(2));
        } catch (DeviceException e) {
            mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults());
            Assumptions.abort("skipped: " + backend + " does not open: " + e.getMessage());
        }
        ops = mesh.asSubmesh().ops();
    }

    private double[] gaussian(int n) {
        double[] x = new double[n];
        for (int i = 0; i < n; i++) x[i] = (float) rnd.nextGaussian();
        return x;
    }

    private static double[] bf16(double[] x) {
        double[] r = new double[x.length];
        for (int i = 0; i < x.length; i++) r[i] = BFloat16.round((float) x[i]);
        return r;
    }

    private Tensor put(double[] x, DType dtype, int... dims) {
        return ops.fromHost(Reference.toFloat(x), Shape.of(dims), Layout.REPLICATED, dtype);
    }

    private static double[] abs(double[] x) {
        double[] r = new double[x.length];
        for (int i = 0; i < x.length; i++) r[i] = Math.abs(x[i]);
        return r;
    }

    /** |got - want| <= rel * |want| + sumRel * scale for every element; returns the largest |got - want| / scale. */
    private static double assertWithin(double[] want, float[] got, double rel, double[] scale, double sumRel, String what) {
        assertEquals(want.length, got.length, what);
        double worst = 0;
        for (int i = 0; i < want.length; i++) {
            double err = Math.abs(got[i] - want[i]);
            double tol = rel * Math.abs(want[i]) + sumRel * scale[i];
            assertTrue(err <= tol, what + ": element " + i + " expected " + want[i] + " got " + got[i] + " (tolerance "
                    + tol + ")");
            worst = Math.max(worst, err / Math.max(scale[i], Double.MIN_NORMAL));
        }
        return worst;
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"cpu", "ttnn"})
    void aMatmulWithABf16OperandMultipliesBf16ValuesAndSumsInFp32(String backend) {
        use(backend);
        int batch = 2, m = 13, k = 67, n = 11;
        double[] x = gaussian(batch * m * k), w = gaussian(n * k);
        double[] exact = Reference.matmul(x, w, batch, m, n, k, false, true, false);
        double[] rounded = Reference.matmul(bf16(x), bf16(w), batch, m, n, k, false, true, false);
        double[] absSum = Reference.matmul(abs(x), abs(w), batch, m, n, k, false, true, false);
        try (Tensor xb = put(x, DType.BF16, batch, m, k); Tensor wf = put(w, DType.FP32, n, k);
             Tensor y = ops.linear(xb, wf, null);
             Tensor yf = ops.zeros(Shape.of(batch, m, n), Layout.REPLICATED, DType.FP32)) {
            assertEquals(DType.BF16, y.dtype(), "the output takes the activation's dtype");
            ops.matmulInto(yf, xb, wf, false, true, 1f, 0f);
            float[] acc = yf.toHost();
            // fp32 accumulation of exact bf16 x bf16 products: within fp32 summation error of the fp64 sum
            assertWithin(rounded, acc, 0, absSum, k * U32, "fp32 sums of bf16 products");
            // the FP32 weight was rounded: fp64 with the unrounded weight is further away than fp32 sums can be
            double[] unroundedW = Reference.matmul(bf16(x), w, batch, m, n, k, false, true, false);
            double far = 0;
            for (int i = 0; i < acc.length; i++) far = Math.max(far, Math.abs(acc[i] - unroundedW[i]) / absSum[i]);
            assertTrue(far > 10 * k * U32, "the FP32 operand is used at bf16 precision (" + far + ")");
            // the stored output: the fp32 sum rounded once to bf16
            assertWithin(rounded, y.toHost(), U16 / 2, absSum, k * U32, "bf16 output");
            // and against fp64 of the unrounded operands: bf16's tolerance on each operand and on the output
            assertWithin(exact, y.toHost(), U16 / 2, absSum, U16 + k * U32, "bf16 matmul against fp64");
        }
    }

    @Test
    void weightGradientsOfBf16ActivationsAccumulateInFp32() {
        int rows = 40, in = 24, out = 9;
        double[] dy = gaussian(rows * out), x = gaussian(rows * in), dy2 = gaussian(rows * out);
        double[] want = Reference.matmul(bf16(dy), bf16(x), 1, out, in, rows, true, false, false);
        double[] want2 = Reference.matmul(bf16(dy2), bf16(x), 1, out, in, rows, true, false, false);
        double[] absSum = Reference.matmul(abs(dy), abs(x), 1, out, in, rows, true, false, false);
        double[] absSum2 = Reference.matmul(abs(dy2), abs(x), 1, out, in, rows, true, false, false);
        for (int i = 0; i < want.length; i++) {
            want[i] += want2[i];
            absSum[i] += absSum2[i];
        }
        try (Tensor g = ops.zeros(Shape.of(out, in), Layout.REPLICATED, DType.FP32);
             Tensor d1 = put(dy, DType.BF16, rows, out); Tensor d2 = put(dy2, DType.BF16, rows, out);
             Tensor xb = put(x, DType.BF16, rows, in)) {
            ops.matmulInto(g, d1, xb, true, false, 1f, 0f);
            ops.matmulInto(g, d2, xb, true, false, 1f, 1f);
            assertEquals(DType.FP32, g.dtype());
            assertWithin(want, g.toHost(), 0, absSum, (rows + 1) * U32, "dW = dy^T x accumulated in fp32");
        }
    }

    @Test
    void rowOpsOnBf16ComputeInFp32AndRoundTheirOutputOnce() {
        int rows = 6, d = 48;
        double[] x = gaussian(rows * d), g = gaussian(d), b = gaussian(d);
        double[] xr = bf16(x);
        double[] ones = new double[rows * d];
        Arrays.fill(ones, 1.0);
        try (Tensor xb = put(x, DType.BF16, rows, d); Tensor gf = put(g, DType.FP32, d); Tensor bf = put(b, DType.FP32, d);
             NormOutput ln = ops.layerNorm(xb, gf, bf, 1e-5f); NormOutput rms = ops.rmsNorm(xb, gf, 1e-5f);
             Tensor sm = ops.softmax(xb, 0.5f, false); Tensor ge = ops.gelu(xb); Tensor si = ops.silu(xb)) {
            assertEquals(DType.BF16, ln.y().dtype());
            assertEquals(DType.FP32, ln.mean().dtype(), "norm statistics stay fp32");
            assertEquals(DType.FP32, rms.rstd().dtype(), "norm statistics stay fp32");
            // fp64 of the stored (rounded) input, rounded once: half a bf16 ulp, plus fp32's error
            double[] lnWant = Reference.layerNorm(xr, g, b, rows, d, 1e-5);
            assertWithin(lnWant, ln.y().toHost(), U16 / 2 + 1e-5, ones, 1e-5, "layerNorm");
            assertWithin(Reference.rmsNorm(xr, g, rows, d, 1e-5), rms.y().toHost(), U16 / 2 + 1e-5, ones, 1e-5, "rmsNorm");
            assertWithin(Reference.softmax(xr, rows, d, 0.5, false, rows), sm.toHost(), U16 / 2 + 1e-5, ones, 1e-7,
                    "softmax");
            double[] geWant = new double[x.length], siWant = new double[x.length];
            for (int i = 0; i < x.length; i++) {
                geWant[i] = Reference.gelu(xr[i]);
                siWant[i] = Reference.silu(xr[i]);
            }
            assertWithin(geWant, ge.toHost(), U16 / 2 + 1e-5, ones, 1e-6, "gelu");
            assertWithin(siWant, si.toHost(), U16 / 2 + 1e-5, ones, 1e-6, "silu");
            // against fp64 of the unrounded input: bf16's tolerance (input and output rounding, 1e-2 relative)
            double[] gain = new double[rows * d];
            for (int i = 0; i < gain.length; i++) gain[i] = Math.abs(g[i % d]);
            assertWithin(Reference.layerNorm(x, g, b, rows, d, 1e-5), ln.y().toHost(), 1e-2, gain, 1e-2,
                    "layerNorm against fp64");
        }
    }

    @Test
    void theLossOfBf16LogitsIsComputedInFp32() {
        int rows = 10, v = 37;
        double[] logits = gaussian(rows * v);
        int[] targets = new int[rows];
        for (int i = 0; i < rows; i++) targets[i] = rnd.nextInt(v);
        targets[3] = -100;
        try (Tensor lg = put(logits, DType.BF16, rows, v);
             Tensor t = ops.fromHostInts(targets, Shape.of(rows), Layout.REPLICATED)) {
            LossOutput loss = ops.crossEntropy(lg, t, -100);
            double want = Reference.crossEntropy(bf16(logits), targets, v, -100);
            assertEquals(9, loss.count());
            assertEquals(want, loss.sum(), 1e-5 * want, "the loss of the stored logits, to fp32 precision, not bf16's");
        }
    }
}

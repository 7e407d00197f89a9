package dev.ttpipe.device.cpu;

import dev.ttpipe.device.AttentionGrads;
import dev.ttpipe.device.AttentionOutput;
import dev.ttpipe.device.BFloat16;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The cpu backend's fused attention ({@link FlashAttention} behind {@code Ops.attention} and
 * {@code attentionBackward}) against the composed ops it replaces (matmul, softmax, matmul and their
 * backwards) and against a double-precision reference of the forward; in bf16 against fp32 attention.
 */
class FlashAttentionTest {
    private final Random rnd = new Random(7);

    private float[] random(int n) {
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = (float) rnd.nextGaussian();
        return x;
    }

    private static void assertClose(float[] expected, float[] actual, double tol, String what) {
        assertEquals(expected.length, actual.length, what + ": length");
        for (int i = 0; i < expected.length; i++) {
            double err = Math.abs(expected[i] - actual[i]);
            assertTrue(err <= tol * (1 + Math.abs(expected[i])),
                    what + ": element " + i + " expected " + expected[i] + " got " + actual[i]);
        }
    }

    /** O = softmax(scale q k^T, causal) v in double, per leading index. */
    private static double[] reference(float[] q, float[] k, float[] v, int n, int t, int tk, int hd, double scale,
                                      boolean causal) {
        double[] o = new double[n * t * hd];
        for (int b = 0; b < n; b++) {
            for (int i = 0; i < t; i++) {
                int seen = causal ? Math.max(0, Math.min(tk, i + tk - t + 1)) : tk;
                double[] s = new double[seen];
                double max = Double.NEGATIVE_INFINITY;
                for (int j = 0; j < seen; j++) {
                    for (int e = 0; e < hd; e++) s[j] += (double) q[(b * t + i) * hd + e] * k[(b * tk + j) * hd + e];
                    s[j] *= scale;
                    max = Math.max(max, s[j]);
                }
                double z = 0;
                for (int j = 0; j < seen; j++) z += s[j] = Math.exp(s[j] - max);
                for (int j = 0; j < seen; j++) {
                    for (int e = 0; e < hd; e++) o[(b * t + i) * hd + e] += s[j] / z * v[(b * tk + j) * hd + e];
                }
            }
        }
        return o;
    }

    @ParameterizedTest(name = "causal={0} T={1} Tk={2} hd={3}")
    @CsvSource({"true,7,7,5", "false,5,9,4", "true,3,8,6", "true,8,3,4", "true,64,64,16", "true,150,150,8", "false,70,130,8", "true,130,70,8"})
    void matchesTheComposedOpsForwardAndBackward(boolean causal, int t, int tk, int hd) {
        try (MeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(2))) {
            Ops ops = mesh.asSubmesh().ops();
            int b = 2, h = 3, n = b * h;
            float scale = (float) (1 / Math.sqrt(hd));
            float[] q = random(n * t * hd), k = random(n * tk * hd), v = random(n * tk * hd), dOut = random(n * t * hd);
            try (Tensor tq = ops.fromHost(q, Shape.of(b, h, t, hd), Layout.REPLICATED, DType.FP32);
                 Tensor tk4 = ops.fromHost(k, Shape.of(b, h, tk, hd), Layout.REPLICATED, DType.FP32);
                 Tensor tv = ops.fromHost(v, Shape.of(b, h, tk, hd), Layout.REPLICATED, DType.FP32);
                 Tensor dO = ops.fromHost(dOut, Shape.of(b, h, t, hd), Layout.REPLICATED, DType.FP32);
                 AttentionOutput fused = ops.attention(tq, tk4, tv, scale, causal);
                 AttentionGrads g = ops.attentionBackward(tq, tk4, tv, fused, dO, scale, causal);
                 Tensor scores = ops.matmul(tq, tk4, false, true);
                 Tensor att = ops.softmax(scores, scale, causal);
                 Tensor o = ops.matmul(att, tv, false, false);
                 Tensor dA = ops.matmul(dO, tv, false, true);
                 Tensor dS = ops.softmaxBackward(att, dA, scale);
                 Tensor dV = ops.matmul(att, dO, true, false);
                 Tensor dQ = ops.matmul(dS, tk4, false, false);
                 Tensor dK = ops.matmul(dS, tq, true, false)) {
                assertEquals(Shape.of(b, h, t, 1), fused.saved().shape(), "keeps the rows' log-sum-exp, not the probabilities");
                double[] ref = reference(q, k, v, n, t, tk, hd, scale, causal);
                float[] rf = new float[ref.length];
                for (int i = 0; i < ref.length; i++) rf[i] = (float) ref[i];
                assertClose(rf, fused.out().toHost(), 1e-5, "O vs the double reference");
                assertClose(o.toHost(), fused.out().toHost(), 1e-5, "O vs the composed ops");
                assertClose(dQ.toHost(), g.dq().toHost(), 2e-5, "dQ");
                assertClose(dK.toHost(), g.dk().toHost(), 2e-5, "dK");
                assertClose(dV.toHost(), g.dv().toHost(), 2e-5, "dV");
            }
        }
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"FP32", "BF16"})
    void headsShardedOverDevicesGiveTheSameResultAsOneDevice(DType dtype) {
        int b = 2, h = 4, t = 9, hd = 8;
        float[] q = random(b * h * t * hd), k = random(b * h * t * hd), v = random(b * h * t * hd), d = random(b * h * t * hd);
        float[][] one = run(new MeshShape(1, 1), Layout.REPLICATED, 2, dtype, q, k, v, d, b, h, t, hd);
        float[][] two = run(new MeshShape(1, 2), Layout.shard(1, 1), 2, dtype, q, k, v, d, b, h, t, hd);
        for (int i = 0; i < one.length; i++) assertArrayEquals(one[i], two[i], "output " + i);
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"FP32", "BF16"})
    void isBitForBitTheSameWithAnyThreadCount(DType dtype) {
        int b = 3, h = 2, t = 133, hd = 16;
        float[] q = random(b * h * t * hd), k = random(b * h * t * hd), v = random(b * h * t * hd), d = random(b * h * t * hd);
        float[][] one = run(new MeshShape(1, 1), Layout.REPLICATED, 1, dtype, q, k, v, d, b, h, t, hd);
        float[][] four = run(new MeshShape(1, 1), Layout.REPLICATED, 4, dtype, q, k, v, d, b, h, t, hd);
        for (int i = 0; i < one.length; i++) assertArrayEquals(one[i], four[i], "output " + i);
    }

    /**
     * bf16 attention (bf16 tile products, P and dS rounded to bf16, outputs rounded once) against fp32 attention on the
     * same bf16 inputs: O within bf16 rounding of the fp32 result, the gradients within a few bf16 steps of the largest
     * gradient; and O against the double reference.
     */
    @ParameterizedTest(name = "causal={0} T={1} Tk={2} hd={3}")
    @CsvSource({"true,7,7,5", "false,5,9,4", "true,8,3,4", "true,150,150,8", "false,70,130,8", "true,130,70,8", "true,256,256,64"})
    void bf16StaysWithinBf16RoundingOfFp32(boolean causal, int t, int tk, int hd) {
        int b = 2, h = 3, n = b * h;
        float[] q = rounded(random(n * t * hd)), k = rounded(random(n * tk * hd)), v = rounded(random(n * tk * hd));
        float[] d = rounded(random(n * t * hd));
        float[][] full = attention(DType.FP32, q, k, v, d, b, h, t, tk, hd, causal);
        float[][] half = attention(DType.BF16, q, k, v, d, b, h, t, tk, hd, causal);
        double[] ref = reference(q, k, v, n, t, tk, hd, 1 / Math.sqrt(hd), causal);
        float[] rf = new float[ref.length];
        for (int i = 0; i < ref.length; i++) rf[i] = (float) ref[i];
        assertClose(rf, half[0], 1.5e-2, "bf16 O vs the double reference");
        assertClose(full[0], half[0], 1.5e-2, "bf16 O vs fp32 O");
        String[] names = {"O", "log-sum-exp", "dQ", "dK", "dV"};
        for (int o = 2; o < names.length; o++) {
            float most = 0;
            for (float x : full[o]) most = Math.max(most, Math.abs(x));
            for (int i = 0; i < full[o].length; i++) {
                assertTrue(Math.abs(full[o][i] - half[o][i]) <= 3e-2 * most, names[o] + " element " + i + ": fp32 "
                        + full[o][i] + ", bf16 " + half[o][i] + " (largest " + most + ")");
            }
        }
        for (int i = 0; i < half[0].length; i++) assertEquals(BFloat16.round(half[0][i]), half[0][i], "O is stored as bf16");
    }

    private static float[] rounded(float[] x) {
        for (int i = 0; i < x.length; i++) x[i] = BFloat16.round(x[i]);
        return x;
    }

    /** O, log-sum-exp, dQ, dK, dV of attention with scale 1/sqrt(hd) on one device (2 threads), the tensors of {@code dtype}. */
    static float[][] attention(DType dtype, float[] q, float[] k, float[] v, float[] d, int b, int h, int t, int tk,
                               int hd, boolean causal) {
        try (MeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(2))) {
            Ops ops = mesh.asSubmesh().ops();
            float scale = (float) (1 / Math.sqrt(hd));
            try (Tensor tq = ops.fromHost(q, Shape.of(b, h, t, hd), Layout.REPLICATED, dtype);
                 Tensor tk4 = ops.fromHost(k, Shape.of(b, h, tk, hd), Layout.REPLICATED, dtype);
                 Tensor tv = ops.fromHost(v, Shape.of(b, h, tk, hd), Layout.REPLICATED, dtype);
                 Tensor dO = ops.fromHost(d, Shape.of(b, h, t, hd), Layout.REPLICATED, dtype);
                 AttentionOutput o = ops.attention(tq, tk4, tv, scale, causal);
                 AttentionGrads g = ops.attentionBackward(tq, tk4, tv, o, dO, scale, causal)) {
                return new float[][]{o.out().toHost(), o.saved().toHost(), g.dq().toHost(), g.dk().toHost(), g.dv().toHost()};
            }
        }
    }

    /** O, dQ, dK, dV of causal attention on a mesh of {@code shape} with q, k, v, dO laid out as {@code layout}. */
    private static float[][] run(MeshShape shape, Layout layout, int threads, DType dtype, float[] q, float[] k, float[] v,
                                 float[] d, int b, int h, int t, int hd) {
        try (MeshDevice mesh = CpuMeshDevice.open(shape, MeshOptions.defaults().withThreads(threads))) {
            Ops ops = mesh.asSubmesh().ops();
            Shape s = Shape.of(b, h, t, hd);
            try (Tensor tq = ops.fromHost(q, s, layout, dtype); Tensor tk = ops.fromHost(k, s, layout, dtype);
                 Tensor tv = ops.fromHost(v, s, layout, dtype); Tensor dO = ops.fromHost(d, s, layout, dtype);
                 AttentionOutput o = ops.attention(tq, tk, tv, 0.3f, true);
                 AttentionGrads g = ops.attentionBackward(tq, tk, tv, o, dO, 0.3f, true)) {
                return new float[][]{o.out().toHost(), g.dq().toHost(), g.dk().toHost(), g.dv().toHost()};
            }
        }
    }
}

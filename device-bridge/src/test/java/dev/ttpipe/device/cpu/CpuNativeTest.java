package dev.ttpipe.device.cpu;

import dev.ttpipe.device.AttentionGrads;
import dev.ttpipe.device.AttentionOutput;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The native cpu kernels ({@link CpuNative}, {@code native/cpu/ttpipe_cpu.c}) give the same bits as their Java
 * twins: elementwise over random values and every edge of {@link FloatExp}'s range, fused attention forward
 * and backward through the backend's ops. Where the build had no C compiler the library is absent and the
 * test skips with that message.
 */
class CpuNativeTest {
    private final Random rnd = new Random(11);

    @BeforeEach
    void needsTheLibrary() {
        assumeTrue(CpuNative.class.getClassLoader().getResource(CpuNative.resource()) != null,
                "no " + CpuNative.resource() + " in this build (no C compiler?): only the Java kernels run");
        assertTrue(CpuNative.active(), "the library is in the build but did not load: " + CpuNative.describe());
    }

    @AfterEach
    void nativeBackOn() {
        CpuNative.enable(true);
    }

    @Test
    void reportsWhichCloneRuns() {
        String d = CpuNative.describe();
        assertTrue(d.matches("native (avx512|avx2|sse2|generic) \\(libttpipe_cpu.so\\)"), d);
    }

    /** Random values at several scales, then the edges: zeros, exp's clamps, overflow, subnormals, infinities, NaN. */
    private float[] inputs() {
        float[] edges = {0f, -0f, 1e-40f, -1e-40f, Float.MIN_VALUE, 43.6f, -43.6f, 43.7f, -43.7f, 44.4f, -44.4f, 87.33f,
                -87.33f, 88.72f, 100f, -100f, 1e30f, -1e30f, Float.MAX_VALUE, -Float.MAX_VALUE, Float.POSITIVE_INFINITY,
                Float.NEGATIVE_INFINITY, Float.NaN, 5.0f, -5.0f, 9.1f, -9.1f};
        int n = 100_003;                                     // not a multiple of any vector width
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = (float) (rnd.nextGaussian() * Math.pow(10, rnd.nextInt(4) - 1));
        System.arraycopy(edges, 0, x, 17, edges.length);
        return x;
    }

    private interface Kernel {
        void run(Parallel par, NativeBuffer out, NativeBuffer a, NativeBuffer b, int n);
    }

    @ParameterizedTest(name = "{0}")
    @CsvSource({"gelu", "gelu backward", "silu", "silu backward"})
    void elementwiseKernelsGiveTheJavaBits(String name) {
        Kernel k = switch (name) {
            case "gelu" -> (par, out, a, b, n) -> Elementwise.gelu(par, out, a, n);
            case "gelu backward" -> Elementwise::geluBackward;
            case "silu" -> (par, out, a, b, n) -> Elementwise.silu(par, out, a, n);
            default -> Elementwise::siluBackward;
        };
        float[] x = inputs(), dy = inputs();
        int n = x.length;
        NativeBuffer a = NativeBuffer.malloc(4 * n), g = NativeBuffer.malloc(4 * n);
        NativeBuffer viaC = NativeBuffer.malloc(4 * n), viaJava = NativeBuffer.malloc(4 * n);
        try (Parallel par = new Parallel(2)) {
            a.floats.put(0, x);
            g.floats.put(0, dy);
            k.run(par, viaC, name.endsWith("backward") ? g : a, a, n);
            CpuNative.enable(false);
            k.run(par, viaJava, name.endsWith("backward") ? g : a, a, n);
            for (int i = 0; i < n; i++) {
                float c = viaC.floats.get(i), j = viaJava.floats.get(i);
                assertTrue(Float.floatToRawIntBits(c) == Float.floatToRawIntBits(j) || (Float.isNaN(c) && Float.isNaN(j)),
                        name + " of x=" + x[i] + (name.endsWith("backward") ? " dy=" + dy[i] : "") + ": native " + c
                                + ", Java " + j);
            }
        } finally {
            a.free();
            g.free();
            viaC.free();
            viaJava.free();
        }
    }

    @Test
    void nativeBoundsAreCheckedBeforeTheCall() {
        NativeBuffer small = NativeBuffer.malloc(4 * 10);
        try (Parallel par = new Parallel(1)) {
            org.junit.jupiter.api.Assertions.assertThrows(IndexOutOfBoundsException.class,
                    () -> Elementwise.gelu(par, small, small, 11));
        } finally {
            small.free();
        }
    }

    @ParameterizedTest(name = "causal={0} T={1} Tk={2} hd={3}")
    @CsvSource({"true,7,7,5", "false,5,9,4", "true,3,8,6", "true,8,3,4", "true,64,64,16", "true,150,150,24",
            "false,70,130,8", "true,130,70,33", "true,256,256,64"})
    void fusedAttentionGivesTheJavaBits(boolean causal, int t, int tk, int hd) {
        int b = 2, h = 3, n = b * h;
        float[] q = gaussian(n * t * hd, 2), k = gaussian(n * tk * hd, 2), v = gaussian(n * tk * hd, 1);
        float[] d = gaussian(n * t * hd, 1);
        float[][] c = attention(q, k, v, d, b, h, t, tk, hd, causal);
        CpuNative.enable(false);
        float[][] j = attention(q, k, v, d, b, h, t, tk, hd, causal);
        String[] names = {"O", "log-sum-exp", "dQ", "dK", "dV"};
        for (int o = 0; o < names.length; o++) {
            for (int i = 0; i < c[o].length; i++) {
                assertEquals(Float.floatToRawIntBits(j[o][i]), Float.floatToRawIntBits(c[o][i]),
                        names[o] + " element " + i + ": native " + c[o][i] + ", Java " + j[o][i]);
            }
        }
    }

    private float[] gaussian(int n, double sd) {
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = (float) (rnd.nextGaussian() * sd);
        return x;
    }

    private static float[][] attention(float[] q, float[] k, float[] v, float[] d, int b, int h, int t, int tk, int hd,
                                       boolean causal) {
        try (MeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(2))) {
            Ops ops = mesh.asSubmesh().ops();
            float scale = (float) (1 / Math.sqrt(hd));
            try (Tensor tq = ops.fromHost(q, Shape.of(b, h, t, hd), Layout.REPLICATED, DType.FP32);
                 Tensor tk4 = ops.fromHost(k, Shape.of(b, h, tk, hd), Layout.REPLICATED, DType.FP32);
                 Tensor tv = ops.fromHost(v, Shape.of(b, h, tk, hd), Layout.REPLICATED, DType.FP32);
                 Tensor dO = ops.fromHost(d, Shape.of(b, h, t, hd), Layout.REPLICATED, DType.FP32);
                 AttentionOutput o = ops.attention(tq, tk4, tv, scale, causal);
                 AttentionGrads g = ops.attentionBackward(tq, tk4, tv, o, dO, scale, causal)) {
                return new float[][]{o.out().toHost(), o.saved().toHost(), g.dq().toHost(), g.dk().toHost(), g.dv().toHost()};
            }
        }
    }
}

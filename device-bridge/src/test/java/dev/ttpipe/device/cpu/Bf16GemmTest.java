package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What a bf16 matmul runs on the cpu backend and that it says so (docs/backends-bf16.md): oneDNN's bf16
 * GEMM on a CPU with avx512_bf16, else ttpipe's fma engine (bf16 operands widened while packed), else the fp32 sgemm
 * on operands rounded to bf16; the engine asked for
 * by name or refused with why; and oneDNN's products: the same bits on any number of threads, and the
 * exact bf16 products summed in fp32 (against a double reference); the same for the fma engine.
 */
class Bf16GemmTest {
    private static Parallel par;
    private static Gemm blas;

    @BeforeAll
    static void kernels() {
        par = new Parallel(2);
        blas = BlasGemm.tryLoad(par);
    }

    @AfterAll
    static void close() {
        par.close();
    }

    private static Bf16Gemm choose(Map<String, String> env) {
        return Bf16Gemm.choose(blas, par, env::get);
    }

    @Test
    void byDefaultOneDnnMultipliesInBf16WhereTheCpuHasAvx512Bf16() {
        Assumptions.assumeTrue(blas != null, "OpenBLAS does not load here");
        Bf16Gemm g = choose(Map.of());
        if (MachinePeak.hasBf16Dot() && Dnnl.load()) {
            assertEquals(Bf16Gemm.Engine.DNNL, g.engine());
            assertTrue(g.packedOperands());
            assertTrue(g.describe().startsWith("oneDNN "), g.describe());
            assertTrue(g.describe().contains("dnnl_gemm_bf16bf16f32 on bf16 operands (avx512_bf16)"), g.describe());
        } else if (Bf16Gemm.fmaKernel() != null) {
            assertEquals(Bf16Gemm.Engine.FMA, g.engine());
            assertTrue(g.packedOperands());
            assertTrue(g.describe().startsWith("ttpipe's bf16-reading GEMM (" + Bf16Gemm.fmaKernel() + " kernel"), g.describe());
            assertEquals(MachinePeak.hasBf16Dot(), !g.describe().contains("this CPU has no avx512_bf16"), g.describe());
        } else {
            assertEquals(Bf16Gemm.Engine.SGEMM, g.engine());
            assertFalse(g.packedOperands());
            assertTrue(g.describe().startsWith("bf16 operands widened to fp32, then the fp32 sgemm (blas kernel)"), g.describe());
            assertTrue(g.describe().contains("(fma) needs the native kernels"), g.describe());
        }
    }

    @Test
    void theFmaEngineCanBeAskedForWhereTheNativeKernelsRun() {
        Assumptions.assumeTrue(blas != null, "OpenBLAS does not load here");
        Map<String, String> env = Map.of("TTPIPE_BF16_GEMM", "fma");
        if (Bf16Gemm.fmaKernel() == null) {
            DeviceException e = assertThrows(DeviceException.class, () -> choose(env));
            assertTrue(e.getMessage().contains("(fma) needs the native kernels"), e.getMessage());
            return;
        }
        Bf16Gemm g = choose(env);
        assertEquals(Bf16Gemm.Engine.FMA, g.engine());
        assertTrue(g.packedOperands());
        assertTrue(g.describe().startsWith("ttpipe's bf16-reading GEMM (" + Bf16Gemm.fmaKernel() + " kernel"), g.describe());
        assertTrue(g.describe().contains("fma asked for"), g.describe());
    }

    @Test
    void theDotEngineCanBeAskedForWhereTheCpuHasAvx512Bf16() {
        Assumptions.assumeTrue(blas != null, "OpenBLAS does not load here");
        Map<String, String> env = Map.of("TTPIPE_BF16_GEMM", "dot");
        if (!MachinePeak.hasBf16Dot() || !Bf16Gemm.dotKernel()) {
            DeviceException e = assertThrows(DeviceException.class, () -> choose(env));
            assertTrue(e.getMessage().contains("(dot) needs the native kernels on a CPU with avx512_bf16"), e.getMessage());
            return;
        }
        Bf16Gemm g = choose(env);
        assertEquals(Bf16Gemm.Engine.DOT, g.engine());
        assertTrue(g.packedOperands());
        assertTrue(g.describe().startsWith("ttpipe's bf16 dot-product GEMM (vdpbf16ps kernel"), g.describe());
        assertTrue(g.describe().endsWith("not oneDNN's (dot asked for (ttpipe.bf16.gemm / TTPIPE_BF16_GEMM))"), g.describe());
    }

    @Test
    void sgemmCanBeAskedForAndTheOldSwitchStillTurnsBf16GemmsOff() {
        Assumptions.assumeTrue(blas != null, "OpenBLAS does not load here");
        for (Map<String, String> env : List.of(Map.of("TTPIPE_BF16_GEMM", "sgemm"), Map.of("TTPIPE_SBGEMM", "off"))) {
            Bf16Gemm g = choose(env);
            assertEquals(Bf16Gemm.Engine.SGEMM, g.engine(), env.toString());
            assertTrue(g.describe().contains("sgemm asked for"), g.describe());
        }
    }

    @Test
    void anEngineThatCannotRunIsRefusedWithWhy() {
        Assumptions.assumeTrue(blas != null, "OpenBLAS does not load here");
        DeviceException unknown = assertThrows(DeviceException.class, () -> choose(Map.of("TTPIPE_BF16_GEMM", "amx")));
        assertTrue(unknown.getMessage().contains("'amx'") && unknown.getMessage().contains("expected one of auto, dnnl, dot, sbgemm, fma, sgemm"),
                unknown.getMessage());
        // The bundled OpenBLAS exports no cblas_sbgemm: asking for it names that.
        Assumptions.assumeTrue(OpenBlas.isBundled(), "the bundled OpenBLAS is not the one loaded here");
        DeviceException sbgemm = assertThrows(DeviceException.class, () -> choose(Map.of("TTPIPE_BF16_GEMM", "sbgemm")));
        assertTrue(sbgemm.getMessage().contains("does not export cblas_sbgemm"), sbgemm.getMessage());
    }

    @Test
    void withTheJvmKernelTheDescriptionNamesIt() {
        try (CpuMeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(1), "java")) {
            String d = mesh.bf16MatmulKernel();
            if (mesh.bf16Gemm().engine() == Bf16Gemm.Engine.DNNL) {
                assertTrue(d.startsWith("oneDNN "), d);          // oneDNN does not need OpenBLAS
            } else if (Bf16Gemm.fmaKernel() != null) {
                assertEquals(Bf16Gemm.Engine.FMA, mesh.bf16Gemm().engine());   // it does not need OpenBLAS either
            } else {
                assertEquals(Bf16Gemm.Engine.SGEMM, mesh.bf16Gemm().engine());
                assertTrue(d.startsWith("bf16 operands widened to fp32, then the fp32 sgemm (java kernel)"), d);
            }
        }
    }

    /**
     * oneDNN's bf16 GEMM and the dot and fma engines, tiled by ttpipe: the same bits on 1, 2 and 3 threads, and within fp32
     * rounding of the exact sums.
     */
    @ParameterizedTest(name = "{0}x{1}x{2} transA={3} transB={4} {5}")
    @CsvSource({"512,384,384,false,false,dnnl", "384,1536,512,false,true,dnnl", "700,1100,300,true,false,dnnl",
            "33,5000,100,true,true,dnnl", "1,7,3,false,false,dnnl", "512,384,384,false,false,fma",
            "384,1536,512,false,true,fma", "700,1100,300,true,false,fma", "33,5000,100,true,true,fma", "1,7,3,false,false,fma",
            "512,384,384,false,false,dot", "384,1536,512,false,true,dot", "700,1100,301,true,false,dot", "33,5000,100,true,true,dot",
            "1,7,3,false,false,dot"})
    void bf16ProductsAreExactProductsSummedInFp32OnAnyNumberOfThreads(int m, int n, int k, boolean ta, boolean tb, String engine) {
        if (engine.equals("fma")) {
            Assumptions.assumeTrue(Bf16Gemm.fmaKernel() != null, "no native kernels with AVX2 and FMA here: " + CpuNative.describe());
        } else if (engine.equals("dot")) {
            Assumptions.assumeTrue(MachinePeak.hasBf16Dot() && Bf16Gemm.dotKernel(), "no avx512_bf16 here: " + CpuNative.describe());
        } else {
            Assumptions.assumeTrue(MachinePeak.hasBf16Dot() && Dnnl.load(), "no avx512_bf16 or no oneDNN here: " + Dnnl.failure());
        }
        Random rnd = new Random(m * 31L + n * 7L + k);
        int off = 3, pad = 5;
        int aRows = ta ? k : m, aCols = ta ? m : k, lda = aCols + pad;
        int bRows = tb ? n : k, bCols = tb ? k : n, ldb = bCols + pad;
        int ldc = n + pad;
        NativeBuffer a = bf16(rnd, off + aRows * lda), b = bf16(rnd, off + bRows * ldb);
        NativeBuffer c = NativeBuffer.malloc(4 * (off + m * ldc));
        try {
            int[] first = null;
            for (int threads : new int[]{1, 2, 3}) {
                try (Parallel p = new Parallel(threads)) {
                    Bf16Gemm g = Bf16Gemm.choose(blas == null ? new JavaGemm(p) : blas, p, Map.of("TTPIPE_BF16_GEMM", engine)::get);
                    assertEquals(Bf16Gemm.Engine.valueOf(engine.toUpperCase(Locale.ROOT)), g.engine());
                    for (int i = 0; i < off + m * ldc; i++) c.floats.put(i, 0.25f);
                    g.gemm(ta, tb, m, n, k, -0.5f, a, off, lda, b, off, ldb, 2f, c, off, ldc);
                    int[] bits = new int[m * n];
                    for (int i = 0; i < m; i++) for (int j = 0; j < n; j++) bits[i * n + j] = Float.floatToRawIntBits(c.floats.get(off + i * ldc + j));
                    if (first == null) {
                        first = bits;
                        for (int i = 0; i < m; i += Math.max(1, m / 7)) {
                            for (int j = 0; j < n; j += Math.max(1, n / 7)) {
                                double s = 0, mag = 0;
                                for (int q = 0; q < k; q++) {
                                    double av = value(a, off + (ta ? q * lda + i : i * lda + q));
                                    double bv = value(b, off + (tb ? j * ldb + q : q * ldb + j));
                                    s += av * bv;
                                    mag += Math.abs(av * bv);
                                }
                                double e = -0.5 * s + 2 * 0.25;
                                assertEquals(e, Float.intBitsToFloat(bits[i * n + j]), 1e-6 * (1 + mag) * k,
                                        "element (" + i + ", " + j + ")");
                            }
                        }
                        assertEquals(0.25f, c.floats.get(off + n), "the padding is left alone");
                    } else {
                        for (int i = 0; i < bits.length; i++) {
                            if (bits[i] != first[i]) throw new AssertionError("element " + i + " differs on " + threads + " threads");
                        }
                    }
                }
            }
        } finally {
            a.free();
            b.free();
            c.free();
        }
    }

    /**
     * A product into a bf16 result (each tile's sums in a scratch buffer of the thread that computed it, on every engine
     * but the pure-JVM one) has
     * the bits of the product into fp32 then the one rounding, with and without a bias and an earlier value (beta), on
     * 1 and 2 threads; the scratch goes back to the allocator.
     */
    @ParameterizedTest(name = "{0}x{1}x{2} transA={3} transB={4} engine={5}")
    @CsvSource({"2048,384,384,false,true,dnnl", "1100,1536,200,false,false,dnnl", "700,1100,300,true,false,dnnl",
            "7,5,3,false,false,dnnl", "300,200,100,false,true,sgemm", "5,3,0,false,false,dnnl",
            "1100,1536,200,false,false,sgemm", "700,1100,300,true,false,sgemm-on-dnnl", "2048,384,384,false,true,sgemm-on-dnnl",
            "2048,384,384,false,true,fma", "1100,1536,200,false,false,fma", "700,1100,300,true,false,fma", "7,5,3,false,false,fma",
            "5,3,0,false,false,fma", "300,200,1000,false,true,fma", "130,70,800,true,false,fma",
            "2048,384,384,false,true,dot", "1100,1536,200,false,false,dot", "700,1100,301,true,false,dot", "7,5,3,false,false,dot",
            "5,3,0,false,false,dot", "300,200,1000,false,true,dot", "130,70,801,true,false,dot"})
    void aBf16ResultHasTheBitsOfFp32SumsRoundedOnce(int m, int n, int k, boolean ta, boolean tb, String engine) {
        if (engine.equals("fma")) {
            Assumptions.assumeTrue(Bf16Gemm.fmaKernel() != null, "no native kernels with AVX2 and FMA here: " + CpuNative.describe());
        } else if (engine.equals("dot")) {
            Assumptions.assumeTrue(MachinePeak.hasBf16Dot() && Bf16Gemm.dotKernel(), "no avx512_bf16 here: " + CpuNative.describe());
        } else {
            Assumptions.assumeTrue(engine.equals("sgemm") || engine.equals("sgemm-on-dnnl") && Dnnl.load()
                    || MachinePeak.hasBf16Dot() && Dnnl.load(), "no avx512_bf16 or no oneDNN here: " + Dnnl.failure());
        }
        Random rnd = new Random(m * 13L + n * 5L + k);
        int lda = ta ? m : k, ldb = tb ? k : n, ldo = n + 3;
        NativeBuffer a16 = bf16(rnd, Math.max(1, m * k)), b16 = bf16(rnd, Math.max(1, n * k));
        NativeBuffer a32 = widened(a16, m * k), b32 = widened(b16, n * k);
        NativeBuffer bias = NativeBuffer.malloc(4 * n), earlier = bf16(rnd, m * ldo);
        for (int j = 0; j < n; j++) bias.floats.put(j, rnd.nextFloat() - 0.5f);
        NativeBuffer c = NativeBuffer.malloc(4 * Math.max(1, m * n)), want = NativeBuffer.malloc(2 * m * ldo);
        NativeBuffer got = NativeBuffer.malloc(2 * m * ldo);
        NativeAllocator scratch = new NativeAllocator("test", Long.MAX_VALUE);
        try {
            for (int threads : new int[]{1, 2}) {
                try (Parallel p = new Parallel(threads)) {
                    // sgemm-on-dnnl: the sgemm engine over oneDNN's sgemm, each tile through Gemm.tileCall
                    Gemm fp32 = engine.equals("sgemm-on-dnnl") ? DnnlGemm.tryLoad(p) : blas == null ? new JavaGemm(p) : blas;
                    Bf16Gemm g = Bf16Gemm.choose(fp32, p, Map.of("TTPIPE_BF16_GEMM", engine.startsWith("sgemm") ? "sgemm" : engine)::get);
                    NativeBuffer a = g.packedOperands() ? a16 : a32, b = g.packedOperands() ? b16 : b32;
                    for (float beta : new float[]{0f, 0.5f}) {
                        for (NativeBuffer withBias : new NativeBuffer[]{null, bias}) {
                            for (int i = 0; i < m * ldo; i++) {
                                short e = earlier.bytes.getShort(2 * i);
                                want.bytes.putShort(2 * i, e);
                                got.bytes.putShort(2 * i, e);
                            }
                            for (int i = 0; i < m; i++) {
                                for (int j = 0; j < n; j++) c.floats.put(i * n + j, (float) value(want, i * ldo + j));
                            }
                            g.gemm(ta, tb, m, n, k, 0.75f, a, 0, lda, b, 0, ldb, beta, c, 0, n);
                            Convert.tileToBf16(want, 0, ldo, c, 0, n, m, n, withBias, 0);
                            g.gemmToBf16(ta, tb, m, n, k, 0.75f, a, 0, lda, b, 0, ldb, beta, got, 0, ldo, withBias, scratch);
                            for (int i = 0; i < m * ldo; i++) {
                                if (got.bytes.getShort(2 * i) != want.bytes.getShort(2 * i)) {
                                    throw new AssertionError("element (" + i / ldo + ", " + i % ldo + ") on " + threads
                                            + " threads, beta " + beta + ", bias " + (withBias != null) + ": " + value(got, i)
                                            + ", want " + value(want, i));
                                }
                            }
                        }
                    }
                }
            }
            assertEquals(scratch.reservedBytes(), scratch.cachedBytes(), "every scratch buffer went back");
        } finally {
            scratch.close();
            for (NativeBuffer x : new NativeBuffer[]{a16, b16, a32, b32, bias, earlier, c, want, got}) x.free();
        }
    }

    /**
     * The dnnl engine's products with a bf16 result go through oneDNN's matmul primitive ({@link DnnlMatmul}), bias and
     * rounding in its epilogue: the same bits on 1, 2 and 3 threads; each element the exact sum (plus bias, plus the
     * earlier value) rounded to bf16, to fp32 rounding of the sums; within one bf16 step of the GEMM-then-round path it
     * replaces; the row padding of the result untouched.
     * m x n x k, the result's rows padded by {@code pad} (a tile with contiguous rows runs oneDNN's brgemm kernel, a
     * padded one its GEMM through a scratch); tiles of 256 rows, a shorter last one (m 600: 88 rows, the GEMM; m 384 and
     * 192: 128 and 192 rows, a primitive), and n over 4096.
     */
    @ParameterizedTest(name = "{0}x{1}x{2} transA={3} transB={4} pad={5}")
    @CsvSource({"2048,384,384,false,true,0", "512,1536,384,false,false,0", "600,384,1536,false,true,0",
            "600,384,1536,false,true,3", "384,384,768,true,false,0", "192,384,384,false,true,0", "256,5000,64,false,true,0"})
    void aBf16ResultFromThePrimitiveIsTheRoundedSum(int m, int n, int k, boolean ta, boolean tb, int pad) {
        Assumptions.assumeTrue(MachinePeak.hasBf16Dot() && Dnnl.load(), "no avx512_bf16 or no oneDNN here: " + Dnnl.failure());
        Random rnd = new Random(m * 17L + n * 3L + k);
        int lda = ta ? m : k, ldb = tb ? k : n, ldo = n + pad;
        NativeBuffer a = bf16(rnd, m * k), b = bf16(rnd, n * k), earlier = bf16(rnd, m * ldo);
        NativeBuffer bias = NativeBuffer.malloc(4 * n);
        for (int j = 0; j < n; j++) bias.floats.put(j, rnd.nextFloat() - 0.5f);
        NativeBuffer got = NativeBuffer.malloc(2 * m * ldo), want = NativeBuffer.malloc(2 * m * ldo);
        NativeBuffer c = NativeBuffer.malloc(4 * m * n);
        NativeAllocator scratch = new NativeAllocator("test", Long.MAX_VALUE);
        try {
            int rows0 = Math.min(m, DnnlMatmul.tileRows(m, n, k));             // the first tile's
            assertTrue(DnnlMatmul.runs(rows0), "a first tile of " + rows0 + " rows runs the GEMM");
            String impl = DnnlMatmul.implementation(tile(ta, tb, m, n, k, lda, ldb, ldo, false, false));
            assertNotNull(impl, "oneDNN made no matmul primitive for a tile of " + rows0 + " rows");
            for (boolean accumulate : new boolean[]{false, true}) {
                for (NativeBuffer withBias : accumulate ? new NativeBuffer[]{null} : new NativeBuffer[]{null, bias}) {
                    String what = (accumulate ? "accumulating" : "beta 0") + (withBias != null ? ", bias" : "") + " (" + impl + ")";
                    float beta = accumulate ? 1f : 0f;
                    short[] first = null;
                    for (int threads : new int[]{1, 2, 3}) {
                        try (Parallel p = new Parallel(threads)) {
                            Bf16Gemm g = Bf16Gemm.choose(blas == null ? new JavaGemm(p) : blas, p,
                                    Map.of("TTPIPE_BF16_GEMM", "dnnl")::get);
                            copy(earlier, got, m * ldo);
                            DnnlMatmul.Shape firstTile = tile(ta, tb, m, n, k, lda, ldb, ldo, withBias != null, accumulate);
                            long before = DnnlMatmul.tilesRun(firstTile);
                            g.gemmToBf16(ta, tb, m, n, k, 1f, a, 0, lda, b, 0, ldb, beta, got, 0, ldo, withBias, scratch);
                            assertTrue(DnnlMatmul.tilesRun(firstTile) > before, what + ": the first tile ran no primitive");
                            short[] bits = new short[m * ldo];
                            for (int i = 0; i < bits.length; i++) bits[i] = got.bytes.getShort(2 * i);
                            if (first == null) {
                                first = bits;
                            } else {
                                for (int i = 0; i < bits.length; i++) {
                                    if (bits[i] != first[i]) {
                                        throw new AssertionError(what + ": element (" + i / ldo + ", " + i % ldo
                                                + ") differs on " + threads + " threads");
                                    }
                                }
                            }
                            if (threads > 1) continue;
                            // the GEMM into fp32, then the one rounding: the path the primitive replaces
                            copy(earlier, want, m * ldo);
                            for (int i = 0; i < m; i++) for (int j = 0; j < n; j++) c.floats.put(i * n + j, (float) value(earlier, i * ldo + j));
                            g.gemm(ta, tb, m, n, k, 1f, a, 0, lda, b, 0, ldb, beta, c, 0, n);
                            Convert.tileToBf16(want, 0, ldo, c, 0, n, m, n, withBias, 0);
                            for (int i = 0; i < m; i++) {
                                for (int j = 0; j < ldo; j++) {
                                    double x = value(got, i * ldo + j), y = value(want, i * ldo + j);
                                    if (j >= n) {
                                        assertEquals(value(earlier, i * ldo + j), x, what + ": the padding is left alone");
                                        continue;
                                    }
                                    double step = Math.ulp((float) Math.max(Math.abs(x), Math.abs(y))) * 65536;
                                    assertTrue(Math.abs(x - y) <= step + 1e-4, what + ": element (" + i + ", " + j + ") is "
                                            + x + ", the GEMM then the rounding give " + y);
                                }
                            }
                            for (int i = 0; i < m; i += Math.max(1, m / 5)) {
                                for (int j = 0; j < n; j += Math.max(1, n / 5)) {
                                    double s = withBias == null ? 0 : bias.floats.get(j), mag = Math.abs(s);
                                    if (accumulate) {
                                        s += value(earlier, i * ldo + j);
                                        mag += Math.abs(value(earlier, i * ldo + j));
                                    }
                                    for (int q = 0; q < k; q++) {
                                        double p2 = value(a, ta ? q * lda + i : i * lda + q) * value(b, tb ? j * ldb + q : q * ldb + j);
                                        s += p2;
                                        mag += Math.abs(p2);
                                    }
                                    double x = value(got, i * ldo + j);
                                    assertEquals(s, x, Math.abs(s) / 256 + 1e-6 * mag * k, what + ": element (" + i + ", " + j + ")");
                                }
                            }
                        }
                    }
                }
            }
        } finally {
            scratch.close();
            for (NativeBuffer x : new NativeBuffer[]{a, b, earlier, bias, got, want, c}) x.free();
        }
    }

    /** The shape of the first tile of an m x n x k product with a bf16 result, as {@link Bf16Gemm#gemmToBf16} cuts it. */
    private static DnnlMatmul.Shape tile(boolean ta, boolean tb, int m, int n, int k, int lda, int ldb, int ldo, boolean bias,
                                         boolean accumulate) {
        return new DnnlMatmul.Shape(ta, tb, Math.min(m, DnnlMatmul.tileRows(m, n, k)), DnnlMatmul.tileCols(m, n, k), k, lda,
                ldb, ldo, bias, accumulate);
    }

    private static void copy(NativeBuffer from, NativeBuffer to, int n) {
        for (int i = 0; i < n; i++) to.bytes.putShort(2 * i, from.bytes.getShort(2 * i));
    }

    /** bf16 values widened into an fp32 buffer, as the sgemm engine takes its operands. */
    private static NativeBuffer widened(NativeBuffer bf16, int n) {
        NativeBuffer f = NativeBuffer.malloc(4 * Math.max(1, n));
        for (int i = 0; i < n; i++) f.floats.put(i, (float) value(bf16, i));
        return f;
    }

    private static NativeBuffer bf16(Random rnd, int n) {
        NativeBuffer buf = NativeBuffer.malloc(Math.max(4, 2 * n));
        for (int i = 0; i < n; i++) buf.bytes.putShort(2 * i, (short) (Float.floatToRawIntBits(rnd.nextFloat() * 2 - 1) >>> 16));
        return buf;
    }

    private static double value(NativeBuffer bf16, int i) {
        return Float.intBitsToFloat((bf16.bytes.getShort(2 * i) & 0xffff) << 16);
    }
}

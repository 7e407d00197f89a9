package dev.ttpipe.device.cpu;

import dev.ttpipe.device.AdamWParams;
import dev.ttpipe.device.BFloat16;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Random;
import java.util.function.Function;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The native cpu kernels ({@link CpuNative}, {@code native/cpu/ttpipe_cpu.c}) give the same bits as their Java
 * twins: elementwise over random values and every edge of {@link FloatExp}'s range, fused attention forward
 * and backward through the backend's ops. Where the build had no C compiler the library is absent and the
 * test skips with that message.
 *
 * <p>The build runs it once with the bundled (cloned) library and once per x86-64 level with the library built
 * for that level alone ({@code -Dttpipe.cpu.native.library}, {@code -Dttpipe.test.cpu.level}; see
 * device-bridge/pom.xml), so every clone a CPU could pick is checked against the Java kernels on this CPU; a level
 * this CPU does not run skips with a message.
 */
class CpuNativeTest {
    private final Random rnd = new Random(11);

    /** The x86-64 level whose single-level library this JVM was given, or "" for the bundled one. */
    private static final String LEVEL = System.getProperty("ttpipe.test.cpu.level", "");

    @BeforeEach
    void needsTheLibrary() {
        assumeTrue(Boolean.parseBoolean(System.getProperty(CpuNative.PROPERTY, "true")),
                "skipped: the native kernels are switched off (-D" + CpuNative.PROPERTY + "=false)");
        if (LEVEL.isEmpty()) {
            assumeTrue(CpuNative.class.getClassLoader().getResource(CpuNative.resource()) != null,
                    "no " + CpuNative.resource() + " in this build (no C compiler?): only the Java kernels run");
        } else {
            String lib = System.getProperty(CpuNative.LIBRARY_PROPERTY, "");
            assumeTrue(Files.isRegularFile(Path.of(lib)),
                    "skipped: " + lib + " was not built (no C compiler, or one that does not know -march=" + LEVEL + ")");
            assumeTrue(X86Level.supported(LEVEL), "skipped: this CPU does not run " + LEVEL + " (it runs "
                    + X86Level.highest() + ")");
        }
        assertTrue(CpuNative.active(), "the library is there but did not load: " + CpuNative.describe());
    }

    @AfterEach
    void nativeBackOn() {
        CpuNative.enable(true);
    }

    @Test
    void reportsWhichCloneRuns() {
        String d = CpuNative.describe();
        if (LEVEL.isEmpty()) assertTrue(d.matches("native (avx512|avx2|sse2|generic) \\(libttpipe_cpu.so\\)"), d);
        else assertEquals("native " + LEVEL + " (libttpipe_cpu.so)", d, "the library built for " + LEVEL + " alone");
    }

    /**
     * The fma engine's GEMM ({@code ttpipe_cpu_gemm_bf16}) gives the bits of its definition on every kernel a level has:
     * per block of 384 indices, an FMA chain from 0 in increasing k, then alpha times it, added to C (the first block:
     * to beta C, or alone when beta is 0), each operation rounded; k = 0 gives beta C. Shapes with partial slivers in both
     * directions, every transpose, row strides wider than the rows. A level without AVX2 and FMA has no kernel and says so.
     * The dot engine's ({@code ttpipe_cpu_gemm_bf16dot}) likewise, its chain one vdpbf16ps per pair of indices (see
     * {@link #gemmBf16Definition}), on operands with subnormal values and odd k; the single-level libraries are built
     * without avx512_bf16, so only the bundled one has it.
     */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"fma", "dot"})
    void bf16GemmGivesTheBitsOfItsDefinition(String engine) {
        boolean dot = engine.equals("dot");
        String kernel = dot ? dotKernel() : CpuNative.ttpipe_cpu_gemm_bf16_kernel();
        if (dot && !LEVEL.isEmpty()) {
            assertEquals(null, kernel, "no avx512_bf16 in the library built for " + LEVEL);
            return;
        }
        if (!dot && (LEVEL.equals("x86-64") || LEVEL.equals("x86-64-v2"))) {
            assertEquals(null, kernel, "no FMA at " + LEVEL);
            return;
        }
        if (!dot && LEVEL.equals("x86-64-v3")) assertEquals("avx2", kernel);
        if (!dot && LEVEL.equals("x86-64-v4")) assertEquals("avx512", kernel);
        assumeTrue(kernel != null, "skipped: this CPU has no " + (dot ? "avx512_bf16, so the dot" : "AVX2 with FMA, so the fma")
                + " engine has no kernel");
        int[][] shapes = {{1, 1, 1}, {13, 7, 5}, {12, 32, 384}, {97, 65, 385}, {50, 70, 800}, {7, 33, 1537}, {5, 3, 0},
                {31, 47, 33}};
        for (int[] sh : shapes) {
            int m = sh[0], n = sh[1], k = sh[2];
            for (int t = 0; t < 4; t++) {
                boolean ta = (t & 1) != 0, tb = (t & 2) != 0;
                int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
                NativeBuffer a = randomBf16((ta ? k : m) * lda), b = randomBf16((tb ? n : k) * ldb);
                if (dot) {                                                    // subnormals, which vdpbf16ps takes as zero
                    for (int i = 0; i < (ta ? k : m) * lda; i += 29) a.bytes.putShort(2 * i, (short) (i % 2 == 0 ? 0x0041 : 0x8003));
                    for (int i = 3; i < (tb ? n : k) * ldb; i += 31) b.bytes.putShort(2 * i, (short) 0x0011);
                }
                NativeBuffer got = NativeBuffer.malloc(4 * m * ldc), want = NativeBuffer.malloc(4 * m * ldc);
                try {
                    for (float beta : new float[]{0f, 0.75f}) {
                        for (int i = 0; i < m * ldc; i++) {
                            float v = (float) rnd.nextGaussian();
                            got.floats.put(i, v);
                            want.floats.put(i, v);
                        }
                        assertEquals(0, gemm(dot, ta, tb, m, n, k, 1.25f, a, lda, b, ldb, beta, got, ldc));
                        gemmBf16Definition(dot, ta, tb, m, n, k, 1.25f, a, lda, b, ldb, beta, want, ldc);
                        for (int i = 0; i < m * ldc; i++) {
                            if (Float.floatToRawIntBits(got.floats.get(i)) != Float.floatToRawIntBits(want.floats.get(i))) {
                                throw new AssertionError(m + "x" + k + "x" + n + " ta=" + ta + " tb=" + tb + " beta=" + beta
                                        + ", " + engine + " engine's " + kernel + " kernel: element (" + i / ldc + ", " + i % ldc + ") is "
                                        + got.floats.get(i) + ", its definition " + want.floats.get(i));
                            }
                        }
                    }
                } finally {
                    for (NativeBuffer x : new NativeBuffer[]{a, b, got, want}) x.free();
                }
            }
        }
    }

    /**
     * The fma and dot engines' GEMM into bf16 (ttpipe_cpu_gemm_bf16_out) gives the bits of its GEMM into fp32 then
     * ttpipe_cpu_tile_to_bf16, with and without a bias, on one block of k and on several (the sums between them in the
     * scratch C), for every transpose and partial slivers both ways, with sums past fp32's range.
     */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"fma", "dot"})
    void bf16GemmIntoBf16GivesTheBitsOfRoundingItsFp32Result(String engine) {
        boolean dot = engine.equals("dot");
        String kernel = dot ? dotKernel() : CpuNative.ttpipe_cpu_gemm_bf16_kernel();
        if (dot && !LEVEL.isEmpty()) return;                  // no avx512_bf16: bf16GemmGivesTheBitsOfItsDefinition
        if (LEVEL.equals("x86-64") || LEVEL.equals("x86-64-v2")) return;     // no kernel: bf16GemmGivesTheBitsOfItsDefinition
        assumeTrue(kernel != null, "skipped: this CPU has no " + (dot ? "avx512_bf16, so the dot" : "AVX2 with FMA, so the fma")
                + " engine has no kernel");
        assertEquals(384, CpuNative.ttpipe_cpu_gemm_bf16_block());
        int[][] shapes = {{1, 1, 1}, {13, 7, 5}, {12, 32, 384}, {25, 65, 385}, {50, 70, 800}};
        for (int[] sh : shapes) {
            int m = sh[0], n = sh[1], k = sh[2];
            for (int t = 0; t < 4; t++) {
                boolean ta = (t & 1) != 0, tb = (t & 2) != 0;
                int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldo = n + 5;
                NativeBuffer a = randomBf16((ta ? k : m) * lda), b = randomBf16((tb ? n : k) * ldb);
                if (m * n > 100) {                                     // sums past fp32's range
                    a.bytes.putShort(0, BFloat16.fromFloat(3e38f));
                    a.bytes.putShort(2 * (ta ? lda : 1), BFloat16.fromFloat(-3e38f));
                }
                NativeBuffer bias = NativeBuffer.malloc(4 * n), sums = NativeBuffer.malloc(4 * m * n);
                NativeBuffer got = NativeBuffer.malloc(2 * m * ldo), want = NativeBuffer.malloc(2 * m * ldo);
                try {
                    for (int j = 0; j < n; j++) bias.floats.put(j, (float) rnd.nextGaussian());
                    for (boolean withBias : new boolean[]{false, true}) {
                        for (int i = 0; i < m * ldo; i++) {
                            short v = (short) rnd.nextInt();
                            got.bytes.putShort(2 * i, v);
                            want.bytes.putShort(2 * i, v);
                        }
                        long biasAt = withBias ? bias.address : 0;
                        assertEquals(0, gemm(dot, ta, tb, m, n, k, 1.25f, a, lda, b, ldb, 0f, sums, n));
                        CpuNative.ttpipe_cpu_tile_to_bf16(want.address, ldo, sums.address, n, m, n, biasAt);
                        NativeBuffer c = NativeBuffer.malloc(4 * m * n);
                        try {
                            assertEquals(0, CpuNative.ttpipe_cpu_gemm_bf16_out(dot ? 1 : 0, ta ? 1 : 0, tb ? 1 : 0, m, n, k, 1.25f, a.address,
                                    lda, b.address, ldb, k > 384 ? c.address : 0, n, got.address, ldo, biasAt));
                        } finally {
                            c.free();
                        }
                        for (int i = 0; i < m * ldo; i++) {
                            if (got.bytes.getShort(2 * i) != want.bytes.getShort(2 * i)) {
                                throw new AssertionError(m + "x" + k + "x" + n + " ta=" + ta + " tb=" + tb + " bias=" + withBias
                                        + ", " + engine + " engine's " + kernel + " kernel: element (" + i / ldo + ", " + i % ldo + ") is 0x"
                                        + Integer.toHexString(got.bytes.getShort(2 * i) & 0xffff) + ", rounding its fp32 result 0x"
                                        + Integer.toHexString(want.bytes.getShort(2 * i) & 0xffff));
                            }
                        }
                    }
                    assertEquals(-3, CpuNative.ttpipe_cpu_gemm_bf16_out(dot ? 1 : 0, 0, 0, 2, 2, 385, 1f, a.address, 385, b.address, 2, 0, 2,
                            got.address, 2, 0), "k past one block needs the scratch sums");
                } finally {
                    for (NativeBuffer x : new NativeBuffer[]{a, b, bias, sums, got, want}) x.free();
                }
            }
        }
    }

    private NativeBuffer randomBf16(int n) {
        NativeBuffer buf = NativeBuffer.malloc(2 * Math.max(1, n));
        for (int i = 0; i < n; i++) {
            float v = i % 97 == 0 ? -0f : (float) rnd.nextGaussian() * (i % 5 == 0 ? 8f : 1f);
            buf.bytes.putShort(2 * i, BFloat16.fromFloat(v));
        }
        return buf;
    }

    /** "vdpbf16ps" where the dot engine runs here, else null. */
    private static String dotKernel() {
        return CpuNative.ttpipe_cpu_gemm_bf16dot_available() == 1 ? "vdpbf16ps" : null;
    }

    /** ttpipe_cpu_gemm_bf16dot (dot) or ttpipe_cpu_gemm_bf16. */
    private static int gemm(boolean dot, boolean ta, boolean tb, int m, int n, int k, float alpha, NativeBuffer a, int lda,
                            NativeBuffer b, int ldb, float beta, NativeBuffer c, int ldc) {
        return dot ? CpuNative.ttpipe_cpu_gemm_bf16dot(ta ? 1 : 0, tb ? 1 : 0, m, n, k, alpha, a.address, lda, b.address, ldb,
                beta, c.address, ldc)
                : CpuNative.ttpipe_cpu_gemm_bf16(ta ? 1 : 0, tb ? 1 : 0, m, n, k, alpha, a.address, lda, b.address, ldb, beta,
                c.address, ldc);
    }

    /**
     * What ttpipe_cpu_gemm_bf16 computes, element by element (see its comment in ttpipe_cpu.c); with dot,
     * ttpipe_cpu_gemm_bf16dot: the chain takes the indices in pairs (p, p + 1), as vdpbf16ps does (Intel's SDM): subnormal
     * operands as zero, then s + a[p+1] b[p+1], then + a[p] b[p] (a pair past k adds zero), each sum rounded and a
     * subnormal sum flushed to zero (the products of two bf16 values are exact).
     */
    private static void gemmBf16Definition(boolean dot, boolean ta, boolean tb, int m, int n, int k, float alpha,
                                           NativeBuffer a, int lda, NativeBuffer b, int ldb, float beta, NativeBuffer c,
                                           int ldc) {
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < n; j++) {
                float cv = c.floats.get(i * ldc + j);
                if (k == 0) cv = beta == 0f ? 0f : beta * cv;              // no products: C = beta C, as Gemm.scaleC
                for (int p0 = 0; p0 < k; p0 += 384) {
                    float s = 0f;
                    int end = Math.min(k, p0 + 384);
                    for (int p = p0; p < end; p += dot ? 2 : 1) {
                        float av = BFloat16.toFloat(a.bytes.getShort(2 * (ta ? p * lda + i : i * lda + p)));
                        float bv = BFloat16.toFloat(b.bytes.getShort(2 * (tb ? j * ldb + p : p * ldb + j)));
                        if (!dot) {
                            s = Math.fma(av, bv, s);
                            continue;
                        }
                        if (p + 1 < end) {
                            float an = BFloat16.toFloat(a.bytes.getShort(2 * (ta ? (p + 1) * lda + i : i * lda + p + 1)));
                            float bn = BFloat16.toFloat(b.bytes.getShort(2 * (tb ? j * ldb + p + 1 : (p + 1) * ldb + j)));
                            s = flush(s + flush(an) * flush(bn));
                        }
                        s = flush(s + flush(av) * flush(bv));
                    }
                    float v = alpha * s;
                    cv = p0 > 0 ? cv + v : beta == 0f ? v : v + beta * cv;
                }
                c.floats.put(i * ldc + j, cv);
            }
        }
    }

    /** x, or a zero of its sign where x is subnormal. */
    private static float flush(float x) {
        return Math.abs(x) < Float.MIN_NORMAL ? Math.copySign(0f, x) : x;
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

    /**
     * bf16 to fp32 and back, and rounding to bf16 in place: every bf16 bit pattern, random fp32 bits, and the ties,
     * NaN payloads, infinities, subnormals and the largest finite values that round up to infinity.
     */
    @Test
    void bf16ConversionsGiveTheJavaBits() {
        int[] edges = {0x0000_8000, 0x0001_8000, 0x0000_7fff, 0x0001_7fff, 0x7f7f_ffff, 0xff7f_ffff, 0x7f80_0000,
                0xff80_0000, 0x7f80_0001, 0xff80_0001, 0x7fc0_0000, 0x7fbf_ffff, 0x0000_0001, 0x8000_0000, 0x3f80_8000,
                0x3f81_8000};
        int n = 65_536 + 100_003;
        NativeBuffer bits = NativeBuffer.malloc(4 * n);
        NativeBuffer viaC = NativeBuffer.malloc(4 * n), viaJava = NativeBuffer.malloc(4 * n);
        try (Parallel par = new Parallel(2)) {
            for (int i = 0; i < 65_536; i++) bits.shorts.put(i, (short) i);
            String[] what = {"bf16 -> fp32", "fp32 -> bf16", "fp32 rounded to bf16"};
            for (int k = 0; k < 3; k++) {
                if (k == 1) {
                    for (int i = 0; i < n; i++) bits.ints.put(i, rnd.nextInt());
                    bits.ints.put(0, edges);
                }
                int count = k == 0 ? 65_536 : n;
                for (NativeBuffer out : new NativeBuffer[]{viaC, viaJava}) {
                    CpuNative.enable(out == viaC);
                    switch (k) {
                        case 0 -> Convert.bf16ToFloat(par, out, bits, count);
                        case 1 -> Convert.floatToBf16(par, out, bits, count);
                        default -> {
                            out.bytes.put(0, bits.bytes, 0, 4 * count);   // in place, as staging may
                            Convert.roundToBf16(par, out, out, count);
                        }
                    }
                }
                CpuNative.enable(true);
                for (int i = 0; i < count; i++) {
                    int c = k == 1 ? viaC.shorts.get(i) : viaC.ints.get(i);
                    int j = k == 1 ? viaJava.shorts.get(i) : viaJava.ints.get(i);
                    int in = k == 0 ? bits.shorts.get(i) & 0xffff : bits.ints.get(i);
                    if (c != j) Assertions.fail(what[k] + " of 0x" + Integer.toHexString(in) + ": native 0x"
                            + Integer.toHexString(c) + ", Java 0x" + Integer.toHexString(j));
                }
            }
        } finally {
            bits.free();
            viaC.free();
            viaJava.free();
        }
    }

    @Test
    void nativeBoundsAreCheckedBeforeTheCall() {
        NativeBuffer small = NativeBuffer.malloc(4 * 10);
        try (Parallel par = new Parallel(1)) {
            Assertions.assertThrows(IndexOutOfBoundsException.class,
                    () -> Elementwise.gelu(par, small, small, 11));
        } finally {
            small.free();
        }
    }

    /** Runs {@code body} on a fresh 1x1 cpu mesh with native kernels, then with Java ones, and compares every output. */
    private static void sameBits(String what, Function<Ops, float[][]> body) {
        float[][] c;
        float[][] j;
        try (MeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(2))) {
            c = body.apply(mesh.asSubmesh().ops());
        }
        CpuNative.enable(false);
        try (MeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(2))) {
            j = body.apply(mesh.asSubmesh().ops());
        } finally {
            CpuNative.enable(true);
        }
        for (int o = 0; o < c.length; o++) {
            for (int i = 0; i < c[o].length; i++) {
                assertEquals(Float.floatToRawIntBits(j[o][i]), Float.floatToRawIntBits(c[o][i]),
                        what + ", output " + o + ", element " + i + ": native " + c[o][i] + ", Java " + j[o][i]);
            }
        }
    }

    /**
     * Cross-entropy and its gradient: the loss (as a double's two halves) and every gradient element, native against Java,
     * for vocabularies below, at and past the lane width and a large one, with an ignored row and rows of large logits;
     * bf16 logits read (and the gradient written) as bf16 by the kernels against the Java ones on staged fp32.
     */
    @ParameterizedTest(name = "rows={0} v={1} {2}")
    @CsvSource({"1,1,FP32", "3,13,FP32", "7,16,FP32", "33,37,FP32", "9,50257,FP32", "1,1,BF16", "33,37,BF16",
            "9,50257,BF16"})
    void crossEntropyGivesTheJavaBits(int rows, int v, DType dtype) {
        float[] x = gaussian(rows * v, 4);
        for (int j = 0; j < v; j++) x[j] += 80f;                        // a row near exp's range
        int[] t = new int[rows];
        for (int r = 0; r < rows; r++) t[r] = rnd.nextInt(v);
        if (rows > 2) t[1] = -100;                                     // an ignored row
        sameBits("crossEntropy v=" + v + " " + dtype, ops -> {
            try (Tensor tx = ops.fromHost(x, Shape.of(rows, v), Layout.REPLICATED, dtype);
                 Tensor tt = ops.fromHostInts(t, Shape.of(rows), Layout.REPLICATED);
                 Tensor dx = ops.crossEntropyBackward(tx, tt, -100, 0.25f)) {
                double loss = ops.crossEntropy(tx, tt, -100).sum();
                long bits = Double.doubleToRawLongBits(loss);
                return new float[][]{{Float.intBitsToFloat((int) (bits >>> 32)), Float.intBitsToFloat((int) bits)}, dx.toHost()};
            }
        });
    }

    @ParameterizedTest(name = "rows={0} d={1}")
    @CsvSource({"1,1", "3,15", "7,16", "33,17", "512,384", "5,1000"})
    void layerNormRowSumsAndSquaresGiveTheJavaBits(int rows, int d) {
        float[] x = gaussian(rows * d, 3), dy = gaussian(rows * d, 1), gamma = gaussian(d, 1), beta = gaussian(d, 1);
        for (int i = 0; i < d; i++) x[i] = 1e4f + x[i];                // a row with a large mean: cancellation
        sameBits("layernorm", ops -> {
            try (Tensor tx = ops.fromHost(x, Shape.of(rows, d), Layout.REPLICATED, DType.FP32);
                 Tensor tg = ops.fromHost(gamma, Shape.of(d), Layout.REPLICATED, DType.FP32);
                 Tensor tb = ops.fromHost(beta, Shape.of(d), Layout.REPLICATED, DType.FP32);
                 Tensor tdy = ops.fromHost(dy, Shape.of(rows, d), Layout.REPLICATED, DType.FP32)) {
                float[][] norm = layerNormAndRowSums(ops, tx, tdy, tg, tb, d);
                long sx = Double.doubleToRawLongBits(ops.sumSquares(tx)), sdy = Double.doubleToRawLongBits(ops.sumSquares(tdy));
                float[] squares = new float[8];                        // the two doubles' bits, 16 at a time
                for (int i = 0; i < 4; i++) {
                    squares[i] = (sx >>> (16 * i)) & 0xffff;
                    squares[4 + i] = (sdy >>> (16 * i)) & 0xffff;
                }
                float[][] all = Arrays.copyOf(norm, norm.length + 1);
                all[norm.length] = squares;
                return all;
            }
        });
    }

    /** LayerNorm of x, its input gradient for dy, both weight gradients (written, then added to) and row sums of dy and x. */
    private static float[][] layerNormAndRowSums(Ops ops, Tensor x, Tensor dy, Tensor gamma, Tensor beta, int d) {
        var out = ops.layerNorm(x, gamma, beta, 1e-5f);
        try (Tensor y = out.y(); Tensor mean = out.mean(); Tensor rstd = out.rstd();
             Tensor dx = ops.layerNormBackwardInput(dy, x, gamma, mean, rstd);
             Tensor dGamma = ops.zeros(Shape.of(d), Layout.REPLICATED, DType.FP32);
             Tensor dBeta = ops.zeros(Shape.of(d), Layout.REPLICATED, DType.FP32);
             Tensor bias = ops.zeros(Shape.of(d), Layout.REPLICATED, DType.FP32)) {
            ops.layerNormBackwardWeight(dy, x, mean, rstd, dGamma, dBeta, false);
            ops.layerNormBackwardWeight(dy, x, mean, rstd, dGamma, dBeta, true);
            ops.sumRows(dy, bias, false);
            ops.sumRows(x, bias, true);
            return new float[][]{y.toHost(), mean.toHost(), rstd.toHost(), dx.toHost(), dGamma.toHost(), dBeta.toHost(),
                    bias.toHost()};
        }
    }

    @Test
    void addMulAdamwAndPermutesGiveTheJavaBits() {
        int rows = 300, d = 77;
        float[] a = gaussian(rows * d, 2), b = gaussian(rows * d, 2), bias = gaussian(d, 1);
        float[] p = gaussian(rows * d, 1), g = gaussian(rows * d, 1e-2), m = gaussian(rows * d, 1e-3), v = gaussian(rows * d, 1e-4);
        for (int i = 0; i < v.length; i++) v[i] = Math.abs(v[i]);
        sameBits("add, mul, adamw, fp32 and bf16 permutes", ops -> {
            try (Tensor ta = ops.fromHost(a, Shape.of(rows, d), Layout.REPLICATED, DType.FP32);
                 Tensor tb = ops.fromHost(b, Shape.of(rows, d), Layout.REPLICATED, DType.FP32);
                 Tensor tbias = ops.fromHost(bias, Shape.of(d), Layout.REPLICATED, DType.FP32);
                 Tensor tp = ops.fromHost(p, Shape.of(rows, d), Layout.REPLICATED, DType.FP32);
                 Tensor tg = ops.fromHost(g, Shape.of(rows, d), Layout.REPLICATED, DType.FP32);
                 Tensor tm = ops.fromHost(m, Shape.of(rows, d), Layout.REPLICATED, DType.FP32);
                 Tensor tv = ops.fromHost(v, Shape.of(rows, d), Layout.REPLICATED, DType.FP32);
                 Tensor sum = ops.add(ta, tb); Tensor prod = ops.mul(ta, tb); Tensor biased = ops.add(ta, tbias);
                 Tensor scaled = ops.mul(ta, tbias);
                 Tensor x4 = ops.fromHost(a, Shape.of(5, 6, 10, 77), Layout.REPLICATED, DType.FP32);
                 Tensor perm = ops.permute(x4, 0, 2, 1, 3); Tensor perm2 = ops.permute(x4, 3, 1, 0, 2);
                 Tensor h4 = ops.fromHost(a, Shape.of(5, 6, 10, 77), Layout.REPLICATED, DType.BF16);
                 Tensor hperm = ops.permute(h4, 0, 2, 1, 3); Tensor hperm2 = ops.permute(h4, 3, 1, 0, 2)) {
                ops.adamw(tp, tg, tm, tv, new AdamWParams(3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 7, 0.5f));
                return new float[][]{sum.toHost(), prod.toHost(), biased.toHost(), scaled.toHost(), tp.toHost(), tm.toHost(),
                        tv.toHost(), perm.toHost(), perm2.toHost(), hperm.toHost(), hperm2.toHost()};
            }
        });
    }

    /**
     * The kernels that read and write bf16 pieces themselves ({@link DirectKernels}) give the bits of staging the pieces
     * through fp32 and running the Java kernels: activations (every operand bf16, and mixed), add and mul (same shape and
     * a broadcast row), LayerNorm forward and both gradients, and row sums, over rows longer than the kernels' staging
     * pieces.
     */
    @ParameterizedTest(name = "rows={0} d={1}")
    @CsvSource({"3,15", "33,17", "64,384", "5,5000"})
    void bf16PiecesGiveTheBitsOfFp32Staging(int rows, int d) {
        float[] x = gaussian(rows * d, 3), dy = gaussian(rows * d, 1), gamma = gaussian(d, 1), beta = gaussian(d, 1);
        sameBits("bf16 kernels", ops -> {
            try (Tensor tx = ops.fromHost(x, Shape.of(rows, d), Layout.REPLICATED, DType.BF16);
                 Tensor tdy = ops.fromHost(dy, Shape.of(rows, d), Layout.REPLICATED, DType.BF16);
                 Tensor tdy32 = ops.fromHost(dy, Shape.of(rows, d), Layout.REPLICATED, DType.FP32);
                 Tensor tg = ops.fromHost(gamma, Shape.of(d), Layout.REPLICATED, DType.FP32);
                 Tensor tb = ops.fromHost(beta, Shape.of(d), Layout.REPLICATED, DType.FP32);
                 Tensor gelu = ops.gelu(tx); Tensor silu = ops.silu(tx);
                 Tensor dGelu = ops.geluBackward(tdy, tx); Tensor dSilu = ops.siluBackward(tdy32, tx);
                 Tensor dSilu16 = ops.siluBackward(tdy, tx); Tensor dGelu32 = ops.geluBackward(tdy32, tx);
                 Tensor sum = ops.add(tx, tdy); Tensor prod = ops.mul(tx, tdy32); Tensor biased = ops.add(tx, tb)) {
                float[][] norm = layerNormAndRowSums(ops, tx, tdy, tg, tb, d);
                float[][] all = Arrays.copyOf(new float[][]{gelu.toHost(), silu.toHost(), dGelu.toHost(), dSilu.toHost(),
                        dSilu16.toHost(), dGelu32.toHost(), sum.toHost(), prod.toHost(), biased.toHost()}, 9 + norm.length);
                System.arraycopy(norm, 0, all, 9, norm.length);
                return all;
            }
        });
    }

    /**
     * GELU and SiLU of every bf16 value (the native kernels look a bf16 argument up in tables made when the library loads)
     * and their gradients, for bf16 and fp32 dy and results: the Java kernels' bits.
     */
    @Test
    void activationsOfEveryBf16ValueGiveTheJavaBits() {
        int n = 1 << 16;
        float[] x = new float[n], dy = gaussian(n, 2);
        for (int h = 0; h < n; h++) x[h] = Float.intBitsToFloat(h << 16);
        sameBits("activations of every bf16 value", ops -> {
            try (Tensor tx = ops.fromHost(x, Shape.of(n), Layout.REPLICATED, DType.BF16);
                 Tensor tdy = ops.fromHost(dy, Shape.of(n), Layout.REPLICATED, DType.BF16);
                 Tensor tdy32 = ops.fromHost(dy, Shape.of(n), Layout.REPLICATED, DType.FP32);
                 Tensor gelu = ops.gelu(tx); Tensor silu = ops.silu(tx);
                 Tensor dGelu = ops.geluBackward(tdy, tx); Tensor dGelu32 = ops.geluBackward(tdy32, tx);
                 Tensor dSilu = ops.siluBackward(tdy, tx); Tensor dSilu32 = ops.siluBackward(tdy32, tx)) {
                return new float[][]{gelu.toHost(), silu.toHost(), dGelu.toHost(), dGelu32.toHost(), dSilu.toHost(),
                        dSilu32.toHost()};
            }
        });
    }

    @ParameterizedTest(name = "causal={0} T={1} Tk={2} hd={3}")
    @CsvSource({"true,7,7,5", "false,5,9,4", "true,3,8,6", "true,8,3,4", "true,64,64,16", "true,150,150,24",
            "false,70,130,8", "true,130,70,33", "true,256,256,64"})
    void fusedAttentionGivesTheJavaBits(boolean causal, int t, int tk, int hd) {
        fusedAttentionGivesTheJavaBits(DType.FP32, causal, t, tk, hd);
    }

    /**
     * bf16 attention: the same bf16 GEMM either way; the row kernels and the conversions native or Java. Tk 2100: the
     * native backward rows take a row's keys in two pieces (of at most 2048).
     */
    @ParameterizedTest(name = "causal={0} T={1} Tk={2} hd={3}")
    @CsvSource({"true,7,7,5", "false,5,9,4", "true,8,3,4", "true,150,150,24", "false,70,130,8", "true,130,70,33",
            "true,256,256,64", "true,20,20,260", "false,3,2100,4", "true,4,2100,4"})
    void fusedBf16AttentionGivesTheJavaBits(boolean causal, int t, int tk, int hd) {
        fusedAttentionGivesTheJavaBits(DType.BF16, causal, t, tk, hd);
    }

    private void fusedAttentionGivesTheJavaBits(DType dtype, boolean causal, int t, int tk, int hd) {
        int b = 2, h = 3, n = b * h;
        float[] q = gaussian(n * t * hd, 2), k = gaussian(n * tk * hd, 2), v = gaussian(n * tk * hd, 1);
        float[] d = gaussian(n * t * hd, 1);
        float[][] c = FlashAttentionTest.attention(dtype, q, k, v, d, b, h, t, tk, hd, causal);
        CpuNative.enable(false);
        float[][] j = FlashAttentionTest.attention(dtype, q, k, v, d, b, h, t, tk, hd, causal);
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
}

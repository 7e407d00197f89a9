package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DeviceException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The matmul kernels (OpenBLAS, oneDNN, pure JVM) against a double reference: odd shapes, all transposes, offsets, leading dims, alpha, beta. */
class GemmTest {
    private static Parallel par;
    private static Gemm blas;
    private static Gemm java;
    /** oneDNN's sgemm, or null where it does not load (not linux x86_64). */
    private static Gemm dnnl;

    @BeforeAll
    static void kernels() {
        par = new Parallel(2);
        blas = BlasGemm.tryLoad(par);
        java = new JavaGemm(par);
        dnnl = DnnlGemm.tryLoad(par);
    }

    @AfterAll
    static void close() {
        par.close();
    }

    @Test
    void openBlasLoadsFromTheBytedecoJar() {
        assertNotNull(blas, "OpenBLAS should load here: " + OpenBlas.failure());
        assertTrue(blas.describe().contains("OpenBLAS"), blas.describe());
        assertEquals(Dnnl.load() ? "dnnl" : "blas", GemmChoice.choose("auto", 2, par).kind(), "oneDNN first, then OpenBLAS");
        assertEquals("java", GemmChoice.choose("java", 2, par).kind());
        assertThrows(DeviceException.class, () -> GemmChoice.choose("cuda", 2, par));
    }

    /**
     * What ttpipe promises of a product on the cpu backend: the same bits on any number of threads. With
     * OpenBLAS it holds because ttpipe cuts C into tiles by the shape alone and each tile is one
     * single-threaded call (OpenBLAS's own threading gives other bits on some CPUs); the pure-JVM kernel's
     * tiles likewise. Shapes: one call, tiles cut at the edges, every transpose, offsets and padding.
     */
    @ParameterizedTest(name = "{0}x{1}x{2} transA={3} transB={4}")
    @CsvSource({
            "512,384,384,false,false", "512,384,384,true,false", "384,1536,512,false,true", "64,256,64,false,false",
            "512,13,384,true,true", "700,1100,300,false,false", "1100,700,2048,true,false", "33,5000,100,false,true"})
    void eachKernelGivesTheSameBitsOnAnyNumberOfThreads(int m, int n, int k, boolean ta, boolean tb) {
        int[] counts = {1, 2, 3, 5};
        for (String kind : new String[]{"blas", "dnnl", "java"}) {
            if (kind.equals("blas") && blas == null || kind.equals("dnnl") && dnnl == null) continue;
            int[] first = null;
            for (int threads : counts) {
                try (Parallel p = new Parallel(threads)) {
                    Gemm g = kind.equals("blas") ? BlasGemm.tryLoad(p) : kind.equals("dnnl") ? DnnlGemm.tryLoad(p) : new JavaGemm(p);
                    int[] bits = product(g, m, n, k, ta, tb);
                    if (first == null) {
                        first = bits;
                        continue;
                    }
                    for (int i = 0; i < bits.length; i++) {
                        if (bits[i] != first[i]) {
                            throw new AssertionError(kind + " " + m + "x" + n + "x" + k + " transA=" + ta + " transB=" + tb
                                    + ": element " + i + " is " + Float.intBitsToFloat(bits[i]) + " on " + threads
                                    + " threads, " + Float.intBitsToFloat(first[i]) + " on 1");
                        }
                    }
                }
            }
        }
    }

    /** The tiles are a function of the shape: never of a thread count, and one call below the small size. */
    @Test
    void blasTilesDependOnTheShapeAlone() {
        assertArrayEquals(new int[]{64, 64}, tiles(64, 64, 64));
        assertArrayEquals(new int[]{512, 768}, tiles(2048, 1536, 384));
        assertArrayEquals(new int[]{100, 1008}, tiles(100, 50257, 384));
        // A weight gradient (small C, long k) is cut into 4 tiles so that it does not run on one thread.
        assertArrayEquals(new int[]{192, 192}, tiles(384, 384, 2048));
        assertArrayEquals(new int[]{384, 384}, tiles(384, 1536, 2048));
        assertArrayEquals(new int[]{256, 256}, tiles(512, 512, 512));
        assertArrayEquals(new int[]{64, 64}, tiles(64, 64, 65536), "never below 64 a side");
        assertArrayEquals(new int[]{368, 560}, tiles(1100, 1100, 3));
    }

    private static int[] tiles(int m, int n, int k) {
        return new int[]{BlasGemm.tileRows(m, n, k), BlasGemm.tileCols(m, n, k)};
    }

    /** C (m x n, beta 0.5 over a fixed C) of a product of fixed random operands, as raw bits. */
    private static int[] product(Gemm g, int m, int n, int k, boolean ta, boolean tb) {
        Random rnd = new Random(m * 31L + n * 7L + k);
        int pad = 3, off = 2;
        int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
        NativeBuffer a = fill(rnd, off + (ta ? k : m) * lda);
        NativeBuffer b = fill(rnd, off + (tb ? n : k) * ldb);
        NativeBuffer c = fill(rnd, off + m * ldc);
        try {
            g.sgemm(ta, tb, m, n, k, 1.5f, a, off, lda, b, off, ldb, 0.5f, c, off, ldc);
            int[] bits = new int[m * n];
            for (int i = 0; i < m; i++) {
                for (int j = 0; j < n; j++) bits[i * n + j] = Float.floatToRawIntBits(c.floats.get(off + i * ldc + j));
            }
            return bits;
        } finally {
            a.free();
            b.free();
            c.free();
        }
    }

    @ParameterizedTest(name = "{0}x{1}x{2} transA={3} transB={4}")
    @CsvSource({
            "13,11,17,false,false", "13,11,17,false,true", "13,11,17,true,false", "13,11,17,true,true",
            "1,1,1,false,false", "70,300,260,false,false", "65,257,513,true,true", "3,700,5,false,true",
            "129,3,300,true,false", "300,600,20,true,true", "300,600,20,false,false", "257,1025,17,true,false",
            "520,530,9,false,true", "1100,1100,3,false,true", "1100,1100,3,true,false"})
    void bothKernelsMatchTheReference(int m, int n, int k, boolean ta, boolean tb) {
        for (Gemm g : new Gemm[]{blas, dnnl, java}) {
            if (g == null) continue;
            check(g, m, n, k, ta, tb, 1f, 0f, 0, 0);
            check(g, m, n, k, ta, tb, -0.5f, 2f, 3, 5);
        }
    }

    /** Multiplies with the operands at an offset and with leading dimensions padded by {@code pad}. */
    private static void check(Gemm g, int m, int n, int k, boolean ta, boolean tb, float alpha, float beta, int off,
                              int pad) {
        Random rnd = new Random(m * 31L + n * 7L + k);
        int aRows = ta ? k : m, aCols = ta ? m : k, lda = aCols + pad;
        int bRows = tb ? n : k, bCols = tb ? k : n, ldb = bCols + pad;
        int ldc = n + pad;
        NativeBuffer a = fill(rnd, off + aRows * lda);
        NativeBuffer b = fill(rnd, off + bRows * ldb);
        NativeBuffer c = fill(rnd, off + m * ldc);
        try {
            double[] expect = new double[m * n];
            for (int i = 0; i < m; i++) {
                for (int j = 0; j < n; j++) {
                    double s = 0;
                    for (int q = 0; q < k; q++) {
                        double av = ta ? a.floats.get(off + q * lda + i) : a.floats.get(off + i * lda + q);
                        double bv = tb ? b.floats.get(off + j * ldb + q) : b.floats.get(off + q * ldb + j);
                        s += av * bv;
                    }
                    expect[i * n + j] = alpha * s + beta * c.floats.get(off + i * ldc + j);
                }
            }
            float padValue = pad > 0 ? c.floats.get(off + n) : 0f;
            g.sgemm(ta, tb, m, n, k, alpha, a, off, lda, b, off, ldb, beta, c, off, ldc);
            for (int i = 0; i < m; i++) {
                for (int j = 0; j < n; j++) {
                    double e = expect[i * n + j];
                    float got = c.floats.get(off + i * ldc + j);
                    assertEquals(e, got, 1e-4 * (1 + Math.abs(e)) * Math.sqrt(k),
                            g.kind() + " element (" + i + ", " + j + ")");
                }
            }
            if (pad > 0) assertEquals(padValue, c.floats.get(off + n), g.kind() + " leaves the padding alone");
        } finally {
            a.free();
            b.free();
            c.free();
        }
    }

    private static NativeBuffer fill(Random rnd, int n) {
        NativeBuffer b = NativeBuffer.malloc(Math.max(4, n * 4));
        for (int i = 0; i < n; i++) b.floats.put(i, rnd.nextFloat() * 2 - 1);
        return b;
    }

    @Test
    void emptyAndZeroDepthProducts() {
        for (Gemm g : new Gemm[]{blas, dnnl, java}) {
            if (g == null) continue;
            NativeBuffer c = NativeBuffer.malloc(64);
            try {
                for (int i = 0; i < 6; i++) c.floats.put(i, 1f);
                g.sgemm(false, false, 2, 3, 0, 1f, c, 0, 1, c, 0, 3, 0.5f, c, 0, 3);
                for (int i = 0; i < 6; i++) assertEquals(0.5f, c.floats.get(i), g.kind() + ": k = 0 scales C");
                g.sgemm(false, false, 0, 3, 4, 1f, c, 0, 4, c, 0, 3, 0f, c, 0, 3);
            } finally {
                c.free();
            }
        }
    }

    @Test
    void outOfBoundsOperandsThrowBeforeAnyNativeCall() {
        NativeBuffer small = NativeBuffer.malloc(64); // 16 floats
        try {
            for (Gemm g : new Gemm[]{blas, dnnl, java}) {
                if (g == null) continue;
                DeviceException e = assertThrows(DeviceException.class,
                        () -> g.sgemm(false, false, 8, 8, 8, 1f, small, 0, 8, small, 0, 8, 0f, small, 0, 8));
                assertTrue(e.getMessage().contains("outside"), e.getMessage());
                assertThrows(DeviceException.class,
                        () -> g.sgemm(false, false, 2, 2, 2, 1f, small, 0, 1, small, 0, 2, 0f, small, 0, 2), "lda < k");
            }
        } finally {
            small.free();
        }
    }
}

package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DeviceException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Both matmul kernels against a double reference: odd shapes, all transposes, offsets, leading dims, alpha, beta. */
class GemmTest {
    private static Parallel par;
    private static Gemm blas;
    private static Gemm java;

    @BeforeAll
    static void kernels() {
        par = new Parallel(2);
        blas = BlasGemm.tryLoad(2);
        java = new JavaGemm(par);
    }

    @AfterAll
    static void close() {
        par.close();
    }

    @Test
    void openBlasLoadsFromTheBytedecoJar() {
        assertNotNull(blas, "OpenBLAS should load here: " + OpenBlas.failure());
        assertTrue(blas.describe().contains("OpenBLAS"), blas.describe());
        assertEquals("blas", GemmChoice.choose("auto", 2, par).kind());
        assertEquals("java", GemmChoice.choose("java", 2, par).kind());
        assertThrows(DeviceException.class, () -> GemmChoice.choose("cuda", 2, par));
    }

    @ParameterizedTest(name = "{0}x{1}x{2} transA={3} transB={4}")
    @CsvSource({
            "13,11,17,false,false", "13,11,17,false,true", "13,11,17,true,false", "13,11,17,true,true",
            "1,1,1,false,false", "70,300,260,false,false", "65,257,513,true,true", "3,700,5,false,true",
            "129,3,300,true,false"})
    void bothKernelsMatchTheReference(int m, int n, int k, boolean ta, boolean tb) {
        for (Gemm g : new Gemm[]{blas, java}) {
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
        for (Gemm g : new Gemm[]{blas, java}) {
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
            for (Gemm g : new Gemm[]{blas, java}) {
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

package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DeviceException;

/**
 * Single-precision matrix multiply on native buffers, row-major:
 * {@code C = alpha * op(A) @ op(B) + beta * C} with op(A) [m, k], op(B) [k, n], C [m, n]; offsets
 * and leading dimensions in elements. Implementations: {@link BlasGemm} (OpenBLAS through JNA),
 * {@link DnnlGemm} (oneDNN's sgemm), {@link JavaGemm} (blocked, multi-threaded, pure JVM) and
 * {@link PerShapeGemm} (one of the first two per shape, from a {@link MatmulTable}), chosen by
 * {@link GemmChoice}. Each checks every bound before touching memory. Thread-safe.
 */
interface Gemm {
    /** {@code blas}, {@code dnnl}, {@code java} or {@code table}. */
    String kind();

    /** A one-line description for logs and benchmarks (library, version, threads). */
    String describe();

    void sgemm(boolean transA, boolean transB, int m, int n, int k, float alpha,
               NativeBuffer a, int aOff, int lda, NativeBuffer b, int bOff, int ldb,
               float beta, NativeBuffer c, int cOff, int ldc);

    /**
     * The single-threaded call {@link #sgemm} makes on each tile of C ({@link BlasGemm#tiles}) for this shape, or
     * null where the kernel does not work tile by tile so (the pure-JVM one). A caller that runs the tiles itself
     * ({@link Bf16Gemm#gemmToBf16}) gets the bits {@link #sgemm} gives.
     */
    default BlasGemm.TileCall tileCall(boolean transA, boolean transB, int m, int n, int k) {
        return null;
    }

    /** Checks that a rows x cols matrix with leading dimension ld at offset off lies inside the buffer. */
    static void checkBounds(String what, NativeBuffer buf, int off, int rows, int cols, int ld) {
        if (rows == 0 || cols == 0) return;
        long last = off + (long) (rows - 1) * ld + cols - 1;
        if (off < 0 || ld < cols || last >= buf.capacity / 4) {
            throw new DeviceException("sgemm: matrix " + what + " [" + rows + " x " + cols + "] (ld " + ld + ", offset "
                    + off + ") lies outside its buffer of " + buf.capacity / 4 + " floats");
        }
    }

    /** Checks all three operands and the sizes. Returns false when there is nothing to multiply. */
    static boolean check(boolean transA, boolean transB, int m, int n, int k, NativeBuffer a, int aOff, int lda,
                         NativeBuffer b, int bOff, int ldb, NativeBuffer c, int cOff, int ldc) {
        if (m < 0 || n < 0 || k < 0) throw new DeviceException("sgemm: negative size m=" + m + " n=" + n + " k=" + k);
        checkBounds("A", a, aOff, transA ? k : m, transA ? m : k, lda);
        checkBounds("B", b, bOff, transB ? n : k, transB ? k : n, ldb);
        checkBounds("C", c, cOff, m, n, ldc);
        return m > 0 && n > 0;
    }

    /** {@code C = beta * C}: what a product with k = 0 leaves. */
    static void scaleC(int m, int n, float beta, NativeBuffer c, int cOff, int ldc) {
        for (int i = 0; i < m; i++) {
            int row = cOff + i * ldc;
            for (int j = 0; j < n; j++) c.floats.put(row + j, beta == 0f ? 0f : beta * c.floats.get(row + j));
        }
    }
}

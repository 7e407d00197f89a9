package dev.ttpipe.device.cpu;

/**
 * {@link Gemm} through OpenBLAS's {@code cblas_sgemm} on native addresses. OpenBLAS's thread
 * count is process-wide: the last {@link #setThreads} wins.
 */
final class BlasGemm implements Gemm {
    private final int threads;

    private BlasGemm(int threads) {
        this.threads = threads;
    }

    /** OpenBLAS with {@code threads} threads, or null if the library does not load. */
    static BlasGemm tryLoad(int threads) {
        if (!OpenBlas.load()) return null;
        BlasGemm g = new BlasGemm(threads);
        setThreads(threads);
        return g;
    }

    static void setThreads(int threads) {
        OpenBlas.openblas_set_num_threads(threads);
    }

    @Override
    public String kind() {
        return "blas";
    }

    @Override
    public String describe() {
        return "OpenBLAS (" + OpenBlas.openblas_get_corename() + ", " + threads + " threads; "
                + OpenBlas.openblas_get_config().trim() + ") from " + OpenBlas.loadedFrom();
    }

    @Override
    public void sgemm(boolean transA, boolean transB, int m, int n, int k, float alpha,
                      NativeBuffer a, int aOff, int lda, NativeBuffer b, int bOff, int ldb,
                      float beta, NativeBuffer c, int cOff, int ldc) {
        if (!Gemm.check(transA, transB, m, n, k, a, aOff, lda, b, bOff, ldb, c, cOff, ldc)) return;
        if (k == 0) {
            Gemm.scaleC(m, n, beta, c, cOff, ldc);
            return;
        }
        OpenBlas.cblas_sgemm(OpenBlas.ROW_MAJOR, transA ? OpenBlas.TRANS : OpenBlas.NO_TRANS,
                transB ? OpenBlas.TRANS : OpenBlas.NO_TRANS, m, n, k, alpha,
                a.address + 4L * aOff, lda, b.address + 4L * bOff, ldb, beta, c.address + 4L * cOff, ldc);
    }
}

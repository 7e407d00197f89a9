package dev.ttpipe.device.cpu;

/**
 * {@link Gemm} through oneDNN's {@code dnnl_sgemm} ({@link Dnnl}), threaded as {@link BlasGemm} is: one
 * single-threaded call per tile of C, the tiles a function of the shape alone, so the bits do not depend
 * on the thread count. Chosen with {@code -Dttpipe.blas=dnnl} (or {@code TTPIPE_BLAS=dnnl}); compare it
 * with OpenBLAS per shape with {@code ttpipe bench matmul --kernel dnnl}.
 */
final class DnnlGemm implements Gemm {
    private final Parallel parallel;

    private DnnlGemm(Parallel parallel) {
        this.parallel = parallel;
    }

    /** oneDNN tiled over {@code parallel}'s threads, or null if the library does not load. */
    static DnnlGemm tryLoad(Parallel parallel) {
        return Dnnl.load() ? new DnnlGemm(parallel) : null;
    }

    @Override
    public String kind() {
        return "dnnl";
    }

    @Override
    public String describe() {
        return Dnnl.describe() + ", dnnl_sgemm: single-threaded calls on tiles of C up to " + BlasGemm.TILE_M + "x"
                + BlasGemm.TILE_N + " over " + parallel.threadsInWords();
    }

    @Override
    public void sgemm(boolean transA, boolean transB, int m, int n, int k, float alpha,
                      NativeBuffer a, int aOff, int lda, NativeBuffer b, int bOff, int ldb,
                      float beta, NativeBuffer c, int cOff, int ldc) {
        BlasGemm.tiledSgemm(parallel, transA, transB, m, n, k, alpha, a, aOff, lda, b, bOff, ldb, beta, c, cOff, ldc, Dnnl::sgemm);
    }

    @Override
    public BlasGemm.TileCall tileCall(boolean transA, boolean transB, int m, int n, int k) {
        return Dnnl::sgemm;
    }
}

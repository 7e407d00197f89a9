package dev.ttpipe.device.cpu;

/**
 * {@link Gemm} that runs each product on the engine a {@link MatmulTable} names for its shape: oneDNN's
 * {@code dnnl_sgemm} where the table says {@code dnnl}, OpenBLAS where it says {@code blas}, and the default
 * engine ({@link GemmChoice}) for a shape it does not list or whose engine does not load. Every engine is tiled
 * by the shape alone ({@link BlasGemm#tiles}), so a shape's bits depend on the table, never on threads or load.
 */
final class PerShapeGemm implements Gemm {
    private final Gemm unlisted;
    private final Gemm blas;
    private final Gemm dnnl;
    private final MatmulTable table;

    /** {@code blas} and {@code dnnl} are null where they do not load; their shapes then run on {@code unlisted}. */
    PerShapeGemm(Gemm unlisted, Gemm blas, Gemm dnnl, MatmulTable table) {
        this.unlisted = unlisted;
        this.blas = blas;
        this.dnnl = dnnl;
        this.table = table;
    }

    @Override
    public String kind() {
        return "table";
    }

    @Override
    public String describe() {
        long toDnnl = table.dnnlShapes(), toBlas = table.rows().size() - toDnnl;
        return "per shape from the matmul table " + table.file() + " (sha256 " + table.sha256() + "): "
                + toDnnl + " of its " + table.rows().size() + " shapes on " + (dnnl == null ? "oneDNN, which does not load (" + Dnnl.failure() + "), so on the default" : "oneDNN")
                + ", " + toBlas + " on " + (blas == null ? "OpenBLAS, which does not load (" + OpenBlas.failure() + "), so on the default" : blas.describe())
                + "; the default, for shapes it does not list: " + unlisted.describe();
    }

    @Override
    public void sgemm(boolean transA, boolean transB, int m, int n, int k, float alpha,
                      NativeBuffer a, int aOff, int lda, NativeBuffer b, int bOff, int ldb,
                      float beta, NativeBuffer c, int cOff, int ldc) {
        engineFor(transA, transB, m, n, k).sgemm(transA, transB, m, n, k, alpha, a, aOff, lda, b, bOff, ldb, beta, c, cOff, ldc);
    }

    @Override
    public BlasGemm.TileCall tileCall(boolean transA, boolean transB, int m, int n, int k) {
        return engineFor(transA, transB, m, n, k).tileCall(transA, transB, m, n, k);
    }

    private Gemm engineFor(boolean transA, boolean transB, int m, int n, int k) {
        String engine = table.engine(transA, transB, m, n, k);
        return "dnnl".equals(engine) && dnnl != null ? dnnl : "blas".equals(engine) && blas != null ? blas : unlisted;
    }
}

package dev.ttpipe.device.cpu;

/**
 * {@link Gemm} that runs each product on the engine a {@link MatmulTable} names for its shape: oneDNN's
 * {@code dnnl_sgemm} where the table says {@code dnnl}, else the fallback (OpenBLAS, or the pure-JVM kernel where
 * OpenBLAS does not load). Both engines are tiled by the shape alone ({@link BlasGemm#tiles}), so a shape's bits
 * depend on the table, never on threads or load.
 */
final class PerShapeGemm implements Gemm {
    private final Gemm fallback;
    private final Gemm dnnl;
    private final MatmulTable table;
    /** Why no product runs on oneDNN although the table names some (null when it loads or the table names none). */
    private final String whyNotDnnl;

    PerShapeGemm(Gemm fallback, Gemm dnnl, MatmulTable table, String whyNotDnnl) {
        this.fallback = fallback;
        this.dnnl = dnnl;
        this.table = table;
        this.whyNotDnnl = whyNotDnnl;
    }

    @Override
    public String kind() {
        return "table";
    }

    @Override
    public String describe() {
        long toDnnl = table.dnnlShapes();
        String per = dnnl == null
                ? "every shape on " + fallback.kind() + " (" + (whyNotDnnl == null ? "the table names no dnnl shape" : whyNotDnnl) + ")"
                : toDnnl + " of its " + table.rows().size() + " shapes on " + dnnl.describe() + "; the others and shapes it does not"
                + " list on " + fallback.describe();
        return "per shape from the matmul table " + table.file() + " (sha256 " + table.sha256() + "): " + per;
    }

    @Override
    public void sgemm(boolean transA, boolean transB, int m, int n, int k, float alpha,
                      NativeBuffer a, int aOff, int lda, NativeBuffer b, int bOff, int ldb,
                      float beta, NativeBuffer c, int cOff, int ldc) {
        Gemm g = dnnl != null && table.dnnl(transA, transB, m, n, k) ? dnnl : fallback;
        g.sgemm(transA, transB, m, n, k, alpha, a, aOff, lda, b, bOff, ldb, beta, c, cOff, ldc);
    }
}

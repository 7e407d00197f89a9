package dev.ttpipe.device.cpu;

/**
 * {@link Gemm} through OpenBLAS's {@code cblas_sgemm} on native addresses, with the threading
 * done by ttpipe, not by OpenBLAS.
 *
 * <p>OpenBLAS is told once, when it loads, to run every call on the calling thread
 * ({@code openblas_set_num_threads(1)}), and never told otherwise. A product is cut into tiles of C,
 * at most {@value #TILE_M} x {@value #TILE_N}, and each tile is one single-threaded
 * {@code cblas_sgemm} on the mesh's pool. The tiles are a function of (m, n, k) alone, so every
 * element of C is computed by the same single-threaded call on the same operands whatever the
 * thread count: the bits cannot depend on how many threads a rank has, nor on which thread ran a
 * tile. (OpenBLAS's own threading gives no such promise: on some CPUs a product has other bits on
 * one thread than on two.) Products of fewer than {@value #SMALL_FLOPS} multiply-adds are one call;
 * those of {@value #SPLIT_FLOPS} or more are at least {@value #MIN_TILES} tiles where their sides allow.
 * Calls from inside the pool (FlashAttention's per-head products) run their tiles inline.
 * Thread-safe: concurrent calls from several meshes' pools each run on their own threads.
 */
final class BlasGemm implements Gemm {
    /** The most rows of C in one call. */
    static final int TILE_M = 512;
    /** The most columns of C in one call. */
    static final int TILE_N = 1024;
    /** Below this many multiply-adds (m n k) a product is one call: splitting it would cost more than it saves. */
    static final long SMALL_FLOPS = 1L << 21;

    private final Parallel parallel;

    private BlasGemm(Parallel parallel) {
        this.parallel = parallel;
    }

    /** OpenBLAS tiled over {@code parallel}'s threads, or null if the library does not load. */
    static BlasGemm tryLoad(Parallel parallel) {
        if (!OpenBlas.load()) return null;
        return new BlasGemm(parallel);
    }

    @Override
    public String kind() {
        return "blas";
    }

    @Override
    public String describe() {
        String forced = System.getenv("OPENBLAS_CORETYPE");     // read by OpenBLAS when it loads, over its own detection
        return "OpenBLAS (" + OpenBlas.openblas_get_corename()
                + (forced == null || forced.isBlank() ? "" : " kernels, as OPENBLAS_CORETYPE=" + forced.trim() + " in the environment asks")
                + ", single-threaded calls on tiles of C up to "
                + TILE_M + "x" + TILE_N + " over " + parallel.threadsInWords() + "; "
                + OpenBlas.openblas_get_config().trim() + ") from " + OpenBlas.loadedFrom();
    }

    /**
     * A product of at least this many multiply-adds is cut into at least {@value #MIN_TILES} tiles when its
     * sides allow (tiles of 64 or more), so that a product with a small C and a long k (a weight gradient,
     * {@code dy^T x}) does not run on one thread.
     */
    static final long SPLIT_FLOPS = 1L << 25;
    static final int MIN_TILES = 4;

    /** Rows of C per tile (the tiles depend on the shape only, never on threads): all of them for a small product, else at most {@value #TILE_M}, even. */
    static int tileRows(int m, int n, int k) {
        return (long) m * n * k < SMALL_FLOPS ? m : even(m, (m + rowPieces(m, n, k) - 1) / rowPieces(m, n, k));
    }

    /** Columns of C per tile: all of them for a small product, else at most {@value #TILE_N}, even. */
    static int tileCols(int m, int n, int k) {
        return (long) m * n * k < SMALL_FLOPS ? n : even(n, (n + colPieces(m, n, k) - 1) / colPieces(m, n, k));
    }

    /** How many pieces the rows are cut into: by {@value #TILE_M}, then more for {@link #MIN_TILES}. */
    private static int rowPieces(int m, int n, int k) {
        return (int) (pieces(m, n, k) >>> 32);
    }

    private static int colPieces(int m, int n, int k) {
        return (int) pieces(m, n, k);
    }

    /** Row pieces (high 32 bits) and column pieces (low): the longer tile side is cut first, never below 64. */
    private static long pieces(int m, int n, int k) {
        int rp = (m + TILE_M - 1) / TILE_M, cp = (n + TILE_N - 1) / TILE_N;
        if ((long) m * n * k >= SPLIT_FLOPS) {
            while ((long) rp * cp < MIN_TILES) {
                boolean rowsCan = m / (rp + 1) >= 64, colsCan = n / (cp + 1) >= 64;
                if (rowsCan && (!colsCan || m / rp >= n / cp)) rp++;
                else if (colsCan) cp++;
                else break;
            }
        }
        return ((long) rp << 32) | cp;
    }

    /** {@code length} cut into as few pieces of at most {@code most} as can be, of equal length (a multiple of 16). */
    static int even(int length, int most) {
        int pieces = (length + most - 1) / most;
        int piece = (length + pieces - 1) / pieces;
        return Math.min(length, (piece + 15) / 16 * 16);
    }

    @Override
    public void sgemm(boolean transA, boolean transB, int m, int n, int k, float alpha,
                      NativeBuffer a, int aOff, int lda, NativeBuffer b, int bOff, int ldb,
                      float beta, NativeBuffer c, int cOff, int ldc) {
        tiledSgemm(parallel, transA, transB, m, n, k, alpha, a, aOff, lda, b, bOff, ldb, beta, c, cOff, ldc, BlasGemm::call);
    }

    @Override
    public TileCall tileCall(boolean transA, boolean transB, int m, int n, int k) {
        return BlasGemm::call;
    }

    /** One single-threaded GEMM call on addresses, row-major, as the engines' C functions take it. */
    interface TileCall {
        void call(boolean transA, boolean transB, int m, int n, int k, float alpha, long a, int lda, long b, int ldb,
                  float beta, long c, int ldc);
    }

    /** One tile of C: rows {@code i0..i0+rows} and columns {@code j0..j0+cols}. */
    interface TileBody {
        void tile(int i0, int j0, int rows, int cols);
    }

    /** An fp32 product through {@code call}: the bounds checked, k = 0 handled, then {@link #tiles}. */
    static void tiledSgemm(Parallel parallel, boolean transA, boolean transB, int m, int n, int k, float alpha,
                           NativeBuffer a, int aOff, int lda, NativeBuffer b, int bOff, int ldb,
                           float beta, NativeBuffer c, int cOff, int ldc, TileCall call) {
        if (!Gemm.check(transA, transB, m, n, k, a, aOff, lda, b, bOff, ldb, c, cOff, ldc)) return;
        MatmulShapes.note(transA, transB, m, n, k);
        if (k == 0) {
            Gemm.scaleC(m, n, beta, c, cOff, ldc);
            return;
        }
        tiles(parallel, transA, transB, m, n, k, alpha, a.address + 4L * aOff, lda, 4, b.address + 4L * bOff, ldb, 4, beta,
                c.address + 4L * cOff, ldc, call);
    }

    /**
     * Cuts C [m, n] into the tiles of {@link #tileRows} x {@link #tileCols} (a function of the shape alone)
     * and makes one {@code call} per tile over {@code parallel}'s threads; a single tile runs on the calling
     * thread. {@code aBytes}, {@code bBytes}: bytes per element of A and B (4 for
     * fp32, 2 for bf16); C is fp32.
     */
    static void tiles(Parallel parallel, boolean transA, boolean transB, int m, int n, int k, float alpha, long a, int lda,
                      int aBytes, long b, int ldb, int bBytes, float beta, long c, int ldc, TileCall call) {
        eachTile(parallel, m, n, k, (i0, j0, rows, cols) ->
                call.call(transA, transB, rows, cols, k, alpha, tileOfA(a, aBytes, lda, transA, i0), lda,
                        tileOfB(b, bBytes, ldb, transB, j0), ldb, beta, c + 4L * ((long) i0 * ldc + j0), ldc));
    }

    /**
     * {@code body} once per tile of C [m, n] ({@link #tileRows} x {@link #tileCols}, a function of the shape alone), over
     * {@code parallel}'s threads; a single tile runs on the calling thread.
     */
    static void eachTile(Parallel parallel, int m, int n, int k, TileBody body) {
        eachTile(parallel, m, n, tileRows(m, n, k), tileCols(m, n, k), body);
    }

    /** {@code body} once per tile of {@code tm x tn} of C [m, n] (the last row and column of tiles shorter), as above. */
    static void eachTile(Parallel parallel, int m, int n, int tm, int tn, TileBody body) {
        int tilesM = (m + tm - 1) / tm, tilesN = (n + tn - 1) / tn;
        if (tilesM * tilesN == 1) {
            body.tile(0, 0, m, n);
            return;
        }
        parallel.range(tilesM * tilesN, 1, (lo, hi) -> {
            for (int t = lo; t < hi; t++) {
                int i0 = (t / tilesN) * tm, j0 = (t % tilesN) * tn;
                body.tile(i0, j0, Math.min(tm, m - i0), Math.min(tn, n - j0));
            }
        });
    }

    /** Where op(A)'s rows from i0 start: A [m, k] row-major, or [k, m] when transposed. */
    static long tileOfA(long a, int aBytes, int lda, boolean transA, int i0) {
        return a + (long) aBytes * (transA ? i0 : (long) i0 * lda);
    }

    /** Where op(B)'s columns from j0 start: B [k, n] row-major, or [n, k] when transposed. */
    static long tileOfB(long b, int bBytes, int ldb, boolean transB, int j0) {
        return b + (long) bBytes * (transB ? (long) j0 * ldb : j0);
    }

    private static void call(boolean transA, boolean transB, int m, int n, int k, float alpha, long a, int lda,
                             long b, int ldb, float beta, long c, int ldc) {
        OpenBlas.cblas_sgemm(OpenBlas.ROW_MAJOR, transA ? OpenBlas.TRANS : OpenBlas.NO_TRANS,
                transB ? OpenBlas.TRANS : OpenBlas.NO_TRANS, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
}

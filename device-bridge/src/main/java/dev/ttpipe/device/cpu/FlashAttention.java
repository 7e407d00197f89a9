package dev.ttpipe.device.cpu;

import java.nio.FloatBuffer;

/**
 * Fused scaled dot-product attention on one device's pieces, q [n, T, hd], k and v [n, Tk, hd]
 * (n = batch x heads): one (batch, head) at a time on one thread, parallel over them, in blocks of
 * {@value #BLOCK} query rows. A block's scores are one small matmul into a [BLOCK, keys] tile that
 * stays in cache, over only the keys its last row sees (causal: key j for query i when
 * j <= i + Tk - T), so the masked part of the [T, Tk] scores is skipped block by block and no
 * [T, Tk] tensor is ever written. Forward keeps the rows' log-sum-exp; backward recomputes the
 * probabilities from it (FlashAttention's recipe), with dK and dV accumulated over the blocks.
 *
 * <p>The tile products go through the mesh's {@link Gemm}. With OpenBLAS they run single-threaded,
 * one per pool thread (the (batch, head) pairs are the parallelism), instead of splitting each small
 * product over threads that must meet after it.
 *
 * <p>Deterministic: every output element is computed by one thread in a fixed order, whatever the
 * thread count and however the leading dimension is split.
 */
final class FlashAttention {
    /** Query rows per block. */
    static final int BLOCK = 64;

    private FlashAttention() {
    }

    /** The number of keys query row {@code i} sees. */
    private static int seen(int i, int t, int tk, boolean causal) {
        return causal ? Math.max(0, Math.min(tk, i + tk - t + 1)) : tk;
    }

    /** Runs {@code body} over the n pairs on the pool, OpenBLAS single-threaded meanwhile (each pool thread calls it). */
    private static void pairs(Parallel par, Gemm gemm, int n, Parallel.Body body) {
        boolean blas = gemm instanceof BlasGemm && par.threads() > 1;
        if (blas) BlasGemm.setThreads(1);
        try {
            par.range(n, 1, body);
        } finally {
            if (blas) BlasGemm.setThreads(par.threads());
        }
    }

    /**
     * o = softmax(scale q k^T) v per leading index; lse [n, T] = the rows' log(sum(exp(scale s))) (a row
     * that sees no key: o = 0, lse = -inf).
     */
    static void forward(Parallel par, Gemm gemm, NativeBuffer o, NativeBuffer lse, NativeBuffer q, NativeBuffer k,
                        NativeBuffer v, int n, int t, int tk, int hd, float scale, boolean causal) {
        pairs(par, gemm, n, (lo, hi) -> {
            NativeBuffer s = NativeBuffer.malloc(4 * BLOCK * Math.max(1, tk));
            float[] row = new float[tk];
            try {
                for (int bh = lo; bh < hi; bh++) {
                    int qb = bh * t * hd, kb = bh * tk * hd;
                    for (int i0 = 0; i0 < t; i0 += BLOCK) {
                        int rows = Math.min(BLOCK, t - i0);
                        int keys = seen(i0 + rows - 1, t, tk, causal);
                        // S = scale Q_blk K[0:keys]^T   [rows, keys]
                        gemm.sgemm(false, true, rows, keys, hd, scale, q, qb + i0 * hd, hd, k, kb, hd, 0f, s, 0, Math.max(1, keys));
                        for (int r = 0; r < rows; r++) {
                            int i = i0 + r;
                            lse.floats.put(bh * t + i, softmaxRow(s.floats, r * keys, row, seen(i, t, tk, causal), keys));
                        }
                        // O_blk = P V[0:keys]   [rows, hd]
                        gemm.sgemm(false, false, rows, hd, keys, 1f, s, 0, Math.max(1, keys), v, kb, hd, 0f, o, qb + i0 * hd, hd);
                    }
                }
            } finally {
                s.free();
            }
        });
    }

    /**
     * dq, dk, dv of {@link #forward} given dO, its output o and lse: P recomputed from q, k and lse,
     * D_i = dO_i . o_i, dV = P^T dO, dS = scale P (dO V^T - D), dQ = dS K, dK = dS^T Q. The blocks run
     * last to first: the last sees every key (causal or not), so it initialises dK and dV and the others add to them.
     */
    static void backward(Parallel par, Gemm gemm, NativeBuffer dq, NativeBuffer dk, NativeBuffer dv, NativeBuffer q,
                         NativeBuffer k, NativeBuffer v, NativeBuffer o, NativeBuffer lse, NativeBuffer dO, int n, int t,
                         int tk, int hd, float scale, boolean causal) {
        pairs(par, gemm, n, (lo, hi) -> {
            int tile = 4 * BLOCK * Math.max(1, tk);
            NativeBuffer p = NativeBuffer.malloc(tile);
            NativeBuffer ds = NativeBuffer.malloc(tile);
            float[] pr = new float[tk];
            float[] dr = new float[tk];
            try {
                for (int bh = lo; bh < hi; bh++) {
                    int qb = bh * t * hd, kb = bh * tk * hd;
                    boolean first = true;
                    for (int i0 = (t - 1) / BLOCK * BLOCK; i0 >= 0; i0 -= BLOCK) {
                        int rows = Math.min(BLOCK, t - i0);
                        int keys = seen(i0 + rows - 1, t, tk, causal);
                        int ld = Math.max(1, keys);
                        gemm.sgemm(false, true, rows, keys, hd, scale, q, qb + i0 * hd, hd, k, kb, hd, 0f, p, 0, ld);
                        gemm.sgemm(false, true, rows, keys, hd, 1f, dO, qb + i0 * hd, hd, v, kb, hd, 0f, ds, 0, ld);
                        for (int r = 0; r < rows; r++) {
                            int i = i0 + r;
                            int m = seen(i, t, tk, causal);
                            p.floats.get(r * keys, pr, 0, keys);
                            ds.floats.get(r * keys, dr, 0, keys);
                            float l = lse.floats.get(bh * t + i);
                            double dd = 0;
                            for (int e = 0; e < hd; e++) dd += (double) dO.floats.get(qb + i * hd + e) * o.floats.get(qb + i * hd + e);
                            float d = (float) dd;
                            for (int j = 0; j < m; j++) {
                                float pj = FloatExp.exp(pr[j] - l);
                                pr[j] = pj;
                                dr[j] = scale * pj * (dr[j] - d);
                            }
                            for (int j = m; j < keys; j++) {
                                pr[j] = 0f;
                                dr[j] = 0f;
                            }
                            p.floats.put(r * keys, pr, 0, keys);
                            ds.floats.put(r * keys, dr, 0, keys);
                        }
                        float beta = first ? 0f : 1f;
                        // dV[0:keys] (+)= P^T dO_blk, dK[0:keys] (+)= dS^T Q_blk, dQ_blk = dS K[0:keys]
                        gemm.sgemm(true, false, keys, hd, rows, 1f, p, 0, ld, dO, qb + i0 * hd, hd, beta, dv, kb, hd);
                        gemm.sgemm(true, false, keys, hd, rows, 1f, ds, 0, ld, q, qb + i0 * hd, hd, beta, dk, kb, hd);
                        gemm.sgemm(false, false, rows, hd, keys, 1f, ds, 0, ld, k, kb, hd, 0f, dq, qb + i0 * hd, hd);
                        first = false;
                    }
                }
            } finally {
                p.free();
                ds.free();
            }
        });
    }

    /**
     * One row of the tile, {@code s[at, at + keys)}, to probabilities in place: exp(s_j - max) / sum for
     * j < m, 0 after; returns the row's log-sum-exp (-inf when it sees no key).
     */
    private static float softmaxRow(FloatBuffer s, int at, float[] row, int m, int keys) {
        s.get(at, row, 0, keys);
        float max = Float.NEGATIVE_INFINITY;
        for (int j = 0; j < m; j++) max = Math.max(max, row[j]);
        double sum = 0;
        for (int j = 0; j < m; j++) {
            float e = FloatExp.exp(row[j] - max);
            row[j] = e;
            sum += e;
        }
        float inv = (float) (1.0 / sum);
        for (int j = 0; j < m; j++) row[j] *= inv;
        for (int j = m; j < keys; j++) row[j] = 0f;
        s.put(at, row, 0, keys);
        return m == 0 ? Float.NEGATIVE_INFINITY : max + (float) Math.log(sum);
    }
}

package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DeviceException;

import java.nio.DoubleBuffer;
import java.nio.FloatBuffer;
import java.util.Arrays;

/**
 * Fused scaled dot-product attention on one device's pieces, q [n, T, hd], k and v [n, Tk, hd]
 * (n = batch x heads): one (batch, head) at a time on one thread, parallel over them, in blocks of
 * {@value #BLOCK} query rows. A block's scores are one small matmul into a [BLOCK, keys] tile that
 * stays in cache, over only the keys its last row sees (causal: key j for query i when
 * j <= i + Tk - T), so the masked part of the [T, Tk] scores is skipped block by block and no
 * [T, Tk] tensor is ever written. Forward keeps the rows' log-sum-exp; backward recomputes the
 * probabilities from it (FlashAttention's recipe), with dK and dV accumulated over the blocks.
 *
 * <p>The tile products go through the mesh's {@link Gemm}, or on bf16 pieces its {@link Bf16Gemm} ({@link #forwardBf16},
 * {@link #backwardBf16}: bf16 operands, fp32 sums, as a device's bf16 attention). Called from a pool thread, they run on it
 * (the (batch, head) pairs are the parallelism), instead of splitting each small product over threads
 * that must meet after it.
 *
 * <p>Deterministic: every output element is computed by one thread in a fixed order, whatever the
 * thread count and however the leading dimension is split.
 */
final class FlashAttention {
    /** Query rows per block (ATT_BLOCK of ttpipe_cpu.c's fused attention). */
    static final int BLOCK = 64;

    private FlashAttention() {
    }

    /** The number of keys query row {@code i} sees. */
    private static int seen(int i, int t, int tk, boolean causal) {
        return causal ? Math.max(0, Math.min(tk, i + tk - t + 1)) : tk;
    }

    /** A tile product, {@link Gemm#sgemm}'s signature: the fp32 kernel, or the bf16 one on bf16 operands. */
    @FunctionalInterface
    private interface Product {
        void run(boolean transA, boolean transB, int m, int n, int k, float alpha, NativeBuffer a, int aOff, int lda,
                 NativeBuffer b, int bOff, int ldb, float beta, NativeBuffer c, int cOff, int ldc);
    }

    /**
     * o = softmax(scale q k^T) v per leading index; lse [n, T] = the rows' log(sum(exp(scale s))) (a row
     * that sees no key: o = 0, lse = -inf). q, k, v and o are fp32.
     */
    static void forward(Parallel par, Gemm gemm, NativeBuffer o, NativeBuffer lse, NativeBuffer q, NativeBuffer k,
                        NativeBuffer v, int n, int t, int tk, int hd, float scale, boolean causal) {
        forward(par, gemm::sgemm, false, o, lse, q, k, v, n, t, tk, hd, scale, causal);
    }

    /**
     * {@link #forward} on bf16 q, k, v and o, as a device's bf16 attention runs: the tile products are bf16 x bf16
     * with fp32 sums ({@link Bf16Gemm}, whose operands must be {@linkplain Bf16Gemm#packedOperands packed}), the
     * softmax and lse in fp32, P rounded to bf16 before P V, each block of o rounded once.
     */
    static void forwardBf16(Parallel par, Bf16Gemm gemm, NativeBuffer o, NativeBuffer lse, NativeBuffer q, NativeBuffer k,
                            NativeBuffer v, int n, int t, int tk, int hd, float scale, boolean causal) {
        forwardBf16(par, gemm, o, lse, q, k, v, n, t, tk, hd, scale, causal, true);
    }

    /**
     * {@link #forwardBf16}; with {@code fuse}, on ttpipe's own engines (fma, dot), in one native call per range of
     * (batch, head) pairs ({@code ttpipe_cpu_attention_forward_bf16}: the same products, rows and roundings, so the same
     * bits, with each pair's K and V packed once instead of once a block).
     */
    static void forwardBf16(Parallel par, Bf16Gemm gemm, NativeBuffer o, NativeBuffer lse, NativeBuffer q, NativeBuffer k,
                            NativeBuffer v, int n, int t, int tk, int hd, float scale, boolean causal, boolean fuse) {
        if (!gemm.packedOperands()) throw new IllegalStateException("bf16 attention needs a bf16 GEMM on bf16 operands");
        int dot = fuse && CpuNative.active() ? gemm.ownEngine() : -1;
        if (dot < 0) {
            forward(par, gemm::gemm, true, o, lse, q, k, v, n, t, tk, hd, scale, causal);
            return;
        }
        checkAddressable(true, o, lse, q, k, v, n, t, tk, hd);
        par.range(n, 1, (lo, hi) -> {
            int rows = (hi - lo) * t;
            NativeBuffer stats = NativeBuffer.malloc(12 * rows);          // the rows' sums (double), then maxima (float)
            try {
                fused("forward", CpuNative.ttpipe_cpu_attention_forward_bf16(dot, lo, hi, q.address, k.address, v.address,
                        o.address, stats.address + 8L * rows, stats.address, t, tk, hd, scale, causal ? 1 : 0));
                DoubleBuffer sums = stats.bytes.asDoubleBuffer();
                for (int bh = lo; bh < hi; bh++) {
                    for (int i = 0; i < t; i++) {
                        int at = (bh - lo) * t + i;
                        lse.floats.put(bh * t + i, seen(i, t, tk, causal) == 0 ? Float.NEGATIVE_INFINITY
                                : stats.floats.get(2 * rows + at) + (float) Math.log(sums.get(at)));
                    }
                }
            } finally {
                stats.free();
            }
        });
    }

    /** Throws unless {@code rc}, what a fused native attention pass returned, is 0. */
    private static void fused(String pass, int rc) {
        if (rc != 0) {
            throw new DeviceException("bf16 attention " + pass + " (ttpipe's fused kernel) failed: "
                    + (rc == -1 ? "its scratch could not be allocated" : "its GEMM engine does not run on this CPU"));
        }
    }

    private static void forward(Parallel par, Product mul, boolean bf16, NativeBuffer o, NativeBuffer lse, NativeBuffer q,
                                NativeBuffer k, NativeBuffer v, int n, int t, int tk, int hd, float scale, boolean causal) {
        boolean nat = CpuNative.active();
        checkAddressable(bf16, o, lse, q, k, v, n, t, tk, hd);
        par.range(n, 1, (lo, hi) -> {
            NativeBuffer s = NativeBuffer.malloc(4 * BLOCK * Math.max(1, tk));
            NativeBuffer stats = NativeBuffer.malloc(12 * BLOCK);         // the rows' max (float) and sum (double)
            NativeBuffer pb = bf16 ? NativeBuffer.malloc(2 * BLOCK * Math.max(1, tk)) : s;   // P rounded to bf16
            NativeBuffer ob = bf16 ? NativeBuffer.malloc(4 * BLOCK * hd) : o;                // a block of o's fp32 sums
            DoubleBuffer sums = stats.bytes.asDoubleBuffer();
            float[] max = new float[BLOCK];
            double[] sum = new double[BLOCK];
            float[] row = new float[tk];
            try {
                for (int bh = lo; bh < hi; bh++) {
                    int qb = bh * t * hd, kb = bh * tk * hd;
                    for (int i0 = 0; i0 < t; i0 += BLOCK) {
                        int rows = Math.min(BLOCK, t - i0);
                        int keys = seen(i0 + rows - 1, t, tk, causal);
                        int first = i0 + tk - t + 1;                   // keys row i0 sees, before clamping
                        int ld = Math.max(1, keys);
                        // S = scale Q_blk K[0:keys]^T   [rows, keys]
                        mul.run(false, true, rows, keys, hd, scale, q, qb + i0 * hd, hd, k, kb, hd, 0f, s, 0, ld);
                        if (nat && bf16) {                             // P rounded into pb in the same pass
                            CpuNative.ttpipe_cpu_softmax_rows_bf16(s.address, pb.address, rows, keys, first, causal ? 1 : 0,
                                    stats.address + 8L * BLOCK, stats.address);
                        } else if (nat) {
                            CpuNative.ttpipe_cpu_softmax_rows(s.address, rows, keys, first, causal ? 1 : 0,
                                    stats.address + 8L * BLOCK, stats.address);
                        } else {
                            softmaxRows(s.floats, rows, keys, first, causal, row, max, sum);
                            if (bf16) Convert.sumsToBf16(pb, s, 0, ld, rows, keys, null, 0);
                        }
                        if (nat) {
                            sums.get(0, sum, 0, rows);
                            stats.floats.get(2 * BLOCK, max, 0, rows);
                        }
                        for (int r = 0; r < rows; r++) {
                            int m = seen(i0 + r, t, tk, causal);
                            lse.floats.put(bh * t + i0 + r, m == 0 ? Float.NEGATIVE_INFINITY : max[r] + (float) Math.log(sum[r]));
                        }
                        // O_blk = P V[0:keys]   [rows, hd]
                        int at = bf16 ? 0 : qb + i0 * hd;
                        mul.run(false, false, rows, hd, keys, 1f, pb, 0, ld, v, kb, hd, 0f, ob, at, hd);
                        if (bf16) Convert.floatToBf16(o, qb + i0 * hd, ob, 0, rows * hd);
                    }
                }
            } finally {
                s.free();
                stats.free();
                if (bf16) {
                    pb.free();
                    ob.free();
                }
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
        backward(par, gemm::sgemm, false, dq, dk, dv, q, k, v, o, lse, dO, n, t, tk, hd, scale, causal);
    }

    /**
     * {@link #backward} on bf16 q, k, v, o, dO and gradients, as {@link #forwardBf16}: bf16 x bf16 tile products with
     * fp32 sums, P and D and dS in fp32, P and dS rounded to bf16 before the products that take them; dK and dV summed
     * over the blocks in fp32 and rounded once, each block of dQ rounded once.
     */
    static void backwardBf16(Parallel par, Bf16Gemm gemm, NativeBuffer dq, NativeBuffer dk, NativeBuffer dv, NativeBuffer q,
                             NativeBuffer k, NativeBuffer v, NativeBuffer o, NativeBuffer lse, NativeBuffer dO, int n, int t,
                             int tk, int hd, float scale, boolean causal) {
        backwardBf16(par, gemm, dq, dk, dv, q, k, v, o, lse, dO, n, t, tk, hd, scale, causal, true);
    }

    /** {@link #backwardBf16}; with {@code fuse}, fused as {@link #forwardBf16} ({@code ttpipe_cpu_attention_backward_bf16}). */
    static void backwardBf16(Parallel par, Bf16Gemm gemm, NativeBuffer dq, NativeBuffer dk, NativeBuffer dv, NativeBuffer q,
                             NativeBuffer k, NativeBuffer v, NativeBuffer o, NativeBuffer lse, NativeBuffer dO, int n, int t,
                             int tk, int hd, float scale, boolean causal, boolean fuse) {
        if (!gemm.packedOperands()) throw new IllegalStateException("bf16 attention needs a bf16 GEMM on bf16 operands");
        int dot = fuse && CpuNative.active() ? gemm.ownEngine() : -1;
        if (dot < 0) {
            backward(par, gemm::gemm, true, dq, dk, dv, q, k, v, o, lse, dO, n, t, tk, hd, scale, causal);
            return;
        }
        checkAddressable(true, o, lse, q, k, v, n, t, tk, hd);
        checkAddressable(true, dO, lse, q, k, v, n, t, tk, hd);
        checkAddressable(true, dq, lse, dq, dk, dv, n, t, tk, hd);
        par.range(n, 1, (lo, hi) -> fused("backward", CpuNative.ttpipe_cpu_attention_backward_bf16(dot, lo, hi, q.address,
                k.address, v.address, o.address, lse.address, dO.address, dq.address, dk.address, dv.address, t, tk, hd,
                scale, causal ? 1 : 0)));
    }

    private static void backward(Parallel par, Product mul, boolean bf16, NativeBuffer dq, NativeBuffer dk, NativeBuffer dv,
                                 NativeBuffer q, NativeBuffer k, NativeBuffer v, NativeBuffer o, NativeBuffer lse,
                                 NativeBuffer dO, int n, int t, int tk, int hd, float scale, boolean causal) {
        boolean nat = CpuNative.active();
        checkAddressable(bf16, o, lse, q, k, v, n, t, tk, hd);
        checkAddressable(bf16, dO, lse, q, k, v, n, t, tk, hd);
        checkAddressable(bf16, dq, lse, dq, dk, dv, n, t, tk, hd);
        par.range(n, 1, (lo, hi) -> {
            int tile = 4 * BLOCK * Math.max(1, tk);
            NativeBuffer p = NativeBuffer.malloc(tile);
            NativeBuffer ds = NativeBuffer.malloc(tile);
            // bf16: P and dS rounded; a block of dO and o widened; a block of dQ and all of dK and dV as fp32 sums
            NativeBuffer pb = bf16 ? NativeBuffer.malloc(tile / 2) : p, dsb = bf16 ? NativeBuffer.malloc(tile / 2) : ds;
            NativeBuffer rowsIn = bf16 && !nat ? NativeBuffer.malloc(2 * 4 * BLOCK * hd) : null;   // the Java rows' dO and o
            NativeBuffer dqb = bf16 ? NativeBuffer.malloc(4 * BLOCK * hd) : dq;
            NativeBuffer dkb = bf16 ? NativeBuffer.malloc(4 * Math.max(1, tk) * hd) : dk;
            NativeBuffer dvb = bf16 ? NativeBuffer.malloc(4 * Math.max(1, tk) * hd) : dv;
            float[] pr = new float[tk];
            float[] dr = new float[tk];
            try {
                for (int bh = lo; bh < hi; bh++) {
                    int qb = bh * t * hd, kb = bh * tk * hd, kAt = bf16 ? 0 : kb;
                    boolean first = true;
                    for (int i0 = (t - 1) / BLOCK * BLOCK; i0 >= 0; i0 -= BLOCK) {
                        int rows = Math.min(BLOCK, t - i0);
                        int keys = seen(i0 + rows - 1, t, tk, causal);
                        int ld = Math.max(1, keys);
                        mul.run(false, true, rows, keys, hd, scale, q, qb + i0 * hd, hd, k, kb, hd, 0f, p, 0, ld);
                        mul.run(false, true, rows, keys, hd, 1f, dO, qb + i0 * hd, hd, v, kb, hd, 0f, ds, 0, ld);
                        int seen0 = i0 + tk - t + 1;
                        if (nat && bf16) {                             // dO and o widened, P and dS rounded, in one pass
                            CpuNative.ttpipe_cpu_attention_backward_rows_bf16(p.address, ds.address, pb.address,
                                    dsb.address, rows, keys, seen0, causal ? 1 : 0, lse.address + 4L * (bh * t + i0),
                                    dO.address + 2L * (qb + i0 * hd), o.address + 2L * (qb + i0 * hd), hd, scale);
                        } else {
                            // the block's rows of dO and o as fp32: [rows, hd] each
                            NativeBuffer gIn = bf16 ? rowsIn : dO, yIn = bf16 ? rowsIn : o;
                            int gAt = bf16 ? 0 : qb + i0 * hd, yAt = bf16 ? BLOCK * hd : qb + i0 * hd;
                            if (bf16) {
                                Convert.bf16ToFloat(rowsIn, gAt, dO, qb + i0 * hd, rows * hd);
                                Convert.bf16ToFloat(rowsIn, yAt, o, qb + i0 * hd, rows * hd);
                            }
                            if (nat) {
                                CpuNative.ttpipe_cpu_attention_backward_rows(p.address, ds.address, rows, keys, seen0,
                                        causal ? 1 : 0, lse.address + 4L * (bh * t + i0), gIn.address + 4L * gAt,
                                        yIn.address + 4L * yAt, hd, scale);
                            } else {
                                backwardRows(p.floats, ds.floats, rows, keys, seen0, causal, lse.floats, bh * t + i0,
                                        gIn.floats, yIn.floats, gAt, yAt, hd, scale, pr, dr);
                            }
                            if (bf16) {
                                Convert.sumsToBf16(pb, p, 0, ld, rows, keys, null, 0);
                                Convert.sumsToBf16(dsb, ds, 0, ld, rows, keys, null, 0);
                            }
                        }
                        float beta = first ? 0f : 1f;
                        // dV[0:keys] (+)= P^T dO_blk, dK[0:keys] (+)= dS^T Q_blk, dQ_blk = dS K[0:keys]
                        mul.run(true, false, keys, hd, rows, 1f, pb, 0, ld, dO, qb + i0 * hd, hd, beta, dvb, kAt, hd);
                        mul.run(true, false, keys, hd, rows, 1f, dsb, 0, ld, q, qb + i0 * hd, hd, beta, dkb, kAt, hd);
                        mul.run(false, false, rows, hd, keys, 1f, dsb, 0, ld, k, kb, hd, 0f, dqb, bf16 ? 0 : qb + i0 * hd, hd);
                        if (bf16) Convert.floatToBf16(dq, qb + i0 * hd, dqb, 0, rows * hd);
                        first = false;
                    }
                    if (bf16) {
                        Convert.floatToBf16(dk, kb, dkb, 0, tk * hd);
                        Convert.floatToBf16(dv, kb, dvb, 0, tk * hd);
                    }
                }
            } finally {
                p.free();
                ds.free();
                if (bf16) {
                    pb.free();
                    dsb.free();
                    if (rowsIn != null) rowsIn.free();
                    dqb.free();
                    dkb.free();
                    dvb.free();
                }
            }
        });
    }

    /** The lanes of the rows' partial maxima and sums (element j goes to partial j % LANES), as in ttpipe_cpu.c. */
    static final int LANES = 16;

    /** Throws unless the buffers hold the shapes the native row kernels read without bounds checks. */
    private static void checkAddressable(boolean bf16, NativeBuffer o, NativeBuffer lse, NativeBuffer q, NativeBuffer k,
                                         NativeBuffer v, int n, int t, int tk, int hd) {
        long e = bf16 ? 2 : 4, qo = e * n * t * hd, kv = e * n * tk * hd;
        if (o.capacity < qo || q.capacity < qo || lse.capacity < 4L * n * t || k.capacity < kv || v.capacity < kv) {
            throw new IndexOutOfBoundsException("attention buffers smaller than [" + n + ", " + t + "/" + tk + ", " + hd + "]");
        }
    }

    /**
     * A block's tile {@code s [rows, keys]} to probabilities in place, row by row: row r sees
     * {@code clamp(first + r, 0, keys)} keys when causal (else all), exp(s_j - max) / sum for those, 0 after.
     * Each row's max goes to {@code max[r]}, its sum of exps (double) to {@code sum[r]}; the caller takes the log.
     * Exactly what {@code ttpipe_cpu_softmax_rows} computes.
     */
    static void softmaxRows(FloatBuffer s, int rows, int keys, int first, boolean causal, float[] row, float[] max,
                            double[] sum) {
        for (int r = 0; r < rows; r++) {
            int m = causal ? Math.max(0, Math.min(keys, first + r)) : keys;
            s.get(r * keys, row, 0, keys);
            float mr = Softmax.rowMax(row, m);
            double sr = Softmax.expSum(row, m, mr);                 // row[0..m) now holds the exps
            float inv = (float) (1.0 / sr);
            for (int j = 0; j < m; j++) row[j] *= inv;
            for (int j = m; j < keys; j++) row[j] = 0f;
            s.put(r * keys, row, 0, keys);
            max[r] = mr;
            sum[r] = sr;
        }
    }

    /**
     * The backward rows of a block: {@code p [rows, keys]} holds scale q k^T and becomes P = exp(p - lse),
     * {@code ds} holds dO v^T and becomes scale P (ds - D) with D = dO_i . o_i (double, LANES partials); keys a
     * row does not see become 0. Rows start at {@code lse[lseAt]}, {@code dO[dAt]} and {@code o[oAt]}. Exactly what
     * {@code ttpipe_cpu_attention_backward_rows} computes.
     */
    static void backwardRows(FloatBuffer p, FloatBuffer ds, int rows, int keys, int first, boolean causal, FloatBuffer lse,
                             int lseAt, FloatBuffer dO, FloatBuffer o, int dAt, int oAt, int hd, float scale, float[] pr,
                             float[] dr) {
        double[] acc = new double[LANES];
        for (int r = 0; r < rows; r++) {
            int m = causal ? Math.max(0, Math.min(keys, first + r)) : keys;
            p.get(r * keys, pr, 0, keys);
            ds.get(r * keys, dr, 0, keys);
            Arrays.fill(acc, 0.0);
            for (int e = 0; e < hd; e++) acc[e % LANES] += (double) dO.get(dAt + r * hd + e) * (double) o.get(oAt + r * hd + e);
            double dd = acc[0];
            for (int l = 1; l < LANES; l++) dd += acc[l];
            float d = (float) dd;
            float l0 = lse.get(lseAt + r);
            for (int j = 0; j < m; j++) {
                float pj = FloatExp.exp(pr[j] - l0);
                pr[j] = pj;
                dr[j] = scale * pj * (dr[j] - d);
            }
            for (int j = m; j < keys; j++) {
                pr[j] = 0f;
                dr[j] = 0f;
            }
            p.put(r * keys, pr, 0, keys);
            ds.put(r * keys, dr, 0, keys);
        }
    }
}

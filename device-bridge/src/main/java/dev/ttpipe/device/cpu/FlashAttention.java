package dev.ttpipe.device.cpu;

import java.nio.FloatBuffer;
import java.util.Arrays;

/**
 * Fused scaled dot-product attention on one device's pieces, q [n, T, hd], k and v [n, Tk, hd]
 * (n = batch x heads), one (batch, head) at a time on one thread, parallel over them. Scores are
 * formed one query row at a time in a row of scratch that stays in L1, only over the keys the row
 * sees (causal: key j for query i when j <= i + Tk - T), so the masked half is never computed and no
 * [T, Tk] tensor is written. Forward keeps the rows' log-sum-exp; backward recomputes the
 * probabilities from it (FlashAttention's recipe). Inputs are copied to heap scratch (K and V also
 * transposed) so the inner loops are unit-stride array loops the JIT vectorises.
 *
 * <p>Deterministic: every output element is computed by one thread in a fixed order, whatever the
 * thread count and however the leading dimension is split.
 */
final class FlashAttention {
    private FlashAttention() {
    }

    /** The number of keys query row {@code i} sees. */
    private static int seen(int i, int t, int tk, boolean causal) {
        return causal ? Math.max(0, Math.min(tk, i + tk - t + 1)) : tk;
    }

    /**
     * o = softmax(scale q k^T) v per leading index; lse [n, T] = the rows' log(sum(exp(scale s))) (a row
     * that sees no key: o = 0, lse = -inf).
     */
    static void forward(Parallel par, FloatBuffer o, FloatBuffer lse, FloatBuffer q, FloatBuffer k, FloatBuffer v,
                        int n, int t, int tk, int hd, float scale, boolean causal) {
        par.range(n, 1, (lo, hi) -> {
            float[] qs = new float[t * hd];
            float[] kt = new float[hd * tk];                 // K^T: row e holds the keys' element e
            float[] vs = new float[tk * hd];
            float[] os = new float[t * hd];
            float[] s = new float[tk];
            float[] ls = new float[t];
            for (int bh = lo; bh < hi; bh++) {
                q.get(bh * t * hd, qs, 0, t * hd);
                v.get(bh * tk * hd, vs, 0, tk * hd);
                transpose(k, bh * tk * hd, kt, tk, hd);
                for (int i = 0; i < t; i++) {
                    int m = seen(i, t, tk, causal);
                    int row = i * hd;
                    if (m == 0) {
                        Arrays.fill(os, row, row + hd, 0f);
                        ls[i] = Float.NEGATIVE_INFINITY;
                        continue;
                    }
                    scores(s, qs, row, kt, tk, hd, m, scale);
                    float max = Float.NEGATIVE_INFINITY;
                    for (int j = 0; j < m; j++) max = Math.max(max, s[j]);
                    double sum = 0;
                    for (int j = 0; j < m; j++) {
                        float e = FloatExp.exp(s[j] - max);
                        s[j] = e;
                        sum += e;
                    }
                    float inv = (float) (1.0 / sum);
                    for (int j = 0; j < m; j++) s[j] *= inv;
                    ls[i] = max + (float) Math.log(sum);
                    Arrays.fill(os, row, row + hd, 0f);
                    for (int j = 0; j < m; j++) {                // o_i = sum_j p_j v_j
                        float p = s[j];
                        int vr = j * hd;
                        for (int e = 0; e < hd; e++) os[row + e] += p * vs[vr + e];
                    }
                }
                o.put(bh * t * hd, os, 0, t * hd);
                lse.put(bh * t, ls, 0, t);
            }
        });
    }

    /**
     * dq, dk, dv of {@link #forward} given dO, its output o and lse: P recomputed from q, k and lse,
     * D_i = dO_i . o_i, dV = P^T dO, dS = scale P (dO V^T - D), dQ = dS K, dK = dS^T Q.
     */
    static void backward(Parallel par, FloatBuffer dq, FloatBuffer dk, FloatBuffer dv, FloatBuffer q, FloatBuffer k,
                         FloatBuffer v, FloatBuffer o, FloatBuffer lse, FloatBuffer dO, int n, int t, int tk, int hd,
                         float scale, boolean causal) {
        par.range(n, 1, (lo, hi) -> {
            float[] qs = new float[t * hd];
            float[] ks = new float[tk * hd];
            float[] kt = new float[hd * tk];
            float[] vt = new float[hd * tk];
            float[] dos = new float[t * hd];
            float[] os = new float[t * hd];
            float[] ls = new float[t];
            float[] dqs = new float[t * hd];
            float[] dks = new float[tk * hd];
            float[] dvs = new float[tk * hd];
            float[] p = new float[tk];
            float[] ds = new float[tk];
            for (int bh = lo; bh < hi; bh++) {
                int qb = bh * t * hd, kb = bh * tk * hd;
                q.get(qb, qs, 0, t * hd);
                k.get(kb, ks, 0, tk * hd);
                dO.get(qb, dos, 0, t * hd);
                o.get(qb, os, 0, t * hd);
                lse.get(bh * t, ls, 0, t);
                transpose(k, kb, kt, tk, hd);
                transpose(v, kb, vt, tk, hd);
                Arrays.fill(dks, 0f);
                Arrays.fill(dvs, 0f);
                for (int i = 0; i < t; i++) {
                    int m = seen(i, t, tk, causal);
                    int row = i * hd;
                    Arrays.fill(dqs, row, row + hd, 0f);
                    if (m == 0) continue;
                    scores(p, qs, row, kt, tk, hd, m, scale);
                    float l = ls[i];
                    for (int j = 0; j < m; j++) p[j] = FloatExp.exp(p[j] - l);
                    scores(ds, dos, row, vt, tk, hd, m, 1f);     // dP_ij = dO_i . v_j
                    double dd = 0;
                    for (int e = 0; e < hd; e++) dd += (double) dos[row + e] * os[row + e];
                    float d = (float) dd;
                    for (int j = 0; j < m; j++) ds[j] = scale * p[j] * (ds[j] - d);
                    for (int j = 0; j < m; j++) {
                        float pj = p[j], sj = ds[j];
                        int kr = j * hd;
                        for (int e = 0; e < hd; e++) {
                            dvs[kr + e] += pj * dos[row + e];
                            dks[kr + e] += sj * qs[row + e];
                            dqs[row + e] += sj * ks[kr + e];
                        }
                    }
                }
                dq.put(qb, dqs, 0, t * hd);
                dk.put(kb, dks, 0, tk * hd);
                dv.put(kb, dvs, 0, tk * hd);
            }
        });
    }

    /** s[j] = scale * (x_row . kt[:, j]) for j < m, x_row = x[row, row + hd). */
    private static void scores(float[] s, float[] x, int row, float[] kt, int tk, int hd, int m, float scale) {
        Arrays.fill(s, 0, m, 0f);
        for (int e = 0; e < hd; e++) {
            float a = scale * x[row + e];
            int kr = e * tk;
            for (int j = 0; j < m; j++) s[j] += a * kt[kr + j];
        }
    }

    /** dst [hd, tk] = src[at..] viewed as [tk, hd], transposed. */
    private static void transpose(FloatBuffer src, int at, float[] dst, int tk, int hd) {
        for (int j = 0; j < tk; j++) {
            int r = at + j * hd;
            for (int e = 0; e < hd; e++) dst[e * tk + j] = src.get(r + e);
        }
    }
}

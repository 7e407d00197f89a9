package dev.ttpipe.stages;

import dev.ttpipe.device.AttentionGrads;
import dev.ttpipe.device.AttentionOutput;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.ReduceOp;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;

/**
 * Causal multi-head self-attention. GPT-2: q, k, v and output projections with biases. Llama:
 * no biases, rotary positions on q and k, and grouped-query attention (numKvHeads key/value heads,
 * each shared by numHeads / numKvHeads query heads). Qwen3: a Llama whose q and k are RMS-normalised
 * per head (gains q_norm, k_norm of size hd) before the rotary positions. The head size hd is the
 * model's ({@link ModelSpec#headDim()}), not necessarily D / H. Under tensor parallelism the heads are
 * split: q, k, v are column-parallel, the output projection row-parallel (Megatron).
 *
 * <pre>
 *   q, k, v = x Wq^T, x Wk^T, x Wv^T        [b, T, H*hd]  (k, v: [b, T, Hkv*hd])
 *   Q, K, V = heads(q, k, v)                [b, H, T, hd] (Qwen3: rmsnorm over hd on Q, K; then rope on Q, K;
 *                                                          K, V repeated per group)
 *   A = softmax(Q K^T / sqrt(hd), causal)   [b, H, T, T]  (one op, Ops#attention: fused on the cpu backend,
 *   O = A V                                 [b, H, T, hd]   which never forms A whole)
 *   y = merge(O) Wo^T                       [b, T, D]
 * </pre>
 */
final class Attention {
    private final StageContext c;
    private final Linear wq, wk, wv, wo;
    /** Qwen3's per-head RMSNorms of q and k (null otherwise). */
    private final Norm qNorm, kNorm;
    private final int heads, kvHeads, headDim;
    private final float scale;
    private final boolean rope;
    /** The RoPE frequencies (with the model's scaling) of one head, for {@link #decode}; null without RoPE. */
    private final double[] ropeInverse;
    private final Slots<Saved> saved = new Slots<>();

    private record Saved(Tensor q, Tensor k, Tensor v, AttentionOutput att) {
        void close() {
            q.close();
            k.close();
            v.close();
            att.close();
        }
    }

    Attention(StageContext c, String name) {
        this.c = c;
        ModelSpec s = c.spec;
        int d = s.embeddingDim();
        this.heads = s.numHeads();
        this.kvHeads = s.numKvHeads();
        this.headDim = s.headDim();
        this.scale = (float) (1.0 / Math.sqrt(headDim));
        this.rope = s.isLlama();
        this.ropeInverse = rope ? s.rope().inverse(headDim) : null;
        boolean bias = !s.isLlama();
        double std = 0.02, projStd = 0.02 / Math.sqrt(2.0 * s.numBlocks());
        this.wq = new Linear(c, name + ".wq", d, heads * headDim, bias, Linear.Split.COLUMN, std);
        // No key bias even for GPT-2: softmax is invariant to adding q.b to every score of a row, so its gradient
        // is identically zero; in fp32 it would only collect rounding noise, which Adam amplifies into updates.
        this.wk = new Linear(c, name + ".wk", d, kvHeads * headDim, false, Linear.Split.COLUMN, std);
        this.wv = new Linear(c, name + ".wv", d, kvHeads * headDim, bias, Linear.Split.COLUMN, std);
        this.wo = new Linear(c, name + ".wo", heads * headDim, d, bias, Linear.Split.ROW, projStd);
        this.qNorm = s.qkNorm() ? new Norm(c, name + ".q_norm", headDim, true, true) : null;
        this.kNorm = s.qkNorm() ? new Norm(c, name + ".k_norm", headDim, true, true) : null;
    }

    Tensor forward(Micro m, Tensor x) {
        Ops ops = c.ops;
        int b = x.shape().dim(0), t = x.shape().dim(1);
        Tensor q = splitHeads(m, wq.forward(m, x), b, t, heads, qNorm, true);
        Tensor k = expand(splitHeads(m, wk.forward(m, x), b, t, kvHeads, kNorm, true));
        Tensor v = expand(splitHeads(m, wv.forward(m, x), b, t, kvHeads, null, false));
        AttentionOutput att = ops.attention(q, k, v, scale, true);   // O [b, H, T, hd]
        Tensor merged = mergeHeads(att.out(), b, t);
        Tensor y;
        try (merged) {
            y = wo.forward(m, merged);
        }
        if (m.stash()) {
            saved.put(m.mb(), new Saved(q, k, v, att));
        } else {
            q.close();
            k.close();
            v.close();
            att.close();
        }
        return y;
    }

    Tensor backwardInput(Micro m, Tensor dy) {
        Ops ops = c.ops;
        Saved s = saved.remove(m.mb());
        int b = dy.shape().dim(0), t = dy.shape().dim(1);
        try {
            Tensor dO;
            try (Tensor dMerged = wo.backwardInput(m, dy)) {               // [b, T, H*hd]
                dO = splitHeadsNoRope(dMerged, b, t, heads);                // [b, H, T, hd]
            }
            Tensor dQ, dK, dV;
            try (dO) {
                AttentionGrads g = ops.attentionBackward(s.q, s.k, s.v, s.att, dO,
                        Mutation.on(Mutation.DROP_SOFTMAX_SCALE) ? 1f : scale, true);  // each [b, H, T, hd]
                dQ = g.dq();
                dK = g.dk();
                dV = g.dv();
                if (Mutation.on(Mutation.NEGATE_DQ)) ops.scaleInPlace(dQ, -1f);
            }
            Tensor dq = mergeHeadsGrad(m, dQ, b, t, qNorm, true);
            Tensor dk = mergeHeadsGrad(m, collapse(dK), b, t, kNorm, true);
            Tensor dv = mergeHeadsGrad(m, collapse(dV), b, t, null, false);
            try (dq; dk; dv) {
                Tensor dx = wq.backwardInputPartial(m, dq);
                wk.backwardInputInto(m, dk, dx);
                wv.backwardInputInto(m, dv, dx);
                if (wq.columnParallel()) ops.allReduceInPlace(dx, c.par.tpAxis(), ReduceOp.SUM);
                return dx;
            }
        } finally {
            s.close();
        }
    }

    void backwardWeight(Micro m) {
        wq.backwardWeight(m);
        wk.backwardWeight(m);
        wv.backwardWeight(m);
        wo.backwardWeight(m);
        if (qNorm != null) {
            qNorm.backwardWeight(m);
            kNorm.backwardWeight(m);
        }
    }

    /**
     * [b, T, n*hd] -> [b, n, T, hd], then the per-head norm when given (Qwen3), then rotary when asked and the
     * model uses it; closes its input.
     */
    private Tensor splitHeads(Micro m, Tensor flat, int b, int t, int n, Norm norm, boolean rotary) {
        Tensor h;
        try (flat) {
            h = normForward(m, norm, splitHeadsNoRope(flat, b, t, n));      // Qwen3: RMSNorm over hd, per (b, head, t)
        }
        if (rotary && rope) {
            try (h) {
                return c.ops.rope(h, c.spec.rope(), false);
            }
        }
        return h;
    }

    /** {@code norm}'s forward of x, closing x; x itself when there is no norm. */
    private static Tensor normForward(Micro m, Norm norm, Tensor x) {
        if (norm == null) return x;
        try (x) {
            return norm.forward(m, x);
        }
    }

    /** {@code norm}'s backward (input gradient) of dy, closing dy; dy itself when there is no norm. */
    private Tensor normBackward(Micro m, Norm norm, Tensor dy) {
        if (norm == null) return dy;
        try (dy) {
            Tensor dx = norm.backwardInput(m, dy);                           // saves dy for backwardWeight
            if (!Mutation.on(Mutation.SKIP_QK_NORM_BACKWARD)) return dx;
            dx.close();
            return c.keep(dy);
        }
    }

    private Tensor splitHeadsNoRope(Tensor flat, int b, int t, int n) {
        try (Tensor v4 = c.ops.reshape(flat, Shape.of(b, t, n, headDim))) {
            return c.ops.permute(v4, 0, 2, 1, 3);
        }
    }

    /** [b, H, T, hd] -> [b, T, H*hd]. */
    private Tensor mergeHeads(Tensor o, int b, int t) {
        try (Tensor p = c.ops.permute(o, 0, 2, 1, 3)) {
            Tensor flat = c.ops.reshape(p, Shape.of(b, t, o.shape().dim(1) * headDim));
            return flat;
        }
    }

    /**
     * Gradient [b, n, T, hd] -> [b, T, n*hd], back through {@link #splitHeads}: rotary undone when the forward
     * applied it, then the per-head norm's backward when given; closes its input.
     */
    private Tensor mergeHeadsGrad(Micro m, Tensor g, int b, int t, Norm norm, boolean rotary) {
        Tensor h;
        if (rotary && rope && !Mutation.on(Mutation.DROP_ROPE_INVERSE)) {
            h = c.ops.rope(g, c.spec.rope(), true);
            g.close();
        } else {
            h = g;
        }
        try (Tensor dRaw = normBackward(m, norm, h)) {
            return mergeHeads(dRaw, b, t);
        }
    }

    /** Grouped-query attention: repeat each key/value head for its group of query heads. Closes its input. */
    private Tensor expand(Tensor kv) {
        if (kvHeads == heads) return kv;
        try (kv) {
            return c.ops.repeatInterleave(kv, 1, heads / kvHeads);
        }
    }

    /** The backward of {@link #expand}: sum the gradients of each group. Closes its input. */
    private Tensor collapse(Tensor g) {
        if (kvHeads == heads) return g;
        try (g) {
            if (Mutation.on(Mutation.SKIP_GQA_SUM)) return firstOfEachGroup(g);
            return c.ops.sumGroups(g, 1, heads / kvHeads);
        }
    }

    /** {@link Mutation#SKIP_GQA_SUM}: [b, H, T, hd] -> [b, Hkv, T, hd], the first head of each group. */
    private Tensor firstOfEachGroup(Tensor g) {
        int b = g.shape().dim(0), t = g.shape().dim(2), group = heads / kvHeads;
        float[] first = new float[group];
        first[0] = 1f;
        try (Tensor pick = c.ops.fromHost(first, Shape.of(group, 1), Layout.REPLICATED, DType.FP32);
             Tensor grouped = c.ops.reshape(g, Shape.of(b * kvHeads, group, t * headDim));
             Tensor picked = c.ops.matmul(grouped, pick, true, false);        // [b*Hkv, T*hd, 1]
             Tensor view = c.ops.reshape(picked, Shape.of(b, kvHeads, t, headDim))) {
            return c.ops.copy(view);
        }
    }

    /**
     * One new token [1, 1, D] at position {@code pos} against the cached keys and values of the tokens
     * before it (block {@code block} of {@code cache}), which it joins. The projections run on the
     * device; the rotary embedding of this one position and the attention of its one query over the
     * cache run here, in double (the same sums as {@link #forward}'s last row, without the prefix).
     */
    Tensor decode(Tensor x, int pos, KvCache cache, int block) {
        Micro m = Micro.INFERENCE;
        float[] q, k, v;
        try (Tensor tq = wq.forward(m, x); Tensor tk = wk.forward(m, x); Tensor tv = wv.forward(m, x)) {
            q = headsNormed(tq, heads, qNorm);                           // [H*hd]
            k = headsNormed(tk, kvHeads, kNorm);                         // [Hkv*hd]
            v = tv.toHost();
        }
        if (rope) {
            rotate(q, pos);
            rotate(k, pos);
        }
        int kvw = kvHeads * headDim;
        System.arraycopy(k, 0, cache.keys[block], pos * kvw, kvw);
        System.arraycopy(v, 0, cache.values[block], pos * kvw, kvw);
        float[] o = new float[heads * headDim];
        double[] s = new double[pos + 1];
        for (int h = 0; h < heads; h++) {
            int kh = h / (heads / kvHeads);
            double max = Double.NEGATIVE_INFINITY;
            for (int j = 0; j <= pos; j++) {
                double dot = 0;
                for (int e = 0; e < headDim; e++) dot += (double) q[h * headDim + e] * cache.keys[block][j * kvw + kh * headDim + e];
                s[j] = dot * scale;
                max = Math.max(max, s[j]);
            }
            double z = 0;
            for (int j = 0; j <= pos; j++) z += s[j] = Math.exp(s[j] - max);
            for (int e = 0; e < headDim; e++) {
                double acc = 0;
                for (int j = 0; j <= pos; j++) acc += s[j] * cache.values[block][j * kvw + kh * headDim + e];
                o[h * headDim + e] = (float) (acc / z);
            }
        }
        try (Tensor merged = c.ops.fromHost(o, Shape.of(1, 1, heads * headDim), x.layout(), DType.FP32)) {
            return wo.forward(m, merged);
        }
    }

    /** One token's projection [1, 1, n*hd] on the host, each of its n heads through {@code norm} first when given (Qwen3). */
    private float[] headsNormed(Tensor projected, int n, Norm norm) {
        if (norm == null) return projected.toHost();
        try (Tensor h = c.ops.reshape(projected, Shape.of(1, 1, n, headDim)); Tensor normed = norm.forward(Micro.INFERENCE, h)) {
            return normed.toHost();
        }
    }

    /** ttpipe's rotary embedding of one position: pair (2i, 2i+1) of each head turned by pos x inv_freq[i] (the model's RoPE frequencies). */
    private void rotate(float[] x, int pos) {
        int half = headDim / 2;
        for (int h = 0; h < x.length / headDim; h++) {
            for (int i = 0; i < half; i++) {
                double a = pos * ropeInverse[i];
                float cos = (float) Math.cos(a), sin = (float) Math.sin(a);       // as the kernels' float tables
                int b = h * headDim + 2 * i;
                float x0 = x[b], x1 = x[b + 1];
                x[b] = x0 * cos - x1 * sin;
                x[b + 1] = x0 * sin + x1 * cos;
            }
        }
    }

    void dropSaved() {
        saved.drain().forEach(Saved::close);
        wq.dropSaved();
        wk.dropSaved();
        wv.dropSaved();
        wo.dropSaved();
        if (qNorm != null) {
            qNorm.dropSaved();
            kNorm.dropSaved();
        }
    }
}

package dev.ttpipe.stages;

import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Tensor;

/**
 * One pre-norm transformer block:
 * <pre>
 *   x1  = x  + drop(attn(norm1(x)))
 *   out = x1 + drop(mlp(norm2(x1)))
 * </pre>
 * With recomputation ({@code runner_type: memory_efficient}) forward keeps only the block's input
 * and backward runs the forward again (same dropout masks) before going back through it.
 */
final class Block {
    private final StageContext c;
    private final String name;
    private final Norm norm1, norm2;
    private final Attention attn;
    private final FeedForward mlp;
    private final float dropout;
    private final boolean recompute;
    private final Slots<Tensor> inputs = new Slots<>();

    Block(StageContext c, int index) {
        this.c = c;
        this.name = "blocks." + index;
        boolean rms = c.spec.isLlama();
        int d = c.spec.embeddingDim();
        this.norm1 = new Norm(c, name + ".norm1", d, rms);
        this.attn = new Attention(c, name + ".attn");
        this.norm2 = new Norm(c, name + ".norm2", d, rms);
        this.mlp = new FeedForward(c, name + ".mlp");
        this.dropout = c.spec.dropout();
        this.recompute = c.spec.recompute();
    }

    Tensor forward(Micro m, Tensor x) {
        if (recompute && m.stash()) {
            inputs.put(m.mb(), c.keep(x));
            return compute(m.withStash(false), x);
        }
        return compute(m, x);
    }

    private Tensor compute(Micro m, Tensor x) {
        Ops ops = c.ops;
        Tensor a;
        try (Tensor h1 = norm1.forward(m, x)) {
            a = drop(m, attn.forward(m, h1), ".attn_drop");
        }
        Tensor x1;
        try (a) {
            x1 = ops.add(x, a);
        }
        try (x1) {
            Tensor f;
            try (Tensor h2 = norm2.forward(m, x1)) {
                f = drop(m, mlp.forward(m, h2), ".mlp_drop");
            }
            try (f) {
                return ops.add(x1, f);
            }
        }
    }

    /** {@link #compute} for one new token at {@code pos}, its attention over the cache ({@link Attention#decode}). */
    Tensor decode(Tensor x, int pos, KvCache cache, int block) {
        Ops ops = c.ops;
        Micro m = Micro.INFERENCE;
        Tensor a;
        try (Tensor h1 = norm1.forward(m, x)) {
            a = attn.decode(h1, pos, cache, block);
        }
        Tensor x1;
        try (a) {
            x1 = ops.add(x, a);
        }
        try (x1; Tensor h2 = norm2.forward(m, x1); Tensor f = mlp.forward(m, h2)) {
            return ops.add(x1, f);
        }
    }

    Tensor backwardInput(Micro m, Tensor dOut) {
        Ops ops = c.ops;
        if (recompute) {
            try (Tensor x = inputs.remove(m.mb())) {
                compute(m.withStash(true), x).close(); // run again only to rebuild what backward needs
            }
        }
        Tensor dX1;
        try (Tensor dF = dropBackward(m, dOut, ".mlp_drop");
             Tensor dH2 = mlp.backwardInput(m, dF);
             Tensor dX1n = norm2.backwardInput(m, dH2)) {
            dX1 = Mutation.on(Mutation.DROP_RESIDUAL_GRADIENT) ? c.keep(dX1n) : ops.add(dOut, dX1n);
        }
        try (dX1;
             Tensor dA = dropBackward(m, dX1, ".attn_drop");
             Tensor dH1 = attn.backwardInput(m, dA);
             Tensor dXn = norm1.backwardInput(m, dH1)) {
            return ops.add(dX1, dXn);
        }
    }

    void backwardWeight(Micro m) {
        norm1.backwardWeight(m);
        attn.backwardWeight(m);
        norm2.backwardWeight(m);
        mlp.backwardWeight(m);
    }

    /** Dropout of a sublayer's output (closes its input when it makes a new tensor). */
    private Tensor drop(Micro m, Tensor t, String site) {
        if (dropout <= 0f || !m.train()) return t;
        try (t) {
            return c.ops.dropout(t, dropout, ParamInit.dropoutSeed(c.seed, m.step(), name + site),
                    (long) m.mb() * t.shape().numel());
        }
    }

    /** The dropout backward, or an alias of dy when dropout is off (the caller closes either). */
    private Tensor dropBackward(Micro m, Tensor dy, String site) {
        if (dropout <= 0f || !m.train() || Mutation.on(Mutation.UNMASKED_DROPOUT_BACKWARD)) return c.keep(dy);
        return c.ops.dropoutBackward(dy, dropout, ParamInit.dropoutSeed(c.seed, m.step(), name + site),
                (long) m.mb() * dy.shape().numel());
    }

    void dropSaved() {
        inputs.drain().forEach(Tensor::close);
        norm1.dropSaved();
        attn.dropSaved();
        norm2.dropSaved();
        mlp.dropSaved();
    }
}

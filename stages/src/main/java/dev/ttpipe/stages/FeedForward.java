package dev.ttpipe.stages;

import dev.ttpipe.device.Ops;
import dev.ttpipe.device.ReduceOp;
import dev.ttpipe.device.Tensor;

/**
 * The block's MLP. GPT-2: {@code y = W2 gelu(W1 x + b1) + b2}. Llama (SwiGLU):
 * {@code y = W2 (silu(W1 x) * (W3 x))}. W1 and W3 are column-parallel, W2 row-parallel under TP.
 */
final class FeedForward {
    private final StageContext c;
    private final boolean swiglu;
    private final Linear w1, w2, w3;
    private final Slots<Tensor[]> saved = new Slots<>();

    FeedForward(StageContext c, String name) {
        this.c = c;
        ModelSpec s = c.spec;
        this.swiglu = s.isLlama();
        int d = s.embeddingDim(), f = s.intermediateDim();
        boolean bias = !swiglu;
        double projStd = 0.02 / Math.sqrt(2.0 * s.numBlocks());
        this.w1 = new Linear(c, name + ".w1", d, f, bias, Linear.Split.COLUMN, 0.02);
        this.w3 = swiglu ? new Linear(c, name + ".w3", d, f, false, Linear.Split.COLUMN, 0.02) : null;
        this.w2 = new Linear(c, name + ".w2", f, d, bias, Linear.Split.ROW, projStd);
    }

    Tensor forward(Micro m, Tensor x) {
        Ops ops = c.ops;
        if (!swiglu) {
            Tensor h = w1.forward(m, x);                 // [b, T, f]
            try (Tensor g = ops.gelu(h)) {
                if (m.stash()) saved.put(m.mb(), new Tensor[]{h});
                else h.close();
                return w2.forward(m, g);
            }
        }
        Tensor a = w1.forward(m, x);                     // gate pre-activation
        Tensor u = w3.forward(m, x);                     // up projection
        Tensor s = ops.silu(a);
        try (Tensor g = ops.mul(s, u)) {
            if (m.stash()) {
                saved.put(m.mb(), new Tensor[]{a, u, s});
            } else {
                a.close();
                u.close();
                s.close();
            }
            return w2.forward(m, g);
        }
    }

    Tensor backwardInput(Micro m, Tensor dy) {
        Ops ops = c.ops;
        Tensor[] sv = saved.remove(m.mb());
        try {
            if (!swiglu) {
                Tensor h = sv[0];
                try (Tensor dg = w2.backwardInput(m, dy); Tensor dh = ops.geluBackward(dg, h)) {
                    return w1.backwardInput(m, dh);
                }
            }
            Tensor a = sv[0], u = sv[1], s = sv[2];
            try (Tensor dg = w2.backwardInput(m, dy);
                 Tensor ds = ops.mul(dg, u);
                 Tensor du = ops.mul(dg, Mutation.on(Mutation.SWIGLU_WRONG_GATE) ? a : s);
                 Tensor da = ops.siluBackward(ds, a)) {
                Tensor dx = w1.backwardInputPartial(m, da);
                w3.backwardInputInto(m, du, dx);
                if (w1.columnParallel()) ops.allReduceInPlace(dx, c.par.tpAxis(), ReduceOp.SUM);
                return dx;
            }
        } finally {
            for (Tensor t : sv) t.close();
        }
    }

    void backwardWeight(Micro m) {
        w1.backwardWeight(m);
        if (w3 != null) w3.backwardWeight(m);
        w2.backwardWeight(m);
    }

    void dropSaved() {
        saved.drain().forEach(ts -> {
            for (Tensor t : ts) t.close();
        });
        w1.dropSaved();
        w2.dropSaved();
        if (w3 != null) w3.dropSaved();
    }
}

package dev.ttpipe.stages;

import dev.ttpipe.device.Layout;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;

/**
 * The last stage's output layer: final norm, LM head (no bias; with weight tying the token
 * embedding's matrix when it lives on the same stage, else the stage's tied copy of it) and cross-entropy against the targets with
 * an ignore index. The loss gradient is scaled by {@code lossScale} (1 / tokens counted in the
 * whole batch), so microbatch gradients add up to the batch's mean-loss gradient.
 */
final class Head {
    static final int IGNORE_INDEX = -100;

    private final StageContext c;
    private final Norm norm;
    private final Param lm;
    private final Slots<Tensor> logits = new Slots<>();
    private final Slots<Tensor> hs = new Slots<>();
    private final Slots<Tensor> dLogits = new Slots<>();
    private final Slots<Targets> targets = new Slots<>();
    private final Slots<LossOutput> losses = new Slots<>();

    private record Targets(Tensor ids, float scale) {
    }

    Head(StageContext c, Param tiedEmbedding) {
        this.c = c;
        ModelSpec s = c.spec;
        this.norm = new Norm(c, "head.norm", s.embeddingDim(), s.isLlama());
        this.lm = tiedEmbedding != null ? tiedEmbedding
                : c.normal("head.lm", Shape.of(s.vocabSize(), s.embeddingDim()), Layout.REPLICATED, 0.02);
    }

    void setTargets(int mb, Tensor ids, float scale) {
        targets.put(mb, new Targets(ids, scale));
    }

    /** Runs norm, head and loss; keeps the logits for backward. Returns the microbatch's loss. */
    LossOutput forward(Micro m, Tensor x) {
        Ops ops = c.ops;
        Tensor h = norm.forward(m, x);
        Tensor lg = ops.linear(h, lm.matmulValue(h.dtype()), null);                      // [b, T, V]
        LossOutput loss;
        try {
            loss = ops.crossEntropy(lg, targets.get(m.mb()).ids(), IGNORE_INDEX);
        } catch (RuntimeException e) {
            lg.close();
            h.close();
            throw e;
        }
        if (m.stash()) {
            logits.put(m.mb(), lg);
            hs.put(m.mb(), h);
        } else {
            lg.close();
            h.close();
        }
        if (losses.has(m.mb())) losses.remove(m.mb());
        losses.put(m.mb(), loss);
        return loss;
    }

    /** Logits [b, T, V] without keeping anything (inference). */
    Tensor logits(Micro m, Tensor x) {
        try (Tensor h = norm.forward(m, x)) {
            return c.ops.linear(h, lm.matmulValue(h.dtype()), null);
        }
    }

    LossOutput loss(int mb) {
        return losses.get(mb);
    }

    Tensor backwardInput(Micro m) {
        Ops ops = c.ops;
        Targets t = targets.remove(m.mb());
        Tensor dl;
        try (Tensor lg = logits.remove(m.mb()); Tensor ids = t.ids()) {
            dl = ops.crossEntropyBackward(lg, ids, IGNORE_INDEX, t.scale());
        }
        dLogits.put(m.mb(), dl);
        try (Tensor dh = ops.matmul(dl, lm.matmulValue(dl.dtype()), false, false)) {  // [b, T, D]
            return norm.backwardInput(m, dh);
        }
    }

    void backwardWeight(Micro m) {
        Ops ops = c.ops;
        try (Tensor dl = dLogits.remove(m.mb()); Tensor h = hs.remove(m.mb());
             Tensor dl2 = ops.reshape(dl, Shape.of((int) dl.shape().rows(), dl.shape().last()));
             Tensor h2 = ops.reshape(h, Shape.of((int) h.shape().rows(), h.shape().last()))) {
            boolean acc = lm.markWritten();
            ops.matmulInto(lm.grad(), dl2, h2, true, false, 1f, acc ? 1f : 0f);
        }
        norm.backwardWeight(m);
    }

    /** Drops the loss records of the finished step. */
    void clearLosses() {
        losses.drain();
    }

    void dropSaved() {
        logits.drain().forEach(Tensor::close);
        hs.drain().forEach(Tensor::close);
        dLogits.drain().forEach(Tensor::close);
        targets.drain().forEach(t -> t.ids().close());
        losses.drain();
        norm.dropSaved();
    }
}

package dev.ttpipe.stages;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;

/**
 * The first stage's input layer: token embedding [V, D], plus (GPT-2) a learned position
 * embedding [maxSeq, D] looked up with position ids, then dropout. Backward has no input gradient;
 * its weight half scatter-adds the output gradient into the tables.
 */
final class Embeddings {
    private final StageContext c;
    final Param tokens;
    final Param positions;
    private final float dropout;
    private final Slots<Tensor[]> saved = new Slots<>();   // {ids, positionIds, dOut}

    static final String TOKENS = "embed.tokens";
    static final double TOKENS_STD = 0.02;

    Embeddings(StageContext c) {
        this.c = c;
        ModelSpec s = c.spec;
        this.tokens = c.normal(TOKENS, Shape.of(s.vocabSize(), s.embeddingDim()), Layout.REPLICATED, TOKENS_STD);
        this.positions = s.isLlama() ? null
                : c.normal("embed.positions", Shape.of(s.maxSequenceLength(), s.embeddingDim()), Layout.REPLICATED, 0.01);
        this.dropout = s.dropout();
    }

    Tensor forward(Micro m, Tensor ids) {
        Ops ops = c.ops;
        int b = ids.shape().dim(0), t = ids.shape().dim(1);
        if (t > c.spec.maxSequenceLength()) {
            throw new StagesException("transformer_config.max_sequence_length: a sequence of " + t
                    + " tokens is longer than the model's maximum " + c.spec.maxSequenceLength());
        }
        Tensor x = ops.embedding(ids, tokens.value());
        Tensor pos = null;
        if (positions != null) {
            pos = positionIds(b, t, ids.layout());
            try (Tensor tok = x; Tensor px = ops.embedding(pos, positions.value())) {
                x = ops.add(tok, px);
            }
        }
        if (dropout > 0f && m.train()) {
            try (Tensor in = x) {
                x = ops.dropout(in, dropout, ParamInit.dropoutSeed(c.seed, m.step(), "embed.drop"),
                        (long) m.mb() * in.shape().numel());
            }
        }
        if (c.spec.dtype() != x.dtype()) {
            try (Tensor fp32 = x) {
                x = ops.typecast(fp32, c.spec.dtype());   // activations leave the embedding in the model's dtype
            }
        }
        if (m.stash()) {
            saved.put(m.mb(), new Tensor[]{c.keep(ids), pos, null});
        } else if (pos != null) {
            pos.close();
        }
        return x;
    }

    /** The embedding of token ids [1, 1] at position {@code pos} (generation one token at a time). */
    Tensor decode(Tensor ids, int pos) {
        Tensor x = c.ops.embedding(ids, tokens.value());
        if (positions == null) return x;
        try (Tensor tok = x; Tensor p = c.ops.fromHostInts(new int[]{pos}, Shape.of(1, 1), ids.layout());
             Tensor px = c.ops.embedding(p, positions.value())) {
            return c.ops.add(tok, px);
        }
    }

    /** Saves the output gradient for {@link #backwardWeight}; there is no input gradient. */
    void backwardInput(Micro m, Tensor dOut) {
        Tensor[] s = saved.get(m.mb());
        if (dropout > 0f) {
            s[2] = c.ops.dropoutBackward(dOut, dropout, ParamInit.dropoutSeed(c.seed, m.step(), "embed.drop"),
                    (long) m.mb() * dOut.shape().numel());
        } else {
            s[2] = c.keep(dOut);
        }
    }

    void backwardWeight(Micro m) {
        Tensor[] s = saved.remove(m.mb());
        try {
            boolean acc = tokens.markWritten();
            c.ops.embeddingBackward(s[0], s[2], tokens.grad(), acc);
            if (positions != null) {
                boolean accP = positions.markWritten();
                c.ops.embeddingBackward(s[1], s[2], positions.grad(), accP);
            }
        } finally {
            for (Tensor t : s) if (t != null) t.close();
        }
    }

    /** Position ids [b, t] (0..t-1 in every row), made once per shape and shared by alias. */
    private Tensor positionIds(int b, int t, Layout idsLayout) {
        if (positionIds == null || !positionIds.shape().equals(Shape.of(b, t)) || !positionIds.layout().equals(idsLayout)) {
            if (positionIds != null) positionIds.close();
            int[] pos = new int[b * t];
            for (int i = 0; i < b; i++) {
                for (int j = 0; j < t; j++) pos[i * t + j] = j;
            }
            positionIds = c.ops.fromHostInts(pos, Shape.of(b, t), idsLayout);
        }
        return c.keep(positionIds);
    }

    private Tensor positionIds;

    void close() {
        if (positionIds != null) positionIds.close();
        positionIds = null;
    }

    void dropSaved() {
        saved.drain().forEach(ts -> {
            for (Tensor t : ts) if (t != null) t.close();
        });
    }

    static DType idsType() {
        return DType.INT32;
    }
}

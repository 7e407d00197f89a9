package dev.ttpipe.stages;

import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;

/**
 * One pipeline stage: a slice of the model on a submesh that runs forward (F), backward-input (I),
 * backward-weight (W) and full backward (B = I then W) one microbatch at a time, keeping what
 * backward needs in a per-microbatch stash that is freed as soon as the microbatch's W has run.
 *
 * <p>Ownership: {@link #forward} and {@link #backwardInput} take ownership of the tensor passed in
 * (activation or gradient, already on this stage's submesh) and return a tensor the caller owns
 * (null where there is nothing to pass on: the last stage's forward, the first stage's backward).
 *
 * <p>{@code pass} numbers the forward pass (optimizer step x accumulation steps + accumulation
 * index); dropout masks are a function of (seed, pass, layer, element position in the batch), so a
 * pipelined run and the reference trainer draw the same masks.
 *
 * <p>Not thread-safe: one thread (the stage's device queue) drives it.
 */
public final class Stage implements AutoCloseable {
    private final StageSlice slice;
    private final StageContext c;
    private final Embeddings embeddings;
    private final List<Block> blocks = new ArrayList<>();
    private final Head head;
    private final Slots<Boolean> inFlight = new Slots<>();

    public Stage(ModelSpec spec, StageSlice slice, Submesh submesh, Parallelism par, long seed) {
        this.slice = slice;
        this.c = new StageContext(submesh, par, spec, seed);
        try {
            this.embeddings = slice.embedding() ? new Embeddings(c) : null;
            for (int i = slice.firstBlock(); i < slice.endBlock(); i++) blocks.add(new Block(c, i));
            // Tied across stages (Megatron): the last stage keeps its own copy of the token embedding, made by the same
            // initialisation (same name, same seed), and the runtime sums the two copies' gradients every step.
            this.tiedCopy = slice.head() && spec.weightTying() && embeddings == null
                    ? c.normal(Embeddings.TOKENS, Shape.of(spec.vocabSize(), spec.embeddingDim()),
                    Layout.REPLICATED, Embeddings.TOKENS_STD) : null;
            this.head = slice.head() ? new Head(c, !spec.weightTying() ? null : embeddings != null ? embeddings.tokens : tiedCopy) : null;
        } catch (RuntimeException e) {
            c.params.forEach(Param::close);
            throw e;
        }
    }

    private final Param tiedCopy;

    /**
     * This stage's half of a token embedding tied across stages: the embedding on the first stage, the
     * head's copy of it on the last; null when untied or when one stage holds both. Its gradient is the
     * sum of both halves' (the runtime exchanges them after {@link #reduceGradients}), counted once in the
     * gradient norm: {@link #gradSumSquares} leaves it out.
     */
    public Param tiedAcrossStages() {
        if (!c.spec.weightTying()) return null;
        if (tiedCopy != null) return tiedCopy;
        return embeddings != null && head == null ? embeddings.tokens : null;
    }

    public StageSlice slice() {
        return slice;
    }

    public int index() {
        return slice.index();
    }

    public boolean isFirst() {
        return embeddings != null;
    }

    public boolean isLast() {
        return head != null;
    }

    public Submesh submesh() {
        return c.submesh;
    }

    public Parallelism parallelism() {
        return c.par;
    }

    public ModelSpec spec() {
        return c.spec;
    }

    /** Parameters in a stable order (embeddings, blocks, head). */
    public List<Param> parameters() {
        return Collections.unmodifiableList(c.params);
    }

    /** Targets (INT32 [b, T], on this submesh) and the loss gradient's scale for microbatch {@code mb}; last stage only. */
    public void setTargets(int mb, Tensor targets, float lossScale) {
        if (head == null) {
            targets.close();
            throw new IllegalStateException(slice + " is not the last stage; targets go to the last stage");
        }
        head.setTargets(mb, targets, lossScale);
    }

    /**
     * F: the first stage takes token ids [b, T]; the others the previous stage's activation [b, T, D].
     * Returns the activation for the next stage, or null on the last stage (whose loss is then {@link #loss}).
     */
    public Tensor forward(int pass, int mb, Tensor input) {
        Micro m = Micro.training(pass, mb);
        Tensor x = embedAndBlocks(m, input);
        try {
            inFlight.put(mb, Boolean.TRUE);
            if (head != null) {
                try (Tensor in = x) {
                    head.forward(m, in);
                }
                return null;
            }
            return x;
        } catch (RuntimeException e) {
            closeUnlessClosed(x);
            throw e;
        }
    }

    /**
     * Inference forward, no stash and no dropout: the first stage takes token ids [b, T]; returns the
     * activation for the next stage, or on the last stage the logits [b, T, V]. Takes ownership of the input.
     */
    public Tensor infer(Tensor input) {
        Micro m = Micro.INFERENCE;
        Tensor x = embedAndBlocks(m, input);
        try {
            if (head != null) {
                try (Tensor in = x) {
                    x = head.logits(m, in);
                }
            }
            return x;
        } catch (RuntimeException e) {
            closeUnlessClosed(x);
            throw e;
        }
    }

    /**
     * The walk {@link #forward} and {@link #infer} share: the embedding (first stage) then each block, each
     * closing its input. Takes ownership of {@code input}; returns the last block's output [b, T, D], which the
     * caller owns; on a failure, closes whatever tensor it held.
     */
    private Tensor embedAndBlocks(Micro m, Tensor input) {
        Tensor x = input;
        try {
            if (embeddings != null) {
                try (Tensor ids = x) {
                    x = embeddings.forward(m, ids);
                }
            }
            for (Block b : blocks) {
                try (Tensor in = x) {
                    x = b.forward(m, in);
                }
            }
            return x;
        } catch (RuntimeException e) {
            closeUnlessClosed(x);
            throw e;
        }
    }

    private static void closeUnlessClosed(Tensor x) {
        if (x != null && !x.isClosed()) x.close();
    }

    /** An empty key/value cache for {@link #decode} of up to {@code capacity} tokens. */
    public KvCache newKvCache(int capacity) {
        return new KvCache(blocks.size(), capacity, c.spec.numKvHeads(), c.spec.headDim());
    }

    /**
     * Generation one token at a time: like {@link #infer} for the token at position {@code pos} ([1, 1]
     * ids on the first stage, [1, 1, D] after), its attention over {@code cache}, which it joins. Takes
     * ownership of the input; returns the next stage's input or, on the last stage, the logits [1, 1, V].
     */
    public Tensor decode(Tensor input, int pos, KvCache cache) {
        if (c.par.tp() || c.par.ddp()) {
            input.close();
            throw new StagesException("generation with a key/value cache runs on stages without tensor or data parallelism");
        }
        if (pos >= cache.capacity || pos >= c.spec.maxSequenceLength()) {
            input.close();
            throw new StagesException("position " + pos + " is beyond the cache's " + cache.capacity + " tokens or the model's"
                    + " maximum sequence " + c.spec.maxSequenceLength());
        }
        Tensor x = input;
        try {
            if (embeddings != null) {
                try (Tensor ids = x) {
                    x = embeddings.decode(ids, pos);
                }
            }
            for (int i = 0; i < blocks.size(); i++) {
                try (Tensor in = x) {
                    x = blocks.get(i).decode(in, pos, cache, i);
                }
            }
            cache.length = pos + 1;
            if (head != null) {
                try (Tensor in = x) {
                    x = head.logits(Micro.INFERENCE, in);
                }
            }
            return x;
        } catch (RuntimeException e) {
            closeUnlessClosed(x);
            throw e;
        }
    }

    /** The loss of microbatch {@code mb} (last stage, after its forward). */
    public LossOutput loss(int mb) {
        return head.loss(mb);
    }

    /**
     * I: the gradient w.r.t. this stage's input, given the gradient w.r.t. its output ({@code dOut};
     * null on the last stage, which starts from the loss). Returns null on the first stage.
     * Saves what {@link #backwardWeight} needs.
     */
    public Tensor backwardInput(int pass, int mb, Tensor dOut) {
        Micro m = Micro.training(pass, mb);
        Tensor g = dOut;
        try {
            if (head != null) {
                if (g != null) g.close();
                g = head.backwardInput(m);
            } else if (g == null) {
                throw new IllegalArgumentException(slice + ": backward of microbatch " + mb + " needs the output gradient");
            }
            for (int i = blocks.size() - 1; i >= 0; i--) {
                try (Tensor in = g) {
                    g = blocks.get(i).backwardInput(m, in);
                }
            }
            if (embeddings != null) {
                try (Tensor in = g) {
                    embeddings.backwardInput(m, in);
                }
                return null;
            }
            return g;
        } catch (RuntimeException e) {
            closeUnlessClosed(g);
            throw e;
        }
    }

    /** W: accumulates the weight gradients of microbatch {@code mb} and frees its stash. */
    public void backwardWeight(int pass, int mb) {
        Micro m = Micro.training(pass, mb);
        if (head != null) head.backwardWeight(m);
        for (int i = blocks.size() - 1; i >= 0; i--) blocks.get(i).backwardWeight(m);
        if (embeddings != null) embeddings.backwardWeight(m);
        inFlight.remove(mb);
    }

    /** B: {@link #backwardInput} then {@link #backwardWeight}. */
    public Tensor backward(int pass, int mb, Tensor dOut) {
        Tensor dx = backwardInput(pass, mb, dOut);
        backwardWeight(pass, mb);
        return dx;
    }

    /** Microbatches whose forward ran and whose W has not (what the stash holds). */
    public int stashedMicrobatches() {
        return inFlight.live();
    }

    /** REDUCE_GRAD: all-reduces the data-parallel partial gradients. */
    public void reduceGradients() {
        for (Param p : c.params) p.reduce(c.par);
    }

    /**
     * This stage's contribution to the global gradient norm: the sum of squares of its complete
     * gradients, added one parameter after another in this stage's order. Remembers the first parameter
     * whose sum is not finite ({@link #nonFiniteGradient}).
     */
    public double gradSumSquares() {
        double s = 0;
        for (double ss : gradSumsOfSquares()) s += ss;
        return s;
    }

    /**
     * The sum of squares of each complete gradient, in this stage's parameter order (a parameter tied
     * across stages left out: the coordinator sums its halves). The pipeline adds these stage after stage
     * in the same sequence as the reference trainer adds its own, so the two norms have the same bits.
     */
    public double[] gradSumsOfSquares() {
        nonFinite = null;
        Param tied = tiedAcrossStages();
        double[] out = new double[c.params.size()];
        int n = 0;
        for (Param p : c.params) {
            if (!p.hasGrad() || p == tied) continue;
            p.reduce(c.par);
            double ss = c.ops.sumSquares(p.fullGrad());
            if (nonFinite == null && !Double.isFinite(ss)) nonFinite = p.name();
            out[n++] = ss;
        }
        return Arrays.copyOf(out, n);
    }

    private String nonFinite;

    /** The first parameter (in this stage's order) whose gradient was not finite at the last {@link #gradSumSquares}, or null. */
    public String nonFiniteGradient() {
        return nonFinite;
    }

    /** Ends the step's gradient bookkeeping (the optimizer calls it after updating). */
    public void endStep() {
        for (Param p : c.params) p.clearGrad();
        if (head != null) head.clearLosses();
    }

    /** Frees every stashed activation, targets and losses (gradients stay). */
    public void dropStash() {
        if (embeddings != null) embeddings.dropSaved();
        blocks.forEach(Block::dropSaved);
        if (head != null) head.dropSaved();
        inFlight.drain();
    }

    /** Abandons the current step after a failure: frees the stash and forgets this step's gradients. */
    public void abortStep() {
        dropStash();
        for (Param p : c.params) p.clearGrad();
    }

    @Override
    public void close() {
        try {
            abortStep();
        } catch (DeviceException ignored) {
            // closing after a device failure: free what can be freed
        }
        if (embeddings != null) embeddings.close();
        c.params.forEach(Param::close);
    }

    @Override
    public String toString() {
        return slice.toString();
    }
}

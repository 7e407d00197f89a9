package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.cluster.ClusterMessage;

/**
 * What the F actions of an inference pass (forward only: {@code ttpipe eval}, {@code ttpipe generate})
 * compute on every rank, instead of training's forward: no stash, no dropout, no backward. The plan's
 * schedule is {@link dev.ttpipe.schedules.Schedules#forwardOnly}; a pass runs the first
 * {@link #microbatches()} microbatches of its rows and skips the rest.
 */
public sealed interface Inference extends ClusterMessage {
    /** Microbatches this pass runs, at most the plan's. */
    int microbatches();

    /**
     * Evaluation: each microbatch is one batch of token ids; the last stage scores its logits against the
     * targets ({@link dev.ttpipe.stages.Evaluation#score}) and hands back a loss per microbatch.
     */
    record Score(int microbatches) implements Inference {
    }

    /**
     * Generation against each stage's key/value cache, kept on its rank: microbatch m is the one token at
     * position {@code position + m}; position 0 starts fresh caches of {@code capacity} tokens. The last stage
     * hands back the logits of the pass's last token.
     */
    record Decode(int microbatches, int position, int capacity) implements Inference {
    }
}

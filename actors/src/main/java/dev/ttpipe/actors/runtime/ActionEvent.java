package dev.ttpipe.actors.runtime;

import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;

/**
 * One measured action of a rank, in the schedule's notation: compute (F, B, I, W, REDUCE_GRAD,
 * OPTIMIZER_STEP) or communication (SEND_F, RECV_F, SEND_B, RECV_B). Times are
 * {@link System#nanoTime()} values of the process. For a RECV, the span is the time the rank waited
 * for the data: from when its row reached the RECV to when the transport delivered the tensor (stamped
 * on the transport's thread), empty when the data was there first; for a SEND, the time to hand the
 * data to the transport.
 *
 * <p>A RECV over a transport that times its frames (Aeron) also says how long the frame's bytes took
 * on the link, at the receiver: from its first chunk's arrival to its last ({@code linkNs}); what it
 * waited at the sender before it was sent is not in it. On a transport that only queues a SEND, a
 * link slow on the wire shows there and nowhere else.
 *
 * @param action     what ran ({@code 2F3}); REDUCE_GRAD and OPTIMIZER_STEP carry no microbatch
 * @param pass       the forward pass (step x accumulation + pass), -1 for the step's REDUCE_GRAD and OPTIMIZER_STEP
 * @param bytes      for a SEND, the tensor's bytes; for a RECV, the frame's payload bytes (0 when handed over in memory)
 * @param queueDepth arrivals buffered at the rank (not yet consumed) when the action started
 * @param stashed    microbatches whose activations the rank held when the action ended
 * @param memory     device bytes in use (largest device of the submesh) when the action ended
 * @param linkNs     for a RECV, the frame's time on the link (first chunk to last) where the transport
 *                   timed it, else -1
 */
public record ActionEvent(int rank, Action action, int pass, long startNs, long endNs, long bytes, long waitNs,
                          int queueDepth, int stashed, long memory, long linkNs) {

    /** An event without a time on the link (every action but a RECV over a transport that times its frames). */
    public ActionEvent(int rank, Action action, int pass, long startNs, long endNs, long bytes, long waitNs, int queueDepth,
                       int stashed, long memory) {
        this(rank, action, pass, startNs, endNs, bytes, waitNs, queueDepth, stashed, memory, -1);
    }

    public int stage() {
        return action.stage();
    }

    public ActionKind kind() {
        return action.kind();
    }

    public int microbatch() {
        return action.microbatch();
    }

    /** Not SEND or RECV: work on the device (F, B, I, W, REDUCE_GRAD, OPTIMIZER_STEP). */
    public boolean isCompute() {
        return !action.kind().isComm();
    }

    public long durationNs() {
        return endNs - startNs;
    }

    /** The schedule's notation: {@code 2F3}, {@code 1RECV_B0}, {@code 0REDUCE_GRAD}. */
    public String label() {
        return action.toString();
    }
}

package dev.ttpipe.actors.telemetry;

/**
 * One measured action of a rank: compute (F, B, I, W, REDUCE_GRAD, OPTIMIZER_STEP) or
 * communication (SEND_F, RECV_F, SEND_B, RECV_B), in the schedule's notation. Times are
 * {@link System#nanoTime()} values of the process. For a RECV, the span is the time the rank waited
 * for the data ({@code waitNs}); for a SEND, the time to hand the data to the transport.
 *
 * @param queueDepth arrivals buffered at the rank (not yet consumed) when the action started
 * @param stashed    microbatches whose activations the rank held when the action ended
 * @param memory     device bytes in use (largest device of the submesh) when the action ended
 */
public record ActionEvent(int rank, int stage, String kind, int microbatch, int pass, long startNs, long endNs,
                          long bytes, long waitNs, int queueDepth, int stashed, long memory) {

    public boolean isCompute() {
        return !(kind.startsWith("SEND") || kind.startsWith("RECV"));
    }

    public long durationNs() {
        return endNs - startNs;
    }

    /** The schedule's notation: {@code 2F3}, {@code 1RECV_B0}, {@code 0REDUCE_GRAD}. */
    public String label() {
        return stage + kind + (microbatch >= 0 ? Integer.toString(microbatch) : "");
    }
}

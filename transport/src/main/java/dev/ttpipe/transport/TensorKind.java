package dev.ttpipe.transport;

/** What a frame carries between stages, or between ranks while a job checks its links before step 1. */
public enum TensorKind {
    /** A forward activation, from stage s to stage s + 1. */
    ACTIVATION,
    /** An input gradient, from stage s to stage s - 1. */
    GRADIENT,
    /**
     * A link check's frame from one rank to another, which the receiving rank answers with an {@link #ECHO}: its
     * header's {@code fromStage} and {@code toStage} are the two ranks, {@code pass} the check and {@code microbatch}
     * the frame's number in it.
     */
    PROBE,
    /** The answer to a {@link #PROBE}: a small frame back to the prober, with the probe's pass and microbatch. */
    ECHO;

    public static TensorKind of(int code) {
        return values()[code];
    }
}

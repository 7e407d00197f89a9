package dev.ttpipe.actors.tune;

/**
 * What the cost model and the simulator predict for one {@link Candidate}: the step time (the
 * simulated passes plus the optimizer and the fixed per-step overhead), the bubble, the peak memory
 * of every rank (parameters, gradients and optimizer state plus the schedule's peak activations)
 * and, when a rank does not fit its devices, which one and by how many bytes.
 */
public record Prediction(Candidate candidate, double stepSeconds, double bubble, long[] peakBytesPerRank,
                         int overflowRank, long overflowBytes, double tokensPerSecond) {
    public boolean fits() {
        return overflowRank < 0;
    }

    /** The largest peak over the ranks. */
    public long peakBytes() {
        long m = 0;
        for (long b : peakBytesPerRank) m = Math.max(m, b);
        return m;
    }
}

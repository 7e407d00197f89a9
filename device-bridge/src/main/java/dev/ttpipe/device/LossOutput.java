package dev.ttpipe.device;

/**
 * A cross-entropy forward: the sum of per-token losses over the tokens not equal to the ignore
 * index, and how many such tokens there were (so losses of several microbatches combine exactly).
 * The sim backend returns NaN for the sum.
 */
public record LossOutput(double sum, long count) {
    public double mean() {
        return count == 0 ? 0.0 : sum / count;
    }
}

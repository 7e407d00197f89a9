package dev.ttpipe.device;

/**
 * The result of {@link Ops#attention}: the output O and what {@link Ops#attentionBackward} needs (the
 * probabilities or per-row statistics, as the backend chose). The caller owns and closes both.
 */
public record AttentionOutput(Tensor out, Tensor saved) implements AutoCloseable {
    @Override
    public void close() {
        out.close();
        saved.close();
    }
}

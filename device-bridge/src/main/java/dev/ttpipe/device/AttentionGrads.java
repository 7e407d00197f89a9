package dev.ttpipe.device;

/** The gradients of {@link Ops#attention}'s q, k and v, owned by the caller. */
public record AttentionGrads(Tensor dq, Tensor dk, Tensor dv) implements AutoCloseable {
    @Override
    public void close() {
        dq.close();
        dk.close();
        dv.close();
    }
}

package dev.ttpipe.transport;

import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

/**
 * A tensor that has arrived for a stage but is not yet on its devices. The receiving stage calls
 * {@link #materialize} on its own device queue (so only that thread touches its submesh); a payload
 * that will never be used must be {@link #discard}ed. Exactly one of the two, once.
 */
public interface TensorPayload {
    FrameHeader header();

    /** The tensor on {@code dst}; the caller owns it. */
    Tensor materialize(Submesh dst);

    void discard();
}

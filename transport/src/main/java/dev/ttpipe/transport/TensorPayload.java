package dev.ttpipe.transport;

import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

/**
 * A tensor that has arrived for a stage, whose bytes may not yet be on its devices. The receiving
 * stage calls {@link #materialize} on its own device queue (so that any copy onto its submesh runs on
 * that thread; a transport that assembled the tensor in the submesh's memory already, through the
 * thread-safe {@link dev.ttpipe.device.spi.LocalPiecesOps#allocateLocal}, hands it over); a payload
 * that will never be used must be {@link #discard}ed, which frees what it holds. Exactly one of the
 * two, once.
 */
public interface TensorPayload {
    FrameHeader header();

    /** The tensor on {@code dst}; the caller owns it. */
    Tensor materialize(Submesh dst);

    void discard();
}

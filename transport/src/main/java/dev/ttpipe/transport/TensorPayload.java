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

    /**
     * When the frame's first chunk arrived at the receiver ({@link System#nanoTime()} of the receiving
     * process), or -1 where the transport does not time its frames (in-process hand-over, fabric). With
     * {@link #lastChunkNs} it is the time the frame's bytes took on the link, whatever it waited at the
     * sender before they were sent.
     */
    default long firstChunkNs() {
        return -1;
    }

    /** When the frame's last chunk had arrived and the frame was whole ({@link #firstChunkNs}'s clock), or -1. */
    default long lastChunkNs() {
        return -1;
    }
}

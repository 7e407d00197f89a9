package dev.ttpipe.device.spi;

import java.nio.ByteBuffer;

/**
 * A tensor whose per-device local pieces can be read as raw bytes, without going through fp32 host
 * arrays: what a byte transport (Aeron) sends. A piece is {@code localShape().numel() * dtype().bytes()}
 * bytes, the elements in row-major order, each in the platform's native byte order (little-endian on
 * every platform ttpipe runs on). {@link LocalPiecesOps#fromLocalBytes} is the way back, or, where the
 * backend's pieces are host memory, {@link LocalPiecesOps#allocateLocal} and {@link #writableView}
 * (a byte transport writes what arrives straight into the tensor).
 *
 * <p>Like {@link dev.ttpipe.device.Tensor}, used by one thread at a time: whoever owns the tensor.
 */
public interface LocalPieces {
    /**
     * Copies device {@code device}'s piece (row-major within the submesh) into {@code dst} at its
     * position and advances the position by the piece's length.
     *
     * @throws dev.ttpipe.device.DeviceException if the tensor is closed, the index is out of range
     *         or {@code dst} has fewer bytes remaining than the piece
     */
    void copyLocalTo(int device, ByteBuffer dst);

    /**
     * A read-only view of device {@code device}'s piece where it lies in host memory (position 0,
     * limit the piece's length, native byte order), or null where it does not (then use
     * {@link #copyLocalTo}). Valid only while the tensor and its mesh are open: the owner must not
     * close either while it reads the view.
     */
    ByteBuffer hostView(int device);

    /**
     * A writable view of device {@code device}'s piece where it lies in host memory (position 0,
     * limit the piece's length, native byte order), or null where it does not. For filling a tensor
     * from {@link LocalPiecesOps#allocateLocal} in place: the owner writes the piece's bytes through
     * it before handing the tensor on (the hand-over, e.g. an actor message, publishes the writes).
     * Valid only while the tensor and its mesh are open: the owner must not close either while it
     * writes through the view.
     */
    ByteBuffer writableView(int device);
}

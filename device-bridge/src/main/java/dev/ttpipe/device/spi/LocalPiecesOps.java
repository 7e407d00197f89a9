package dev.ttpipe.device.spi;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;

import java.nio.ByteBuffer;

/**
 * {@link dev.ttpipe.device.Ops} that build a tensor from raw per-device bytes, the inverse of
 * {@link LocalPieces}: one copy from the buffer into the devices' memory, no fp32 staging
 * ({@link #fromLocalBytes}), or none at all where the pieces are host memory: {@link #allocateLocal}
 * and {@link LocalPieces#writableView} let a byte transport assemble what arrives in place.
 * {@link #fromLocalBytes} is issued like any op, by the submesh's own thread; {@link #allocateLocal}
 * is thread-safe.
 */
public interface LocalPiecesOps {
    /**
     * A new tensor on this submesh whose device {@code i} holds the {@code i}-th piece of {@code src}:
     * the pieces lie back to back from {@code src.position()} (row-major device order), each
     * {@code localShape.numel() * dtype.bytes()} bytes of native-order elements, and
     * {@code src.remaining()} must be exactly their sum. Any layout, including Partial for float
     * types (each device's addend). {@code src}'s position and limit are left as they were.
     *
     * @throws dev.ttpipe.device.DeviceException on a null argument, an invalid layout, INT32 with
     *         Partial, or a byte count that does not match
     */
    Tensor fromLocalBytes(ByteBuffer src, Shape shape, Layout layout, DType dtype);

    /**
     * A new tensor on this submesh with uninitialised pieces, to be filled in place through
     * {@link LocalPieces#writableView}; null where the backend's pieces cannot be written that way
     * (then use {@link #fromLocalBytes}). Checks as {@link #fromLocalBytes} (less the byte count) and
     * charges the devices' memory as any allocation does.
     *
     * <p>Thread-safe, unlike the other ops: may be called from any thread, concurrently with the
     * submesh's own ops (a transport's receive thread allocates the tensor a frame arrives into).
     * The tensor belongs to the caller, who fills it and hands it to the submesh's thread.
     *
     * @throws dev.ttpipe.device.DeviceOutOfMemoryException if a device has no room for its piece
     * @throws dev.ttpipe.device.DeviceException on a null argument, an invalid layout, INT32 with
     *         Partial, or a closed mesh
     */
    Tensor allocateLocal(Shape shape, Layout layout, DType dtype);
}

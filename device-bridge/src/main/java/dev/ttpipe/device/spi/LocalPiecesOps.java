package dev.ttpipe.device.spi;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;

import java.nio.ByteBuffer;

/**
 * {@link dev.ttpipe.device.Ops} that build a tensor from raw per-device bytes, the inverse of
 * {@link LocalPieces}: one copy from the buffer into the devices' memory, no fp32 staging.
 * Issued like any op, by the submesh's own thread.
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
}

package dev.ttpipe.device;

/**
 * A tensor on a submesh: every device of the submesh holds a local piece (SPMD), related to the
 * logical tensor by the {@link Layout}. Ops that return a tensor allocate it on the same submesh;
 * the caller owns it and must {@link #close()} it (the memory goes back to the devices). A view
 * made by {@link Ops#reshape} shares its base's memory; the memory is released when the base and
 * all views are closed.
 *
 * <p>Not thread-safe: a tensor is used by one thread at a time (its stage's device queue).
 */
public interface Tensor extends AutoCloseable {
    /** The logical (global) shape. */
    Shape shape();

    /** The shape each device holds (sharded dimensions divided by their axis size). */
    Shape localShape();

    DType dtype();

    Layout layout();

    Submesh submesh();

    /** Bytes this tensor occupies on each device. */
    default long bytesPerDevice() {
        return localShape().numel() * dtype().bytes();
    }

    /**
     * The logical tensor as fp32 on the host, assembled from the devices per the layout: shards are
     * concatenated, replicas read once, partial addends summed. Synchronises with the device queue.
     * The sim backend, which stores no values, returns zeros of the right size.
     */
    float[] toHost();

    /** The local piece held by device {@code index} (row-major within the submesh), as fp32. */
    float[] toHostLocal(int index);

    /** Integer contents (INT32 tensors) assembled like {@link #toHost()}. */
    int[] toHostInts();

    boolean isClosed();

    @Override
    void close();
}

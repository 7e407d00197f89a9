package dev.ttpipe.device.spi;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

/**
 * The part of a {@link Tensor} every backend shares: logical and local shape, layout, dtype, the
 * submesh, and a reference to its {@link Storage}. Backends add how the pieces are read back.
 * Not thread-safe (as {@link Tensor}).
 */
public abstract class MeshTensor implements Tensor {
    private final Submesh submesh;
    private final Shape shape;
    private final Shape localShape;
    private Layout layout;
    private final DType dtype;
    private final Storage storage;
    private boolean closed;

    /** Takes over one reference to {@code storage}; {@code layout} must be normalised and valid for {@code shape}. */
    protected MeshTensor(Submesh submesh, Shape shape, Layout layout, DType dtype, Storage storage) {
        this.submesh = submesh;
        this.shape = shape;
        this.layout = layout;
        this.dtype = dtype;
        this.storage = storage;
        this.localShape = Sharding.localShape(shape, layout, submesh.shape());
    }

    @Override
    public final Shape shape() {
        return shape;
    }

    @Override
    public final Shape localShape() {
        return localShape;
    }

    @Override
    public final DType dtype() {
        return dtype;
    }

    @Override
    public final Layout layout() {
        return layout;
    }

    @Override
    public final Submesh submesh() {
        return submesh;
    }

    /**
     * Changes the layout without touching the pieces (an in-place all_reduce turns Partial into
     * Replicate); the local shape must stay the same. Views of this tensor keep their layout.
     */
    final void relayout(Layout newLayout) {
        if (!Sharding.localShape(shape, newLayout, submesh.shape()).equals(localShape)) {
            throw new IllegalStateException("relayout " + layout + " -> " + newLayout + " changes the local shape");
        }
        this.layout = newLayout;
    }

    public final Storage storage() {
        return storage;
    }

    /** Elements of the local piece each device holds. */
    public final long localNumel() {
        return localShape.numel();
    }

    @Override
    public boolean isClosed() {
        return closed || storage.isFreed() || meshClosed();
    }

    /** Whether the mesh this tensor lives on was closed (which frees every tensor on it). */
    protected abstract boolean meshClosed();

    @Override
    public void close() {
        if (closed) return;
        closed = true;
        storage.release();
    }

    /** Shape, dtype and layout, for error messages: {@code [4, 8] FP32 [S(0), R]}. */
    public String describe() {
        return shape + " " + dtype + " " + layout;
    }

    @Override
    public String toString() {
        return getClass().getSimpleName() + describe() + (isClosed() ? " (closed)" : "");
    }
}

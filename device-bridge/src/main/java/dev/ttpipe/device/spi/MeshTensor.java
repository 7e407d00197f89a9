package dev.ttpipe.device.spi;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

import java.nio.ByteBuffer;

/**
 * The part of a {@link Tensor} every backend shares: logical and local shape, layout, dtype, the
 * submesh, a reference to its {@link Storage}, and the checks and arrays of reading it back.
 * Backends add how the pieces are read ({@link #readHost}, {@link #readLocal}, {@link #readInts}).
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

    // ---- reading back --------------------------------------------------------------------------------

    @Override
    public final float[] toHost() {
        requireOpen("toHost");
        float[] out = new float[hostLength("toHost")];
        readHost(out);
        return out;
    }

    @Override
    public final float[] toHostLocal(int index) {
        requireOpen("toHostLocal");
        requireDevice("toHostLocal", index);
        float[] out = new float[(int) localNumel()];
        readLocal(index, out);
        return out;
    }

    @Override
    public final int[] toHostInts() {
        requireOpen("toHostInts");
        if (dtype != DType.INT32) throw new DeviceException("toHostInts: tensor " + describe() + " is not INT32; use toHost");
        int[] out = new int[hostLength("toHostInts")];
        readInts(out);
        return out;
    }

    /**
     * Fills {@code out} (zeros, the logical size) with the logical tensor as {@link Tensor#toHost}
     * describes, once the work issued on the submesh has finished. The tensor is open.
     */
    protected abstract void readHost(float[] out);

    /** Fills {@code out} (zeros, the local size) with device {@code device}'s piece, as {@link #readHost}. */
    protected abstract void readLocal(int device, float[] out);

    /** Fills {@code out} (zeros, the logical size) with this INT32 tensor, as {@link #readHost}. */
    protected abstract void readInts(int[] out);

    /**
     * The checks of {@link LocalPieces#copyLocalTo} for backends that offer it: the tensor is open,
     * {@code device} is one of the submesh's and {@code dst} has room for the piece. Returns the
     * piece's length in bytes.
     */
    protected final int checkCopyLocalTo(int device, ByteBuffer dst) {
        String op = "copyLocalTo";
        requireOpen(op);
        requireDevice(op, device);
        int len = (int) bytesPerDevice();
        if (dst.remaining() < len) {
            throw new DeviceException(op + ": the piece of " + describe() + " has " + len + " bytes, the buffer "
                    + dst.remaining() + " remaining");
        }
        return len;
    }

    /** Throws unless the tensor is open: the first check of every read. */
    protected final void requireOpen(String op) {
        if (isClosed()) throw new DeviceException(op + ": tensor " + shape + " is closed");
    }

    /** Throws unless {@code index} is a device of the submesh (row-major). */
    protected final void requireDevice(String op, int index) {
        MeshShape mesh = submesh.shape();
        if (index < 0 || index >= mesh.size()) {
            throw new DeviceException(op + ": device index " + index + " out of range for submesh " + mesh + " ("
                    + mesh.size() + " devices)");
        }
    }

    private int hostLength(String op) {
        long n = shape.numel();
        if (n > Integer.MAX_VALUE - 8) {
            throw new DeviceException(op + ": tensor " + shape + " has " + n + " elements, more than a Java array holds");
        }
        return (int) n;
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

package dev.ttpipe.device.sim;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.spi.LocalPieces;
import dev.ttpipe.device.spi.MeshTensor;

import java.nio.ByteBuffer;

/**
 * A sim tensor: shape, layout, dtype and memory accounting, no values. Reading it back waits for
 * its submesh's queue and returns zeros of the right size (as bytes too: {@link #copyLocalTo}).
 */
final class SimTensor extends MeshTensor implements LocalPieces {
    private static final byte[] ZEROS = new byte[8192];

    private final SimSubmesh submesh;

    SimTensor(SimSubmesh submesh, Shape shape, Layout layout, DType dtype, SimStorage storage) {
        super(submesh, shape, layout, dtype, storage);
        this.submesh = submesh;
    }

    @Override
    protected boolean meshClosed() {
        return submesh.simMesh().isClosed();
    }

    /** Zeros of the logical size, once every op issued on the submesh has finished. */
    @Override
    public float[] toHost() {
        requireOpen("toHost");
        submesh.synchronize();
        return new float[hostLength("toHost")];
    }

    /** Zeros of the local size, once every op issued on the submesh has finished. */
    @Override
    public float[] toHostLocal(int index) {
        requireOpen("toHostLocal");
        if (index < 0 || index >= submesh.shape().size()) {
            throw new DeviceException("toHostLocal: device index " + index + " out of range for submesh "
                    + submesh.shape() + " (" + submesh.shape().size() + " devices)");
        }
        submesh.synchronize();
        return new float[(int) localNumel()];
    }

    /** Zeros of the logical size, once every op issued on the submesh has finished. */
    @Override
    public int[] toHostInts() {
        requireOpen("toHostInts");
        if (dtype() != DType.INT32) throw new DeviceException("toHostInts: tensor " + describe() + " is not INT32");
        submesh.synchronize();
        return new int[hostLength("toHostInts")];
    }

    /** Zeros of the piece's length, once every op issued on the submesh has finished. */
    @Override
    public void copyLocalTo(int device, ByteBuffer dst) {
        requireOpen("copyLocalTo");
        if (device < 0 || device >= submesh.shape().size()) {
            throw new DeviceException("copyLocalTo: device index " + device + " out of range for submesh "
                    + submesh.shape() + " (" + submesh.shape().size() + " devices)");
        }
        int len = (int) bytesPerDevice();
        if (dst.remaining() < len) {
            throw new DeviceException("copyLocalTo: the piece of " + describe() + " has " + len + " bytes, the buffer "
                    + dst.remaining() + " remaining");
        }
        submesh.synchronize();
        for (int done = 0; done < len; done += ZEROS.length) dst.put(ZEROS, 0, Math.min(ZEROS.length, len - done));
    }

    /** Null: a sim tensor has no memory to view. */
    @Override
    public ByteBuffer hostView(int device) {
        return null;
    }

    private void requireOpen(String op) {
        if (isClosed()) throw new DeviceException(op + ": tensor " + shape() + " is closed");
    }

    private int hostLength(String op) {
        long n = shape().numel();
        if (n > Integer.MAX_VALUE - 8) {
            throw new DeviceException(op + ": tensor " + shape() + " has " + n + " elements, more than a Java array holds");
        }
        return (int) n;
    }
}

package dev.ttpipe.device.sim;

import dev.ttpipe.device.DType;
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

    /** Zeros (out as it is), once every op issued on the submesh has finished. */
    @Override
    protected void readHost(float[] out) {
        submesh.synchronize();
    }

    /** Zeros (out as it is), once every op issued on the submesh has finished. */
    @Override
    protected void readLocal(int device, float[] out) {
        submesh.synchronize();
    }

    /** Zeros (out as it is), once every op issued on the submesh has finished. */
    @Override
    protected void readInts(int[] out) {
        submesh.synchronize();
    }

    /**
     * Zeros of the piece's length, once the last op that touched this tensor has finished (a transport
     * sends it: work queued after it must not hold the sender up).
     */
    @Override
    public void copyLocalTo(int device, ByteBuffer dst) {
        int len = checkCopyLocalTo(device, dst);
        SimSubmesh.parkUntil(((SimStorage) storage()).readyAt());
        for (int done = 0; done < len; done += ZEROS.length) dst.put(ZEROS, 0, Math.min(ZEROS.length, len - done));
    }

    /** Null: a sim tensor has no memory to view. */
    @Override
    public ByteBuffer hostView(int device) {
        return null;
    }

    /** Null: a sim tensor has no memory to write. */
    @Override
    public ByteBuffer writableView(int device) {
        return null;
    }
}

package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.spi.LocalPieces;
import dev.ttpipe.device.spi.MeshTensor;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * A tensor of the cpu backend: one native buffer per device of its submesh. Its pieces are host
 * memory, so {@link #hostView} gives them to a byte transport without a copy, and
 * {@link #writableView} lets a byte transport assemble what it receives in place.
 */
final class CpuTensor extends MeshTensor implements LocalPieces {
    private final CpuSubmesh submesh;

    CpuTensor(CpuSubmesh submesh, Shape shape, Layout layout, DType dtype, CpuStorage storage) {
        super(submesh, shape, layout, dtype, storage);
        this.submesh = submesh;
    }

    NativeBuffer piece(int device) {
        return ((CpuStorage) storage()).piece(device);
    }

    CpuDevice device(int index) {
        return submesh.cpuDevice(index);
    }

    @Override
    protected boolean meshClosed() {
        return submesh.cpuMesh().isClosed();
    }

    @Override
    protected void readHost(float[] out) {
        whileMeshHoldsMemory(() -> HostCopy.read(this, out));
    }

    @Override
    protected void readLocal(int device, float[] out) {
        whileMeshHoldsMemory(() -> HostCopy.readLocal(this, device, out));
    }

    @Override
    protected void readInts(int[] out) {
        whileMeshHoldsMemory(() -> HostCopy.readInts(this, out));
    }

    @Override
    public void copyLocalTo(int device, ByteBuffer dst) {
        int len = checkCopyLocalTo(device, dst);
        submesh.cpuMesh().enter(); // not whileMeshHoldsMemory: a transport copies every piece, so no lambda
        try {
            dst.put(dst.position(), piece(device).bytes, 0, len);
            dst.position(dst.position() + len);
        } finally {
            submesh.cpuMesh().exit();
        }
    }

    @Override
    public ByteBuffer hostView(int device) {
        requireOpen("hostView");
        requireDevice("hostView", device);
        return piece(device).bytes.slice(0, (int) bytesPerDevice()).asReadOnlyBuffer().order(ByteOrder.nativeOrder());
    }

    @Override
    public ByteBuffer writableView(int device) {
        requireOpen("writableView");
        requireDevice("writableView", device);
        return piece(device).bytes.slice(0, (int) bytesPerDevice()).order(ByteOrder.nativeOrder());
    }

    /** Runs {@code read} keeping the mesh from freeing the pieces meanwhile (see {@link CpuMeshDevice#enter}). */
    private void whileMeshHoldsMemory(Runnable read) {
        submesh.cpuMesh().enter();
        try {
            read.run();
        } finally {
            submesh.cpuMesh().exit();
        }
    }
}

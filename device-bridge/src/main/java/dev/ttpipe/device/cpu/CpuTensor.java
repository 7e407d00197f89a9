package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.spi.LocalPieces;
import dev.ttpipe.device.spi.MeshTensor;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * A tensor of the cpu backend: one native buffer per device of its submesh. Its pieces are host
 * memory, so {@link #hostView} gives them to a byte transport without a copy.
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
    public float[] toHost() {
        requireOpen("toHost");
        submesh.cpuMesh().enter();
        try {
            return HostCopy.read(this);
        } finally {
            submesh.cpuMesh().exit();
        }
    }

    @Override
    public float[] toHostLocal(int index) {
        requireOpen("toHostLocal");
        if (index < 0 || index >= submesh.shape().size()) {
            throw new DeviceException("toHostLocal: device index " + index + " out of range for submesh "
                    + submesh.shape() + " (" + submesh.shape().size() + " devices)");
        }
        submesh.cpuMesh().enter();
        try {
            return HostCopy.readLocal(this, index);
        } finally {
            submesh.cpuMesh().exit();
        }
    }

    @Override
    public int[] toHostInts() {
        requireOpen("toHostInts");
        submesh.cpuMesh().enter();
        try {
            return HostCopy.readInts(this);
        } finally {
            submesh.cpuMesh().exit();
        }
    }

    @Override
    public void copyLocalTo(int device, ByteBuffer dst) {
        String op = "copyLocalTo";
        requireOpen(op);
        requireDevice(op, device);
        int len = (int) bytesPerDevice();
        if (dst.remaining() < len) {
            throw new DeviceException(op + ": the piece of " + describe() + " has " + len + " bytes, the buffer "
                    + dst.remaining() + " remaining");
        }
        submesh.cpuMesh().enter();
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

    private void requireDevice(String op, int index) {
        if (index < 0 || index >= submesh.shape().size()) {
            throw new DeviceException(op + ": device index " + index + " out of range for submesh "
                    + submesh.shape() + " (" + submesh.shape().size() + " devices)");
        }
    }

    private void requireOpen(String op) {
        if (isClosed()) throw new DeviceException(op + ": tensor " + shape() + " is closed");
    }
}

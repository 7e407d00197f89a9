package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.spi.MeshTensor;

/** A tensor of the cpu backend: one native buffer per device of its submesh. */
final class CpuTensor extends MeshTensor {
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

    private void requireOpen(String op) {
        if (isClosed()) throw new DeviceException(op + ": tensor " + shape() + " is closed");
    }
}

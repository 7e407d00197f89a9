package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.spi.MeshTensor;

/**
 * A tensor of the ttnn backend: owns one native tensor handle (the pieces on every device of its
 * submesh, in the local shape) and frees it on {@link #close}, once. A view owns a handle of its
 * own on the same pieces. Once the mesh is closed the library has freed everything, so close only
 * returns the Java accounting.
 */
final class TtnnTensor extends MeshTensor {
    private final TtnnSubmesh submesh;
    private long handle;

    TtnnTensor(TtnnSubmesh submesh, Shape shape, Layout layout, DType dtype, TtnnStorage storage, long handle) {
        super(submesh, shape, layout, dtype, storage);
        this.submesh = submesh;
        this.handle = handle;
    }

    /** The native handle (0 once closed). */
    long handle() {
        return handle;
    }

    @Override
    protected boolean meshClosed() {
        return submesh.ttnnMesh().isClosed();
    }

    @Override
    public float[] toHost() {
        requireOpen("toHost");
        float[] out = new float[hostLength("toHost")];
        int[] dims = shape().toArray();
        Bridge.check(NativeBridge.ttpipe_tensor_read(handle, dims.length, dims, TtnnOps.code(layout().axis0()),
                TtnnOps.code(layout().axis1()), out, out.length), "ttpipe_tensor_read", "toHost");
        return out;
    }

    @Override
    public float[] toHostLocal(int index) {
        requireOpen("toHostLocal");
        if (index < 0 || index >= submesh.shape().size()) {
            throw new DeviceException("toHostLocal: device index " + index + " out of range for submesh "
                    + submesh.shape() + " (" + submesh.shape().size() + " devices)");
        }
        float[] out = new float[(int) localNumel()];
        Bridge.check(NativeBridge.ttpipe_tensor_read_local(handle, index, out, out.length), "ttpipe_tensor_read_local",
                "toHostLocal");
        return out;
    }

    @Override
    public int[] toHostInts() {
        requireOpen("toHostInts");
        if (dtype() != DType.INT32) {
            throw new DeviceException("toHostInts: tensor " + describe() + " is not INT32; use toHost");
        }
        int[] out = new int[hostLength("toHostInts")];
        int[] dims = shape().toArray();
        Bridge.check(NativeBridge.ttpipe_tensor_read_ints(handle, dims.length, dims, TtnnOps.code(layout().axis0()),
                TtnnOps.code(layout().axis1()), out, out.length), "ttpipe_tensor_read_ints", "toHostInts");
        return out;
    }

    @Override
    public void close() {
        long h = handle;
        if (h != 0) {
            handle = 0;
            try {
                if (!meshClosed()) freeHandle(h);
            } finally {
                super.close();
            }
        }
    }

    private void freeHandle(long h) {
        int status = NativeBridge.ttpipe_tensor_free(h);
        // a close racing with the mesh's close finds the handle already freed by it
        if (status != Bridge.OK && !meshClosed()) throw Bridge.failure(status, "ttpipe_tensor_free", "close");
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

package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.DType;
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
    protected void readHost(float[] out) {
        int[] dims = shape().toArray();
        Bridge.check(NativeBridge.ttpipe_tensor_read(handle, dims.length, dims, TtnnOps.code(layout().axis0()),
                TtnnOps.code(layout().axis1()), out, out.length), "ttpipe_tensor_read", "toHost");
    }

    @Override
    protected void readLocal(int device, float[] out) {
        Bridge.check(NativeBridge.ttpipe_tensor_read_local(handle, device, out, out.length), "ttpipe_tensor_read_local",
                "toHostLocal");
    }

    @Override
    protected void readInts(int[] out) {
        int[] dims = shape().toArray();
        Bridge.check(NativeBridge.ttpipe_tensor_read_ints(handle, dims.length, dims, TtnnOps.code(layout().axis0()),
                TtnnOps.code(layout().axis1()), out, out.length), "ttpipe_tensor_read_ints", "toHostInts");
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
}

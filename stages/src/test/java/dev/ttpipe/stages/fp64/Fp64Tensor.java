package dev.ttpipe.stages.fp64;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.spi.DeviceMemory;
import dev.ttpipe.device.spi.MeshDeviceBase;
import dev.ttpipe.device.spi.MeshTensor;
import dev.ttpipe.device.spi.Storage;

import java.util.List;

/** A tensor of the fp64 mesh: one piece (one device), doubles for float dtypes, ints for INT32. */
final class Fp64Tensor extends MeshTensor {
    Fp64Tensor(Submesh submesh, Shape shape, Layout layout, DType dtype, Values values) {
        super(submesh, shape, layout, dtype, values);
    }

    /** The elements, row-major (shared with every view of the same storage). */
    double[] doubles() {
        return ((Values) storage()).doubles;
    }

    int[] ints() {
        return ((Values) storage()).ints;
    }

    @Override
    protected void readHost(float[] out) {
        readLocal(0, out);
    }

    @Override
    protected void readLocal(int device, float[] out) {
        if (dtype() == DType.INT32) {
            int[] v = ints();
            for (int i = 0; i < out.length; i++) out[i] = v[i];
        } else {
            double[] v = doubles();
            for (int i = 0; i < out.length; i++) out[i] = (float) v[i];
        }
    }

    @Override
    protected void readInts(int[] out) {
        System.arraycopy(ints(), 0, out, 0, out.length);
    }

    @Override
    protected boolean meshClosed() {
        return ((MeshDeviceBase) submesh().mesh()).isClosed();
    }

    /** The memory behind a tensor and its views. */
    static final class Values extends Storage {
        final double[] doubles;
        final int[] ints;

        Values(List<DeviceMemory> memories, DType dtype, int n) {
            super(memories, (long) n * (dtype == DType.INT32 ? 4 : 8));
            this.doubles = dtype == DType.INT32 ? null : new double[n];
            this.ints = dtype == DType.INT32 ? new int[n] : null;
        }

        @Override
        protected void freeBuffers() {
            // garbage-collected
        }
    }
}

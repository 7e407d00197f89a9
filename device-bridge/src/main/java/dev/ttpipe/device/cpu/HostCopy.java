package dev.ttpipe.device.cpu;

import dev.ttpipe.device.BFloat16;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.spi.Sharding;

/**
 * Host arrays to and from a tensor's pieces, per its layout: shards are cut out of (or pasted
 * into) the logical array row by row, replicas are written to every device and read once,
 * Partial addends are summed on the way back.
 */
final class HostCopy {
    private HostCopy() {
    }

    static void write(CpuTensor t, float[] data) {
        MeshShape mesh = t.submesh().shape();
        for (int d = 0; d < mesh.size(); d++) {
            LocalPiece lp = piece(t, d);
            NativeBuffer b = t.piece(d);
            int len = lp.rowLength();
            for (int r = 0; r < lp.rows(); r++) {
                int g = (int) lp.globalIndex(r);
                int o = r * len;
                if (t.dtype() == DType.FP32) {
                    b.floats.put(o, data, g, len);
                } else {
                    for (int j = 0; j < len; j++) Convert.write(b, t.dtype(), o + j, data[g + j]);
                }
            }
        }
    }

    static void writeInts(CpuTensor t, int[] data) {
        MeshShape mesh = t.submesh().shape();
        for (int d = 0; d < mesh.size(); d++) {
            LocalPiece lp = piece(t, d);
            int len = lp.rowLength();
            for (int r = 0; r < lp.rows(); r++) t.piece(d).ints.put(r * len, data, (int) lp.globalIndex(r), len);
        }
    }

    static void writeLocal(CpuTensor t, float[][] pieces) {
        for (int d = 0; d < pieces.length; d++) {
            NativeBuffer b = t.piece(d);
            if (t.dtype() == DType.FP32) {
                b.floats.put(0, pieces[d], 0, pieces[d].length);
            } else {
                for (int i = 0; i < pieces[d].length; i++) b.shorts.put(i, BFloat16.fromFloat(pieces[d][i]));
            }
        }
    }

    /** Assembles the logical tensor into {@code out} (zeros, the logical size: Partial addends are summed into it). */
    static void read(CpuTensor t, float[] out) {
        boolean partial = t.layout().hasPartial();
        MeshShape mesh = t.submesh().shape();
        for (int d = 0; d < mesh.size(); d++) {
            if (!Sharding.holdsDistinctPiece(t.layout(), mesh, d)) continue;
            LocalPiece lp = piece(t, d);
            NativeBuffer b = t.piece(d);
            int len = lp.rowLength();
            for (int r = 0; r < lp.rows(); r++) {
                int g = (int) lp.globalIndex(r);
                int o = r * len;
                if (!partial && t.dtype() == DType.FP32) {
                    b.floats.get(o, out, g, len);
                } else {
                    for (int j = 0; j < len; j++) out[g + j] += Convert.read(b, t.dtype(), o + j);
                }
            }
        }
    }

    static void readInts(CpuTensor t, int[] out) {
        MeshShape mesh = t.submesh().shape();
        for (int d = 0; d < mesh.size(); d++) {
            if (!Sharding.holdsDistinctPiece(t.layout(), mesh, d)) continue;
            LocalPiece lp = piece(t, d);
            int len = lp.rowLength();
            for (int r = 0; r < lp.rows(); r++) t.piece(d).ints.get(r * len, out, (int) lp.globalIndex(r), len);
        }
    }

    static void readLocal(CpuTensor t, int d, float[] out) {
        int n = out.length;
        NativeBuffer b = t.piece(d);
        if (t.dtype() == DType.FP32) {
            b.floats.get(0, out, 0, n);
        } else {
            for (int i = 0; i < n; i++) out[i] = Convert.read(b, t.dtype(), i);
        }
    }

    private static LocalPiece piece(CpuTensor t, int d) {
        return new LocalPiece(t.shape(), t.localShape(), t.layout(), t.submesh().shape(), d);
    }
}

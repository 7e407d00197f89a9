package dev.ttpipe.device.cpu;

import java.nio.IntBuffer;
import java.nio.ShortBuffer;

/**
 * Reorders the dims of one device's piece (a copy). Works on raw 4- or 2-byte elements, so any
 * dtype permutes without conversion. Parallel over output rows; each row is a strided gather.
 */
final class Permute {
    private Permute() {
    }

    /** Output dim i is input dim {@code perm[i]}; {@code inDims} is the input piece's shape. */
    static void permute(Parallel par, NativeBuffer out, NativeBuffer x, int[] inDims, int[] perm, int elemBytes) {
        int rank = inDims.length;
        long numel = 1;
        for (int d : inDims) numel *= d;
        if (numel == 0) return;
        if (rank <= 1) {
            out.bytes.put(0, x.bytes, 0, (int) numel * elemBytes);
            return;
        }
        int[] inStrides = new int[rank];
        int s = 1;
        for (int d = rank - 1; d >= 0; d--) {
            inStrides[d] = s;
            s *= inDims[d];
        }
        int[] outDims = new int[rank];
        int[] outInStride = new int[rank]; // input stride of each output dim
        for (int i = 0; i < rank; i++) {
            outDims[i] = inDims[perm[i]];
            outInStride[i] = inStrides[perm[i]];
        }
        int len = outDims[rank - 1];
        int step = outInStride[rank - 1];
        int rows = (int) (numel / len);
        if ((elemBytes == 4 || elemBytes == 2) && CpuNative.active()) {
            if ((long) elemBytes * numel > out.capacity || (long) elemBytes * numel > x.capacity) {
                throw new IndexOutOfBoundsException(numel + " elements in buffers of " + out.capacity + " and " + x.capacity + " bytes");
            }
            par.range(rows, Math.max(1, Elementwise.GRAIN / len), elemBytes == 4
                    ? (lo, hi) -> CpuNative.ttpipe_cpu_permute4(out.address, x.address, rank, outDims, outInStride, lo, hi, len, step)
                    : (lo, hi) -> CpuNative.ttpipe_cpu_permute2(out.address, x.address, rank, outDims, outInStride, lo, hi, len, step));
            return;
        }
        IntBuffer oi = out.ints;
        IntBuffer xi = x.ints;
        ShortBuffer os = out.shorts;
        ShortBuffer xs = x.shorts;
        par.range(rows, Math.max(1, Elementwise.GRAIN / len), (lo, hi) -> {
            for (int r = lo; r < hi; r++) {
                int ib = 0;
                int rem = r;
                for (int i = rank - 2; i >= 0; i--) {
                    ib += (rem % outDims[i]) * outInStride[i];
                    rem /= outDims[i];
                }
                int ob = r * len;
                if (elemBytes == 4) {
                    for (int j = 0; j < len; j++) oi.put(ob + j, xi.get(ib + j * step));
                } else {
                    for (int j = 0; j < len; j++) os.put(ob + j, xs.get(ib + j * step));
                }
            }
        });
    }
}

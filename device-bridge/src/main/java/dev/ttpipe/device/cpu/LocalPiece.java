package dev.ttpipe.device.cpu;

import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.spi.Sharding;

/**
 * Where one device's piece sits in the logical tensor, row by row: the piece is
 * {@link #rows()} rows of {@link #rowLength()} contiguous elements (its last dim), and row r
 * starts at logical (row-major) element {@link #globalIndex}. Rank-0 tensors are one row of one.
 */
final class LocalPiece {
    private final int[] localDims;   // all dims but the last
    private final long[] strides;    // logical strides of those dims
    private final long base;         // logical index of the piece's first element
    private final int rows;
    private final int rowLength;

    LocalPiece(Shape shape, Shape local, Layout layout, MeshShape mesh, int device) {
        int rank = shape.rank();
        int[] off = Sharding.offsets(local, layout, mesh, device);
        int outer = Math.max(0, rank - 1);
        localDims = new int[outer];
        strides = new long[outer];
        long stride = rank == 0 ? 1 : shape.dim(rank - 1);
        long b = rank == 0 ? 0 : off[rank - 1];
        for (int d = outer - 1; d >= 0; d--) {
            localDims[d] = local.dim(d);
            strides[d] = stride;
            b += off[d] * stride;
            stride *= shape.dim(d);
        }
        base = b;
        rowLength = rank == 0 ? 1 : local.dim(rank - 1);
        rows = rowLength == 0 ? 0 : (int) (local.numel() / rowLength);
    }

    int rows() {
        return rows;
    }

    int rowLength() {
        return rowLength;
    }

    /** Logical index of the first element of local row {@code r}. */
    long globalIndex(int r) {
        long g = base;
        for (int d = localDims.length - 1; d >= 0; d--) {
            int n = localDims[d];
            g += (r % n) * strides[d];
            r /= n;
        }
        return g;
    }
}

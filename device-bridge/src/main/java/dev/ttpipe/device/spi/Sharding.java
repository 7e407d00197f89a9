package dev.ttpipe.device.spi;

import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshCoord;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Placement;
import dev.ttpipe.device.Shape;

/**
 * Where each device's local piece sits in the logical tensor: local shapes, offsets along sharded
 * dimensions, which devices hold distinct pieces, and the peers of a device along a mesh axis.
 * Devices are numbered row-major within their submesh. Pure functions, shared by all backends.
 */
public final class Sharding {
    private Sharding() {
    }

    /** The shape each device holds: every sharded dimension divided by its mesh axis size. */
    public static Shape localShape(Shape shape, Layout layout, MeshShape mesh) {
        // Every tensor computes this at creation: a replicated one's pieces are the tensor (Shape is immutable).
        if (!(layout.on(0) instanceof Placement.Shard) && !(layout.on(1) instanceof Placement.Shard)) return shape;
        int[] d = shape.toArray();
        for (int axis = 0; axis < 2; axis++) {
            if (layout.on(axis) instanceof Placement.Shard s) d[s.dim()] /= mesh.axisSize(axis);
        }
        return Shape.of(d);
    }

    public static MeshCoord coord(MeshShape mesh, int deviceIndex) {
        return new MeshCoord(deviceIndex / mesh.cols(), deviceIndex % mesh.cols());
    }

    /** Offset of device {@code deviceIndex}'s piece along tensor dimension {@code dim} (0 unless sharded). */
    public static int offset(Shape localShape, Layout layout, MeshShape mesh, int deviceIndex, int dim) {
        int axis = layout.axisSharding(dim);
        if (axis < 0) return 0;
        return coord(mesh, deviceIndex).along(axis) * localShape.dim(dim);
    }

    /** {@link #offset} for every dimension. */
    public static int[] offsets(Shape localShape, Layout layout, MeshShape mesh, int deviceIndex) {
        int[] o = new int[localShape.rank()];
        for (int d = 0; d < o.length; d++) o[d] = offset(localShape, layout, mesh, deviceIndex, d);
        return o;
    }

    /**
     * Whether the device holds a piece that assembling the logical tensor must read: the first
     * replica on every Replicate axis (shards and partial addends are all distinct).
     */
    public static boolean holdsDistinctPiece(Layout layout, MeshShape mesh, int deviceIndex) {
        MeshCoord c = coord(mesh, deviceIndex);
        for (int axis = 0; axis < 2; axis++) {
            if (layout.on(axis) instanceof Placement.Replicate && c.along(axis) != 0) return false;
        }
        return true;
    }

    /** The device at position {@code j} along {@code axis} in the same row (axis 1) or column (axis 0) as {@code deviceIndex}. */
    public static int peer(MeshShape mesh, int deviceIndex, int axis, int j) {
        MeshCoord c = coord(mesh, deviceIndex);
        return axis == 0 ? j * mesh.cols() + c.col() : c.row() * mesh.cols() + j;
    }
}

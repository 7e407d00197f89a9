package dev.ttpipe.stages;

import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Placement;

/**
 * How a stage uses its submesh, following TTML's ParallelismContext: DDP takes the first mesh axis,
 * TP the next; with a {@code [1, N]} (or {@code [N, 1]}) submesh and one strategy enabled, that
 * strategy uses the N devices. Axis -1 means the strategy is off.
 */
public record Parallelism(int ddpAxis, int ddpSize, int tpAxis, int tpSize) {

    public static final Parallelism NONE = new Parallelism(-1, 1, -1, 1);

    public static Parallelism of(MeshShape shape, boolean enableDdp, boolean enableTp) {
        int rows = shape.rows(), cols = shape.cols();
        if (enableDdp && enableTp) {
            if (rows > 1 && cols > 1) return new Parallelism(0, rows, 1, cols);
        } else if (enableDdp || enableTp) {
            if (rows == 1 || cols == 1) {
                int axis = rows > 1 ? 0 : 1;
                int size = rows * cols;
                if (size == 1) return NONE;
                return enableDdp ? new Parallelism(axis, size, -1, 1) : new Parallelism(-1, 1, axis, size);
            }
        } else if (rows == 1 && cols == 1) {
            return NONE;
        }
        throw new StagesException("device_config.mesh_shape: " + shape + " cannot be used with enable_ddp: " + enableDdp
                + ", enable_tp: " + enableTp + "; expected [1, N] for one strategy, [D, T] with D, T > 1 for both, [1, 1] for none");
    }

    public boolean ddp() {
        return ddpAxis >= 0;
    }

    public boolean tp() {
        return tpAxis >= 0;
    }

    /** Activations [b, T, D]: the batch dim sharded over DDP, replicated over TP. */
    public Layout activations() {
        return ddp() ? Layout.shard(0, ddpAxis) : Layout.REPLICATED;
    }

    /** A layout with {@code dim} sharded over the TP axis (replicated elsewhere), or replicated without TP. */
    public Layout tpShard(int dim) {
        return tp() ? Layout.REPLICATED.with(tpAxis, Placement.shard(dim)) : Layout.REPLICATED;
    }

    /** Activations whose dim {@code dim} is split over TP (heads), batch over DDP. */
    public Layout activationsTpShard(int dim) {
        Layout l = activations();
        return tp() ? l.with(tpAxis, Placement.shard(dim)) : l;
    }

    /** A gradient accumulator for a weight of layout {@code weight}: pending sum over the DDP axis. */
    public Layout gradient(Layout weight) {
        return ddp() ? weight.with(ddpAxis, Placement.PARTIAL) : weight;
    }
}

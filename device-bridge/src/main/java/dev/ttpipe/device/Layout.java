package dev.ttpipe.device;

/**
 * A tensor's placement on each axis of its 2D submesh: {@code (axis0, axis1)}. Shard dimensions are
 * stored non-negative (normalised against the tensor's rank when the tensor is created).
 */
public record Layout(Placement axis0, Placement axis1) {
    public static final Layout REPLICATED = new Layout(Placement.REPLICATE, Placement.REPLICATE);

    /**
     * The layout {@code (axis0, axis1)}: {@link #REPLICATED} itself where both replicate (most tensors of a pipeline's
     * stage are, and every op derives its output's layout, so this spares an object per op).
     */
    public static Layout of(Placement axis0, Placement axis1) {
        return axis0 instanceof Placement.Replicate && axis1 instanceof Placement.Replicate ? REPLICATED : new Layout(axis0, axis1);
    }

    /** Shards tensor dimension {@code dim} over mesh axis {@code axis}, replicated on the other axis. */
    public static Layout shard(int dim, int axis) {
        return axis == 0 ? new Layout(Placement.shard(dim), Placement.REPLICATE)
                : new Layout(Placement.REPLICATE, Placement.shard(dim));
    }

    public Placement on(int axis) {
        if (axis == 0) return axis0;
        if (axis == 1) return axis1;
        throw new IllegalArgumentException("mesh axis " + axis + " out of range, expected 0 or 1");
    }

    public Layout with(int axis, Placement p) {
        return axis == 0 ? of(p, axis1) : of(axis0, p);
    }

    public boolean isReplicated() {
        return axis0 instanceof Placement.Replicate && axis1 instanceof Placement.Replicate;
    }

    public boolean hasPartial() {
        return axis0 instanceof Placement.Partial || axis1 instanceof Placement.Partial;
    }

    /** The mesh axis that shards tensor dimension {@code dim}, or -1. */
    public int axisSharding(int dim) {
        if (axis0 instanceof Placement.Shard s && s.dim() == dim) return 0;
        if (axis1 instanceof Placement.Shard s && s.dim() == dim) return 1;
        return -1;
    }

    @Override
    public String toString() {
        return "[" + axis0 + ", " + axis1 + "]";
    }
}

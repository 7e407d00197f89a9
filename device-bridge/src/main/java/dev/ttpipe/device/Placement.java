package dev.ttpipe.device;

/**
 * How a tensor relates to the devices along one mesh axis (the TTNN mesh-mapper idea, with the
 * pending-sum state that makes collectives checkable):
 * <ul>
 *   <li>{@link Replicate}: every device along the axis holds the whole (logical) tensor;</li>
 *   <li>{@link Shard}: device i along the axis holds slice i of tensor dimension {@code dim};</li>
 *   <li>{@link Partial}: every device holds a full-size addend; the logical tensor is their sum
 *       (what a matmul over a sharded contraction dimension produces; all_reduce or reduce_scatter
 *       resolves it).</li>
 * </ul>
 */
public sealed interface Placement {
    Replicate REPLICATE = new Replicate();
    Partial PARTIAL = new Partial();

    static Shard shard(int dim) {
        return new Shard(dim);
    }

    record Replicate() implements Placement {
        @Override
        public String toString() {
            return "R";
        }
    }

    record Shard(int dim) implements Placement {
        @Override
        public String toString() {
            return "S(" + dim + ")";
        }
    }

    record Partial() implements Placement {
        @Override
        public String toString() {
            return "P";
        }
    }
}

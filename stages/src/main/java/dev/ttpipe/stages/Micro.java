package dev.ttpipe.stages;

/**
 * Which microbatch a layer call belongs to: the forward pass number (for dropout masks), the
 * microbatch index, whether forward must keep what backward needs ({@code stash}; false while
 * recomputation is deferred), and whether this is training (dropout on) or inference.
 */
record Micro(int step, int mb, boolean stash, boolean train) {
    static Micro training(int pass, int mb) {
        return new Micro(pass, mb, true, true);
    }

    static final Micro INFERENCE = new Micro(0, 0, false, false);

    Micro withStash(boolean s) {
        return new Micro(step, mb, s, train);
    }
}

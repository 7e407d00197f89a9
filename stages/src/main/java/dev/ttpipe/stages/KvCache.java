package dev.ttpipe.stages;

/**
 * The keys and values of the tokens decoded so far, per block of one stage, for generation one token
 * at a time ({@link Stage#decode}): each new token's query attends to them instead of the prefix
 * being run again. Kept in host memory, rotary positions already applied to the keys, one array per
 * block of {@code capacity x kvHeads x headDim} floats. Not thread-safe.
 */
public final class KvCache {
    final int capacity, kvHeads, headDim;
    final float[][] keys, values;
    int length;

    KvCache(int blocks, int capacity, int kvHeads, int headDim) {
        this.capacity = capacity;
        this.kvHeads = kvHeads;
        this.headDim = headDim;
        this.keys = new float[blocks][capacity * kvHeads * headDim];
        this.values = new float[blocks][capacity * kvHeads * headDim];
    }

    /** Tokens held. */
    public int length() {
        return length;
    }

    public int capacity() {
        return capacity;
    }
}

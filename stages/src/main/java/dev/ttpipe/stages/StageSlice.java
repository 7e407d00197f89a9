package dev.ttpipe.stages;

/**
 * What one pipeline stage holds: blocks {@code [firstBlock, endBlock)}, plus the embeddings on the
 * first stage and the final norm, head and loss on the last. {@code rank} is the pipeline rank
 * (process / submesh) that runs it; with virtual stages a rank runs several slices.
 */
public record StageSlice(int index, int rank, int firstBlock, int endBlock, boolean embedding, boolean head) {
    public int blocks() {
        return endBlock - firstBlock;
    }

    @Override
    public String toString() {
        String parts = (embedding ? "embed+" : "") + "blocks " + firstBlock + ".." + (endBlock - 1) + (head ? "+head" : "");
        if (endBlock == firstBlock) parts = (embedding ? "embed" : "") + (head ? (embedding ? "+" : "") + "head" : "");
        return "stage " + index + " (rank " + rank + ": " + parts + ")";
    }
}

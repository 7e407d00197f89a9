package dev.ttpipe.stages.data;

/**
 * A batch of {@code size} sequences of {@code seqLen} tokens, row-major: {@code inputs[i*seqLen + t]}
 * and the next-token {@code targets} (a target equal to the ignore index does not count in the loss).
 */
public record Batch(int size, int seqLen, int[] inputs, int[] targets) {
    /** Rows {@code [from, from + count)} as a batch of its own (a microbatch). */
    public Batch slice(int from, int count) {
        int[] in = new int[count * seqLen];
        int[] tg = new int[count * seqLen];
        System.arraycopy(inputs, from * seqLen, in, 0, in.length);
        System.arraycopy(targets, from * seqLen, tg, 0, tg.length);
        return new Batch(count, seqLen, in, tg);
    }

    /** Targets that count in the loss (not equal to {@code ignoreIndex}). */
    public long countedTargets(int ignoreIndex) {
        long n = 0;
        for (int t : targets) if (t != ignoreIndex) n++;
        return n;
    }
}

package dev.ttpipe.stages;

import java.util.Arrays;
import java.util.Random;

/**
 * Picks the next token from logits: the likeliest when {@code temperature} is 0, otherwise a draw from
 * softmax(logits / temperature), restricted to the {@code topK} likeliest when {@code topK} > 0, from one
 * generator seeded with {@code seed}. One sampler per generated sequence: the same seed and the same logits
 * give the same tokens, whichever process (one, or a pipeline's coordinator) runs it. Only ids below
 * {@code sampledIds} are ever chosen: a model's vocabulary may be padded beyond its tokenizer's (TTML rounds
 * vocab_size up to tiles of 32), and those padding ids stand for no text. Not thread-safe.
 */
public final class Sampler {
    private final double temperature;
    private final int topK;
    private final int sampledIds;
    private final Random rng;

    public Sampler(double temperature, int topK, long seed, int sampledIds) {
        if (sampledIds < 1) throw new IllegalArgumentException("sampledIds " + sampledIds + ", expected at least 1");
        this.temperature = temperature;
        this.topK = topK;
        this.sampledIds = sampledIds;
        this.rng = new Random(seed);
    }

    /** The next token from the {@code v} logits at {@code logits[base ..]} (the first sampledIds of them). */
    public int next(float[] logits, int base, int all) {
        int v = Math.min(all, sampledIds);
        int best = 0;
        for (int j = 1; j < v; j++) if (logits[base + j] > logits[base + best]) best = j;
        if (temperature <= 0) return best;
        double[] p = new double[v];
        double cutoff = Double.NEGATIVE_INFINITY;
        if (topK > 0 && topK < v) {
            float[] sorted = Arrays.copyOfRange(logits, base, base + v);
            Arrays.sort(sorted);
            cutoff = sorted[v - topK];
        }
        double z = 0;
        for (int j = 0; j < v; j++) {
            p[j] = logits[base + j] < cutoff ? 0 : Math.exp((logits[base + j] - logits[base + best]) / temperature);
            z += p[j];
        }
        double r = rng.nextDouble() * z;
        for (int j = 0; j < v; j++) {
            r -= p[j];
            if (r <= 0) return j;
        }
        return best;
    }

    /** The next token from a whole array of logits (one position's). */
    public int next(float[] logits) {
        return next(logits, 0, logits.length);
    }
}

package dev.ttpipe.stages;

/**
 * A model, partition or training setting that cannot work (a bad {@code blocks_per_rank}, heads
 * that do not divide the embedding, ...). The message names the config key, the value and what was
 * expected; the CLI prints it as one line with exit code 2.
 */
public final class StagesException extends RuntimeException {
    public StagesException(String message) {
        super(message);
    }
}

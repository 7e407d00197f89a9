package dev.ttpipe.stages.checkpoint;

/** A checkpoint (or a safetensors file) that cannot be used, with the file and what is wrong. Bad input: exit code 2. */
public final class CheckpointException extends RuntimeException {
    public CheckpointException(String message) {
        super(message);
    }
}

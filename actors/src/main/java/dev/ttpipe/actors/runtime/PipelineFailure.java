package dev.ttpipe.actors.runtime;

/** A pipeline step that failed: names the rank, the stage, the action and the microbatch where it did. */
public final class PipelineFailure extends RuntimeException {
    public PipelineFailure(String message) {
        super(message);
    }

    public PipelineFailure(String message, Throwable cause) {
        super(message, cause);
    }
}

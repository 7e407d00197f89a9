package dev.ttpipe.actors.config;

/** {@code pipeline_parallel_config.mode}: how a rank picks its next action. */
public enum PipelineMode {
    /** The schedule's order, action by action. */
    STATIC,
    /** Whichever F/I/B/W is ready, within the static schedule's per-stage in-flight limit. */
    READY_FIRST;

    /** The name in configs: {@code static}, {@code ready-first} ({@code ready_first} is read too). */
    public String id() {
        return this == STATIC ? "static" : "ready-first";
    }

    @Override
    public String toString() {
        return id();
    }
}

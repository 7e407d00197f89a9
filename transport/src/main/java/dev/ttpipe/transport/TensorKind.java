package dev.ttpipe.transport;

/** What a frame carries between stages. */
public enum TensorKind {
    /** A forward activation, from stage s to stage s + 1. */
    ACTIVATION,
    /** An input gradient, from stage s to stage s - 1. */
    GRADIENT;

    public static TensorKind of(int code) {
        return values()[code];
    }
}

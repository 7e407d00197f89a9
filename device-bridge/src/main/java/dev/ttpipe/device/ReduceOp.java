package dev.ttpipe.device;

/** Reduction of a collective. */
public enum ReduceOp {
    SUM,
    MEAN
}

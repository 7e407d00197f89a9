package dev.ttpipe.schedules;

/**
 * What an {@link Action} does. The text form of a kind is its name ({@code F}, {@code SEND_B},
 * ...), exactly as in torch.distributed.pipelining's schedule CSVs.
 *
 * <p>Communication follows torch's convention, always named from the stage that runs it:
 * {@code sSEND_Fm} sends stage s's forward output for microbatch m to stage s+1, {@code sRECV_Fm}
 * receives stage s's forward input from stage s-1, {@code sSEND_Bm} sends stage s's input gradient
 * to stage s-1 and {@code sRECV_Bm} receives stage s's output gradient from stage s+1.
 */
public enum ActionKind {
    /** Forward. */
    F,
    /** Full backward: input gradient and weight gradient together ({@code B == I + W}). */
    B,
    /** Backward for the input gradient only (the part the previous stage waits for). */
    I,
    /** Backward for the weight gradient only; needs the I of the same stage and microbatch. */
    W,
    SEND_F,
    RECV_F,
    SEND_B,
    RECV_B,
    /** Data-parallel gradient reduction of a stage, once per step; the microbatch is optional. */
    REDUCE_GRAD,
    /** The optimizer update of a stage, once per step; the microbatch is optional. */
    OPTIMIZER_STEP;

    /** F, B, I or W: work on the stage's layers. */
    public boolean isCompute() {
        return this == F || this == B || this == I || this == W;
    }

    /** SEND_F, RECV_F, SEND_B or RECV_B: point-to-point transfer between neighbouring stages. */
    public boolean isComm() {
        return this == SEND_F || this == RECV_F || this == SEND_B || this == RECV_B;
    }

    /** Whether an action of this kind must name a microbatch (all but REDUCE_GRAD and OPTIMIZER_STEP). */
    public boolean needsMicrobatch() {
        return this != REDUCE_GRAD && this != OPTIMIZER_STEP;
    }
}

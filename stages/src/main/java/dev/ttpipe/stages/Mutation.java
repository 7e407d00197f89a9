package dev.ttpipe.stages;

/**
 * Deliberate errors, one backward formula at a time, for the tests that show a check fails when the
 * math is wrong: a gradient check that still passes under one of these proves nothing. At most one
 * is active, none in a real run. Only tests switch one on: {@link #set} is package-private, and
 * other modules' tests reach it through a test-scope class of this package. Off, each costs one
 * volatile read per layer call.
 */
public enum Mutation {
    /** Attention: dQ negated. */
    NEGATE_DQ,
    /** Attention (Llama): the gradients of q and k are not rotated back by the inverse RoPE. */
    DROP_ROPE_INVERSE,
    /** Attention (GQA): each key/value head takes the gradient of the first query head of its group, not the group's sum. */
    SKIP_GQA_SUM,
    /** Attention (Qwen3): the gradients of q and k pass the per-head RMSNorm unchanged (its input gradient left out). */
    SKIP_QK_NORM_BACKWARD,
    /** Attention: the softmax backward without the 1/sqrt(hd) scale of the scores. */
    DROP_SOFTMAX_SCALE,
    /** LayerNorm (GPT-2): gamma's gradient scaled by 1.001. */
    SCALE_LAYERNORM_DGAMMA,
    /** SwiGLU (Llama): the up projection's gradient multiplied by the gate's pre-activation instead of silu of it. */
    SWIGLU_WRONG_GATE,
    /** Block: the gradient of the second residual branch loses its skip path (only the MLP's part goes on). */
    DROP_RESIDUAL_GRADIENT,
    /** Block: the dropout backward lets the gradient through without the mask. */
    UNMASKED_DROPOUT_BACKWARD;

    private static volatile Mutation active;

    /** Whether {@code m} is the active mutation (false in every real run). */
    public static boolean on(Mutation m) {
        return active == m;
    }

    /** Activates {@code m} (null: none). Tests only. */
    static void set(Mutation m) {
        active = m;
    }
}

package dev.ttpipe.stages;

import dev.ttpipe.device.Submesh;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Tests of the gradient checks: with one backward formula made wrong ({@link Mutation}), the fp64
 * gradient check of the module that uses it fails, naming the first element off. Without a
 * mutation the same checks pass ({@link GradientCheckTest}).
 */
class MutationTest {
    static final Submesh fp64 = GradientCheck.FP64;

    @AfterEach
    void off() {
        Mutation.set(null);
    }

    /** The gradient that carries {@code m}'s error first: the weight right behind the wrong formula. */
    private static String carrier(Mutation m) {
        return switch (m) {
            case NEGATE_DQ, DROP_ROPE_INVERSE, DROP_SOFTMAX_SCALE, SKIP_QK_NORM_BACKWARD -> "blocks.1.attn.wq.weight";
            case SKIP_GQA_SUM -> "blocks.1.attn.wk.weight";
            case SCALE_LAYERNORM_DGAMMA -> "blocks.1.norm1.gamma";
            case SWIGLU_WRONG_GATE -> "blocks.1.mlp.w3.weight";
            case UNMASKED_DROPOUT_BACKWARD -> "blocks.1.mlp.w2.weight";
            case DROP_RESIDUAL_GRADIENT -> "input";
        };
    }

    /** The check of {@code tensor} in the block that uses {@code m}'s formula (Llama for RoPE, GQA, SwiGLU; Qwen3 for q/k norms). */
    private static void check(Mutation m, String tensor, boolean wholeBlock) {
        ModelSpec spec = switch (m) {
            case DROP_ROPE_INVERSE, SKIP_GQA_SUM, SWIGLU_WRONG_GATE -> GradientCheck.llama(0f);
            case SKIP_QK_NORM_BACKWARD -> GradientCheck.qwen3(0f);
            case UNMASKED_DROPOUT_BACKWARD -> GradientCheck.gpt2(0.25f);
            default -> GradientCheck.gpt2(0f);
        };
        GradientCheck.check(m + " " + spec.type(), spec, GradientCheck.block(1), fp64,
                t -> wholeBlock || t.equals(tensor));
    }

    @ParameterizedTest
    @EnumSource(Mutation.class)
    void aWrongBackwardFormulaFailsTheGradientCheckOfTheWeightBehindIt(Mutation m) {
        String tensor = carrier(m);
        check(m, tensor, false); // passes unmutated
        Mutation.set(m);
        AssertionError e = assertThrows(AssertionError.class, () -> check(m, tensor, false),
                m + " should fail the gradient check of " + tensor);
        System.out.println("mutation " + m + ": " + e.getMessage());
        assertTrue(e.getMessage().contains("d L / d " + tensor + "["), e.getMessage());
    }

    @ParameterizedTest
    @EnumSource(Mutation.class)
    void aWrongBackwardFormulaFailsTheWholeBlocksGradientCheck(Mutation m) {
        Mutation.set(m);
        AssertionError e = assertThrows(AssertionError.class, () -> check(m, null, true), m + " should fail");
        assertTrue(e.getMessage().contains("finite differences"), e.getMessage());
    }
}

package dev.ttpipe.stages;

import dev.ttpipe.device.Layout;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.stages.fp64.Fp64Ops;
import dev.ttpipe.stages.independent.PlainTransformer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * A whole 2-block GPT-2, a whole 2-block Llama (GQA, RoPE, SwiGLU; also with Llama 3.1's rope scaling) and
 * a whole 2-block Qwen3 (per-head q/k RMSNorms, head size apart from D / H, untied head) through the stages
 * on the fp64 mesh against {@link PlainTransformer}, an fp64 model written from the math with its own forward and
 * backward and no ttpipe code: the loss and every element of every gradient agree within 1e-9
 * relative on a fixed batch. The gradient checks show the stages' backward is the derivative of their
 * forward; this shows their forward is the model it claims to be.
 */
class IndependentReferenceTest {
    static final double TOLERANCE = 1e-9;
    static final int B = 2, T = 8;

    static final Submesh fp64 = GradientCheck.FP64;

    @ParameterizedTest
    @EnumSource(ModelSpec.ModelType.class)
    void twoBlockModelLossAndEveryGradientMatchTheIndependentFp64Reference(ModelSpec.ModelType type) {
        check(type.toString(), GradientCheck.model(type, 0f), null);   // Qwen3: q/k norms, head size 4 where D / H is 6, untied head
    }

    /**
     * Llama 3.1's rope scaling: head size 16 (1/sqrt(hd) exact in fp32, as the stages pass it) has
     * wavelengths from 6.3 to 19869 positions, which with 128 original positions, low_freq_factor 1 and
     * high_freq_factor 4 fall in each of the formula's three ranges (kept below 32, blended up to 128,
     * divided by the factor above). The reference turns by the frequencies
     * {@link PlainTransformer#llama3InverseFrequencies} computes from Hugging Face's formula.
     */
    @Test
    void llamaWithRopeScalingMatchesTheIndependentReferenceOnHuggingFacesFrequencies() {
        ModelSpec spec = new ModelSpec(ModelSpec.ModelType.LLAMA, 11, 32, 2, 1, 2, 24, 8, 0f, false, 10000f, false)
                .withRopeScaling(new RopeFrequencies.Llama3Scaling(4, 1, 4, 128));
        double[] invFreq = PlainTransformer.llama3InverseFrequencies(10000, spec.headDim(), 4, 1, 4, 128);
        double[] plain = PlainTransformer.llama3InverseFrequencies(10000, spec.headDim(), 1, 1, 4, 128);
        assertTrue(invFreq[0] == plain[0] && invFreq[1] == plain[1] && invFreq[2] < plain[2] && invFreq[2] > plain[2] / 4
                        && invFreq[7] == plain[7] / 4,
                "the frequencies cover the kept, blended and divided ranges: " + Arrays.toString(invFreq));
        check("LLAMA with rope_scaling", spec, invFreq);
    }

    /** The stages on the fp64 mesh against {@link PlainTransformer} with {@code invFreq} (null: theta^(-2i/hd)). */
    static void check(String label, ModelSpec spec, double[] invFreq) {
        Random rng = new Random(31);
        int[] ids = GradientCheck.ints(rng, B * T, spec.vocabSize());
        int[] targets = GradientCheck.ints(rng, B * T, spec.vocabSize());
        targets[5] = Head.IGNORE_INDEX;
        Fp64Ops ops = (Fp64Ops) fp64.ops();
        try (Stage stage = new Stage(spec, GradientCheck.WHOLE, fp64, Parallelism.NONE, 41)) {
            GradientCheck.rescale(stage, rng);
            Map<String, double[]> weights = new LinkedHashMap<>();
            for (Param p : stage.parameters()) weights.put(referenceName(p.name()), Fp64Ops.data(p.value()).clone());
            PlainTransformer ref = new PlainTransformer(spec.isLlama(), spec.qkNorm(), spec.vocabSize(), spec.embeddingDim(),
                    spec.numHeads(), spec.numKvHeads(), spec.headDim(), spec.intermediateDim(), spec.numBlocks(), spec.normEps(),
                    spec.ropeTheta(), invFreq, weights);
            PlainTransformer.Result expected = ref.lossAndGradients(ids, targets, B, T, Head.IGNORE_INDEX);

            stage.setTargets(0, ops.fromHostInts(targets, Shape.of(B, T), Layout.REPLICATED), 1f);
            stage.forward(0, 0, ops.fromHostInts(ids, Shape.of(B, T), Layout.REPLICATED));
            double loss = stage.loss(0).sum();
            stage.backward(0, 0, null);
            stage.reduceGradients();

            double lossErr = Math.abs(loss - expected.loss()) / Math.abs(expected.loss());
            assertTrue(lossErr <= TOLERANCE, "loss " + loss + " vs the reference's " + expected.loss());
            long elements = 0;
            double worst = 0;
            String worstAt = "-";
            for (Param p : stage.parameters()) {
                double[] got = Fp64Ops.data(p.fullGrad());
                double[] want = expected.grads().get(referenceName(p.name()));
                assertEquals(want.length, got.length, p.name());
                for (int i = 0; i < got.length; i++) {
                    double size = Math.max(Math.abs(got[i]), Math.abs(want[i]));
                    double err = Math.abs(got[i] - want[i]);
                    if (err > TOLERANCE * size + 1e-15) {
                        fail(String.format(Locale.ROOT, "%s: d L / d %s[%d]: stages %.15g, independent reference %.15g",
                                label, p.name(), i, got[i], want[i]));
                    }
                    if (size > 1e-6 && err / size > worst) {
                        worst = err / size;
                        worstAt = p.name() + "[" + i + "]";
                    }
                    elements++;
                }
            }
            assertEquals(expected.grads().size(), stage.parameters().size(), "every reference weight has a stage parameter");
            System.out.printf(Locale.ROOT, "independent reference, %s 2 blocks: loss %.12f (rel err %.1e), %d gradient elements, "
                    + "max rel err %.2e (%s)%n", label, loss, lossErr, elements, worst, worstAt);
        }
    }

    /** The stages' parameter names in the reference's own naming. */
    static String referenceName(String stagesName) {
        String[] part = stagesName.split("\\.");
        switch (stagesName) {
            case "embed.tokens": return "tok_emb";
            case "embed.positions": return "pos_emb";
            case "head.lm": return "lm.w";
            case "head.norm.gamma": return "lnf.g";
            case "head.norm.beta": return "lnf.b";
            default: break;
        }
        // blocks.<l>.<module>.<sub>.<weight|bias|gamma|beta>
        String layer = part[1];
        String kind = switch (part[part.length - 1]) {
            case "weight" -> "w";
            case "gamma" -> "g";
            default -> "b";                                     // bias, beta
        };
        String module = switch (part[2] + "." + part[3]) {
            case "norm1.gamma", "norm1.beta" -> "ln1";
            case "norm2.gamma", "norm2.beta" -> "ln2";
            case "attn.q_norm" -> "qn";
            case "attn.k_norm" -> "kn";
            case "attn.wq" -> "q";
            case "attn.wk" -> "k";
            case "attn.wv" -> "v";
            case "attn.wo" -> "o";
            case "mlp.w1" -> "fc1";
            case "mlp.w2" -> "fc2";
            case "mlp.w3" -> "up";
            default -> throw new IllegalArgumentException("no reference name for " + stagesName);
        };
        return layer + "." + module + "." + kind;
    }
}

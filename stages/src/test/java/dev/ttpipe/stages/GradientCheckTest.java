package dev.ttpipe.stages;

import dev.ttpipe.device.Submesh;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Every module's backward against central finite differences of its forward, in fp64, every element
 * of every gradient (see {@link GradientCheck}): a GPT-2 block, a Llama block (RoPE, grouped-query
 * attention, SwiGLU), the embeddings, the head with its loss, and whole 2-block models, with dropout
 * off and on. {@link MutationTest} shows that each of several wrong backward formulas fails them.
 */
class GradientCheckTest {
    static final Submesh fp64 = GradientCheck.FP64;

    private static void check(String name, ModelSpec spec, StageSlice slice) {
        GradientCheck.Report r = GradientCheck.check(name + (spec.dropout() > 0 ? " dropout " + spec.dropout() : ""), spec,
                slice, fp64);
        System.out.println("gradient check: " + r);
        assertTrue(r.minRms() > 0.02, r.name() + ": the gradient of " + r.minRmsParam() + " is too small (RMS "
                + r.minRms() + ") for the check to mean anything");
    }

    @ParameterizedTest(name = "dropout {0}")
    @ValueSource(floats = {0f, 0.25f})
    void gpt2BlockGradientsMatchFiniteDifferencesInEveryElement(float dropout) {
        check("gpt2 block", GradientCheck.gpt2(dropout), GradientCheck.block(1));
    }

    @ParameterizedTest(name = "dropout {0}")
    @ValueSource(floats = {0f, 0.25f})
    void llamaBlockGradientsMatchFiniteDifferencesInEveryElement(float dropout) {
        check("llama block", GradientCheck.llama(dropout), GradientCheck.block(1));
    }

    @ParameterizedTest(name = "dropout {0}")
    @ValueSource(floats = {0f, 0.25f})
    void embeddingGradientsMatchFiniteDifferencesInEveryElement(float dropout) {
        check("gpt2 embeddings", GradientCheck.gpt2(dropout), GradientCheck.EMBEDDINGS);
        check("llama embeddings", GradientCheck.llama(dropout), GradientCheck.EMBEDDINGS);
    }

    @Test
    void headAndLossGradientsMatchFiniteDifferencesInEveryElement() {
        check("gpt2 head and loss", GradientCheck.gpt2(0f), GradientCheck.HEAD);
        check("llama head and loss", GradientCheck.llama(0f), GradientCheck.HEAD);
    }

    @ParameterizedTest(name = "dropout {0}")
    @ValueSource(floats = {0f, 0.25f})
    void wholeTwoBlockGpt2GradientsMatchFiniteDifferencesInEveryElement(float dropout) {
        check("gpt2 2-block model", GradientCheck.gpt2(dropout), GradientCheck.WHOLE);
    }

    @ParameterizedTest(name = "dropout {0}")
    @ValueSource(floats = {0f, 0.25f})
    void wholeTwoBlockLlamaGradientsMatchFiniteDifferencesInEveryElement(float dropout) {
        check("llama 2-block model", GradientCheck.llama(dropout), GradientCheck.WHOLE);
    }

    @Test
    void tiedEmbeddingGradientsMatchFiniteDifferencesInEveryElement() {
        ModelSpec tied = new ModelSpec(ModelSpec.ModelType.GPT2, 11, 16, 2, 2, 1, 24, 8, 0f, true, 10000f, false);
        check("gpt2 tied 1-block model", tied, new StageSlice(0, 0, 0, 1, true, true));
    }

    @Test
    void recomputedBlocksGradientsMatchFiniteDifferencesInEveryElement() {
        ModelSpec s = GradientCheck.llama(0.25f);
        ModelSpec recompute = new ModelSpec(s.type(), s.vocabSize(), s.embeddingDim(), s.numHeads(), s.numKvHeads(),
                s.numBlocks(), s.intermediateDim(), s.maxSequenceLength(), s.dropout(), false, s.ropeTheta(), true);
        check("llama 2 blocks, recomputed", recompute, new StageSlice(1, 0, 0, 2, false, false));
    }
}

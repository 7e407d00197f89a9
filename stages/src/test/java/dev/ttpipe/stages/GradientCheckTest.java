package dev.ttpipe.stages;

import dev.ttpipe.device.Submesh;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Every module's backward against central finite differences of its forward, in fp64, every element
 * of every gradient (see {@link GradientCheck}): a GPT-2 block, a Llama block (RoPE, grouped-query
 * attention, SwiGLU), a Llama block with Llama 3.1's rope scaling, a Qwen3 block (per-head q/k RMSNorms,
 * a head size that is not D / H), the embeddings, the head with its loss, and whole 2-block models
 * (Qwen3's with its untied head, and tied on one block), with dropout off and on. {@link MutationTest} shows that each of several wrong backward formulas fails them.
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
    void llamaBlockWithRopeScalingGradientsMatchFiniteDifferencesInEveryElement(float dropout) {
        check("llama 3.1 rope_scaling block", GradientCheck.llama31(dropout), GradientCheck.block(1));
    }

    @ParameterizedTest(name = "dropout {0}")
    @ValueSource(floats = {0f, 0.25f})
    void qwen3BlockGradientsMatchFiniteDifferencesInEveryElement(float dropout) {
        check("qwen3 block", GradientCheck.qwen3(dropout), GradientCheck.block(1));
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

    @ParameterizedTest(name = "dropout {0}")
    @ValueSource(floats = {0f, 0.25f})
    void wholeTwoBlockQwen3GradientsMatchFiniteDifferencesInEveryElement(float dropout) {
        check("qwen3 2-block model", GradientCheck.qwen3(dropout), GradientCheck.WHOLE);
    }

    @Test
    void tiedEmbeddingGradientsMatchFiniteDifferencesInEveryElement() {
        ModelSpec tied = new ModelSpec(ModelSpec.ModelType.GPT2, 11, 16, 2, 2, 1, 24, 8, 0f, true, 10000f, false);
        check("gpt2 tied 1-block model", tied, new StageSlice(0, 0, 0, 1, true, true));
        ModelSpec q = GradientCheck.qwen3(0f);
        ModelSpec qwenTied = new ModelSpec(q.type(), q.vocabSize(), q.embeddingDim(), q.numHeads(), q.numKvHeads(), 1,
                q.intermediateDim(), q.maxSequenceLength(), 0f, true, q.ropeTheta(), false, q.dtype(), null, q.headDim(), 0f);
        check("qwen3 tied 1-block model", qwenTied, new StageSlice(0, 0, 0, 1, true, true));
    }

    @Test
    void recomputedBlocksGradientsMatchFiniteDifferencesInEveryElement() {
        check("llama 2 blocks, recomputed", GradientCheck.llama(0.25f).withRecompute(true), new StageSlice(1, 0, 0, 2, false, false));
        check("qwen3 2 blocks, recomputed", GradientCheck.qwen3(0.25f).withRecompute(true), new StageSlice(1, 0, 0, 2, false, false));
    }
}

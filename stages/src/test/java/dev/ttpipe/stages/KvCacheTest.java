package dev.ttpipe.stages;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Greedy generation with the key/value cache gives the tokens of generation that runs the whole
 * context again for each token, for GPT-2 (learned positions), Llama (RoPE at each position, GQA) and
 * Qwen3 (the q/k norms of each new token, heads of 8 where D / H is 4), in one stage and in two.
 */
class KvCacheTest {
    @ParameterizedTest
    @EnumSource(ModelSpec.ModelType.class)
    void greedyTokensWithTheCacheEqualThoseWithout(ModelSpec.ModelType type) {
        boolean llama = type != ModelSpec.ModelType.GPT2;           // GradientCheck's models, with a context of 32
        ModelSpec spec = new ModelSpec(type, 11, 16, 4, llama ? 2 : 4, 2, 24, 32, 0f, false, 10000f, false)
                .withHeadDimAndNormEps(type == ModelSpec.ModelType.QWEN3 ? 8 : 0, 0f);
        int[] prompt = {3, 1, 4, 1, 5};
        int n = Math.min(20, spec.maxSequenceLength() - prompt.length);
        for (List<StageSlice> split : List.of(List.of(GradientCheck.WHOLE),
                List.of(new StageSlice(0, 0, 0, 1, true, false), new StageSlice(1, 1, 1, 2, false, true)))) {
            List<Stage> stages = new ArrayList<>();
            try {
                Random rng = new Random(17);
                for (StageSlice s : split) {
                    Stage st = new Stage(spec, s, GradientCheck.FP64, Parallelism.NONE, 5);
                    GradientCheck.rescale(st, rng);
                    stages.add(st);
                }
                int[] without = Evaluation.generate(stages, prompt, n, 0, 0, 1, spec.vocabSize());
                List<Integer> streamed = new ArrayList<>();
                int[] with = Evaluation.generateCached(stages, prompt, n, 0, 0, 1, spec.vocabSize(), streamed::add);
                assertArrayEquals(without, with, type + " in " + split.size() + " stage(s)");
                assertEquals(n, streamed.size());
                assertEquals(with[with.length - 1], streamed.get(n - 1));
            } finally {
                stages.forEach(Stage::close);
            }
        }
    }

    /**
     * A model whose vocabulary is padded beyond its tokenizer's (TTML's vocab_size 96 for 65 characters)
     * never generates a padding id, greedy or sampled, with the cache or without.
     */
    @ParameterizedTest
    @EnumSource(ModelSpec.ModelType.class)
    void paddingIdsBeyondTheTokenizersAreNeverGenerated(ModelSpec.ModelType type) {
        boolean llama = type == ModelSpec.ModelType.LLAMA;
        ModelSpec spec = new ModelSpec(type, 11, 16, 4, llama ? 2 : 4, 2, 24, 32, 0f, false, 10000f, false);
        int[] prompt = {1, 2, 0};
        int n = 24, known = 3;
        Stage st = new Stage(spec, GradientCheck.WHOLE, GradientCheck.FP64, Parallelism.NONE, 5);
        try {
            GradientCheck.rescale(st, new Random(17));
            List<Stage> stages = List.of(st);
            int[] unrestricted = Evaluation.generate(stages, prompt, n, 1.0, 0, 7, spec.vocabSize());
            assertTrue(Arrays.stream(unrestricted).anyMatch(id -> id >= known), "the model does favour padding ids");
            for (double temperature : new double[]{0, 1.0}) {
                int[] plain = Evaluation.generate(stages, prompt, n, temperature, 0, 7, known);
                int[] cached = Evaluation.generateCached(stages, prompt, n, temperature, 0, 7, known, null);
                for (int[] ids : List.of(plain, cached)) {
                    assertTrue(Arrays.stream(ids).allMatch(id -> id < known), "temperature " + temperature + ": " + Arrays.toString(ids));
                }
            }
        } finally {
            st.close();
        }
    }
}

package dev.ttpipe.actors.runtime;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.ReferenceTrainer;
import dev.ttpipe.stages.WeightDiff;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The correctness contract through the real runtime (Pekko actors, device queues, the in-process
 * transport): for GPipe, 1F1B, interleaved 1F1B, ZB-H1 and the ready-first mode, over uneven
 * splits and M = P and 2P microbatches, five steps of pipelined training give the reference
 * trainer's losses and weights (norm-wise relative difference below 1e-5). The reference runs the
 * same microbatches one after another on one device (gradient accumulation, no pipeline).
 */
class PipelineMatchesReferenceTest {
    static final String TEXT = "to be, or not to be, that is the question: whether 'tis nobler in the mind. ".repeat(30);
    static final int STEPS = 5, SEQ = 16, RANKS = 3;

    static Stream<Arguments> cases() {
        return Stream.of(
                Arguments.of("gpipe", false, RANKS, new Integer[]{1, 3, 2}),
                Arguments.of("gpipe", false, 2 * RANKS, new Integer[]{1, 3, 2}),
                Arguments.of("1f1b", false, RANKS, new Integer[]{1, 3, 2}),
                Arguments.of("1f1b", false, 2 * RANKS, new Integer[]{2, 1, 3}),
                Arguments.of("interleaved", false, RANKS, new Integer[]{2, 2, 2}),
                Arguments.of("interleaved", false, 2 * RANKS, new Integer[]{2, 2, 2}),
                Arguments.of("zb-h1", false, RANKS, new Integer[]{1, 3, 2}),
                Arguments.of("zb-h1", false, 2 * RANKS, new Integer[]{1, 3, 2}),
                Arguments.of("zb-h2", false, 2 * RANKS, new Integer[]{1, 3, 2}),
                Arguments.of("zb-greedy", false, 2 * RANKS, new Integer[]{2, 2, 2}),
                Arguments.of("dualpipev", false, 2 * RANKS, new Integer[]{2, 2, 2}),
                Arguments.of("1f1b", true, RANKS, new Integer[]{1, 3, 2}),
                Arguments.of("interleaved", true, 2 * RANKS, new Integer[]{2, 2, 2}),
                Arguments.of("zb-h1", true, 2 * RANKS, new Integer[]{3, 2, 1}));
    }

    @Test
    void gradientAccumulationOverTwoPassesMatchesTheReference() {
        check("1f1b", false, RANKS, new Integer[]{1, 3, 2}, 2);
    }

    @ParameterizedTest(name = "{0} ready-first={1} M={2} split={3}")
    @MethodSource("cases")
    void pipelinedTrainingMatchesTheReferenceTrainer(String schedule, boolean readyFirst, int microbatches, Integer[] split) {
        check(schedule, readyFirst, microbatches, split, 1);
    }

    static void check(String schedule, boolean readyFirst, int microbatches, Integer[] split, int accumulation) {
        TextDataset data = TextDataset.of(TEXT, 0.1);
        ModelSpec model = new ModelSpec(ModelSpec.ModelType.GPT2, data.tokenizer().vocabSize(), 32, 4, 4, 6, 64, SEQ,
                0.1f, false, 10000f, false);
        JobPlan plan = JobPlan.builder(model).ranks(RANKS).schedule(schedule).readyFirst(readyFirst)
                .microbatches(microbatches).microbatchSize(2).seqLen(SEQ).blocksPerRank(split).accumulation(accumulation)
                .optimizer(OptimizerSpec.adamw(3e-3, 0.1)).clipMaxNorm(0.5).seed(7).build();
        try (PipelineRuntime runtime = PipelineRuntime.start(plan);
             MeshDevice refMesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults().withThreads(1));
             ReferenceTrainer ref = new ReferenceTrainer(model, refMesh.asSubmesh(), Parallelism.NONE, 7, plan.optimizer(),
                     plan.lr(), plan.clipMaxNorm(), plan.microbatches())) {
            for (int step = 0; step < STEPS; step++) {
                List<Batch> b = new ArrayList<>();
                for (int a = 0; a < accumulation; a++) b.add(data.trainBatch(7, step * accumulation + a, plan.batchSize(), SEQ));
                double pipelined = runtime.step(step, b).loss();
                double reference = ref.step(step, b).loss();
                assertEquals(reference, pipelined, 1e-5 * Math.abs(reference), "loss of step " + step);
            }
            WeightDiff d = WeightDiff.compare(runtime.weights(), ref.weights());
            assertTrue(d.maxRelative() < 1e-5, "weights differ by " + d.maxRelative() + " in " + d.worstParam());
        }
    }
}

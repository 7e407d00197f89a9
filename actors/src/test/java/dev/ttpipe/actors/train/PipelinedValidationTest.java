package dev.ttpipe.actors.train;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

import java.util.Map;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The validation loss of a training job pipelined through its ranks between steps (the path of a job whose
 * ranks run in other processes) equals the one-process path's, every stage gathered here, bit for bit; and
 * training after it goes on bit-identically to a run that evaluated nothing: the evaluation passes keep no
 * activation for a backward, step no optimizer and draw nothing from the dropout generator. With dropout,
 * AdamW and gradient clipping, so that any of them would show; over 1F1B, interleaved (two stages a rank),
 * ZB-H1 on four ranks, DDP, a tied embedding, and the local transport and Aeron IPC.
 */
class PipelinedValidationTest {
    static final String TEXT = "the quality of mercy is not strained; it droppeth as the gentle rain from heaven. ".repeat(30);
    static final int STEPS = 4, EVAL_AFTER = 2;

    static Stream<Arguments> pipelines() {
        return Stream.of(
                Arguments.of("1f1b", 2, 0, SocketType.AERON, false, false),
                Arguments.of("interleaved", 2, 2, SocketType.LOCAL, true, false),
                Arguments.of("zb-h1", 4, 0, SocketType.LOCAL, false, false),
                Arguments.of("1f1b", 2, 0, SocketType.LOCAL, false, true));
    }

    static TrainingJob job(String schedule, int ranks, int virtualStages, SocketType transport, boolean tied, boolean ddp) {
        TextDataset data = TextDataset.of(TEXT, 0.2);
        ModelSpec model = new ModelSpec(ModelSpec.ModelType.GPT2, data.tokenizer().vocabSize(), 32, 4, 4, 4, 64, 16,
                0.1f, tied, 10000f, false);
        JobPlan plan = JobPlan.builder(model).ranks(ranks).schedule(schedule).virtualStages(virtualStages).microbatches(4)
                .microbatchSize(2).seqLen(16).backend(Backend.CPU).transport(transport)
                .rankMesh(new MeshShape(1, ddp ? 2 : 1), ddp, false)
                .optimizer(OptimizerSpec.adamw(3e-3, 0.1)).clipMaxNorm(0.5).seed(7).build();
        TrainingJob job = TrainingJob.of(plan, data, STEPS);
        job.config().training.evalBatches = 5;          // passes of 4 batches and of 1
        return job;
    }

    @ParameterizedTest(name = "{0}, {1} ranks x {2}, {3}, tied {4}, DDP {5}")
    @MethodSource("pipelines")
    void pipelinedValidationEqualsTheOneProcessPathAndLeavesTrainingAsItWas(String schedule, int ranks, int virtualStages,
                                                                            SocketType transport, boolean tied, boolean ddp) {
        TrainingJob job = job(schedule, ranks, virtualStages, transport, tied, ddp);
        double[] losses = new double[STEPS];
        double pipelined, local, again;
        Map<String, float[]> weights;
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan())) {
            for (int step = 0; step < STEPS; step++) {
                losses[step] = runtime.step(step, job.batches(step)).loss();
                if (step + 1 != EVAL_AFTER) continue;
                pipelined = job.pipelinedValidationLoss(runtime);
                local = job.localValidationLoss(runtime);
                again = job.pipelinedValidationLoss(runtime);
                assertTrue(Double.isFinite(local) && local > 0, "validation loss " + local);
                assertEquals(Double.doubleToLongBits(local), Double.doubleToLongBits(pipelined), pipelined + " pipelined vs " + local);
                assertEquals(Double.doubleToLongBits(local), Double.doubleToLongBits(again), "a second evaluation");
            }
            weights = runtime.weights();
        }
        TrainingJob plain = job(schedule, ranks, virtualStages, transport, tied, ddp);
        try (PipelineRuntime runtime = PipelineRuntime.start(plain.plan())) {
            for (int step = 0; step < STEPS; step++) {
                double loss = runtime.step(step, plain.batches(step)).loss();
                assertEquals(Double.doubleToLongBits(loss), Double.doubleToLongBits(losses[step]), "step " + (step + 1) + "'s loss");
            }
            Map<String, float[]> w = runtime.weights();
            assertEquals(w.keySet(), weights.keySet());
            for (String name : w.keySet()) assertArrayEquals(w.get(name), weights.get(name), name);
        }
    }
}

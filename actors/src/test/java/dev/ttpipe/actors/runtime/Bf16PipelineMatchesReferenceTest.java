package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.ReferenceTrainer;
import dev.ttpipe.stages.WeightDiff;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.List;
import java.util.Locale;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code dtype: bf16} keeps the correctness contract bit for bit: a bf16 pipeline (1F1B over 3 ranks,
 * the in-process, Aeron and fabric transports, DDP inside a stage, the cpu backend and the ttnn
 * backend's reference C library) and the bf16 reference trainer on the
 * same backend and per-rank mesh give the same losses and the same weights, exactly; the tensors
 * between stages travel as bf16 (2 bytes an element); and bf16 is not fp32 (the losses differ).
 */
class Bf16PipelineMatchesReferenceTest {
    static final String TEXT = "all the world's a stage, and all the men and women merely players. ".repeat(30);
    static final int B = 2, T = 16, D = 32;

    @ParameterizedTest(name = "{0} on {4}, {1} transport, mesh [1, {2}] ddp={3}")
    @CsvSource({"gpt2, local, 1, false, cpu", "llama, aeron, 1, false, cpu", "gpt2, local, 2, true, cpu",
            "gpt2, fabric, 1, false, ttnn"})
    void bf16PipelineMatchesTheBf16ReferenceExactly(String type, String transport, int cols, boolean ddp, String backend) {
        if (backend.equals("ttnn")) {
            try (MeshDevice probe = Backends.open("ttnn", new MeshShape(1, 1), MeshOptions.defaults())) {
                probe.shape();
            } catch (DeviceException e) {
                Assumptions.abort("skipped: the reference bridge library is not available: " + e.getMessage());
            }
        }
        TextDataset data = TextDataset.of(TEXT, 0.1);
        ModelSpec fp32 = type.equals("llama") ? ModelSpec.llama(data.tokenizer().vocabSize(), D, 4, 2, 3, T)
                : new ModelSpec(ModelSpec.ModelType.GPT2, data.tokenizer().vocabSize(), D, 4, 4, 3, 4 * D, T, 0.1f, false,
                10000f, false);
        ModelSpec model = fp32.withDtype(DType.BF16);
        JobPlan plan = JobPlan.builder(model).ranks(3).schedule("1f1b").microbatches(4).microbatchSize(B * cols).seqLen(T)
                .backend(Backend.valueOf(backend.toUpperCase(Locale.ROOT)))
                .transport(SocketType.valueOf(transport.toUpperCase(Locale.ROOT))).rankMesh(new MeshShape(1, cols), ddp, false)
                .optimizer(OptimizerSpec.adamw(3e-3, 0.1)).seed(11).build();
        double[] bf16Losses = new double[3];
        try (PipelineRuntime runtime = PipelineRuntime.start(plan);
             MeshDevice refMesh = Backends.open(backend, new MeshShape(1, cols), plan.meshOptions());
             ReferenceTrainer ref = new ReferenceTrainer(model, refMesh.asSubmesh(), plan.parallelism(), 11,
                     plan.optimizer(), plan.lr(), plan.clipMaxNorm(), plan.microbatches())) {
            for (int step = 0; step < 3; step++) {
                Batch b = data.trainBatch(11, step, plan.batchSize(), T);
                Coordinator.StepReport p = runtime.step(step, List.of(b));
                ReferenceTrainer.StepResult r = ref.step(step, List.of(b));
                assertEquals(r.loss(), p.loss(), 0.0, "step " + step + " loss");
                bf16Losses[step] = p.loss();
                long sendF = p.events().stream().filter(e -> e.action().kind() == ActionKind.SEND_F)
                        .mapToLong(e -> e.bytes()).max().orElseThrow();
                assertEquals(2L * B * T * D * cols, sendF, "an activation [" + B + ", " + T + ", " + D + "] of bf16 on "
                        + cols + " device(s)");
            }
            WeightDiff d = WeightDiff.compare(runtime.weights(), ref.weights());
            assertEquals(0.0, d.maxRelative(), "weights differ in " + d.worstParam());
        }
        try (MeshDevice mesh = Backends.open(backend, new MeshShape(1, cols), plan.meshOptions());
             ReferenceTrainer ref32 = new ReferenceTrainer(fp32, mesh.asSubmesh(), plan.parallelism(), 11,
                     plan.optimizer(), plan.lr(), plan.clipMaxNorm(), plan.microbatches())) {
            double loss = ref32.step(0, List.of(data.trainBatch(11, 0, plan.batchSize(), T))).loss();
            assertNotEquals(loss, bf16Losses[0], "bf16 computes in bf16, not fp32");
            assertTrue(Math.abs(loss - bf16Losses[0]) < 1e-2 * loss, "bf16 stays close to fp32: " + bf16Losses[0]
                    + " against " + loss);
        }
    }
}

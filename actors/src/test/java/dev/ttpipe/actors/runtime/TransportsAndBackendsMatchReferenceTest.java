package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.DeviceException;
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
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.List;
import java.util.Locale;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Every transport and backend keeps the correctness contract: the Aeron transport (IPC inside one
 * process) and the fabric transport on the cpu backend, and the ttnn backend (the reference C
 * library through JNA) with the fabric transport and DDP, TP or both inside each stage.
 */
class TransportsAndBackendsMatchReferenceTest {
    static final String TEXT = "all the world's a stage, and all the men and women merely players. ".repeat(30);

    @ParameterizedTest(name = "{0} backend, {1} transport, mesh [{2}, {3}] ddp={4} tp={5}")
    @CsvSource({
            "cpu, aeron, 1, 1, false, false",
            "cpu, fabric, 1, 2, true, false",
            "ttnn, fabric, 1, 2, true, false",
            "ttnn, fabric, 1, 2, false, true",
            "ttnn, fabric, 2, 2, true, true"})
    void pipelinedTrainingMatchesTheReference(String backend, String transport, int rows, int cols, boolean ddp, boolean tp) {
        if (backend.equals("ttnn")) {
            try (MeshDevice probe = Backends.open("ttnn", new MeshShape(1, 1), MeshOptions.defaults())) {
                probe.shape();
            } catch (DeviceException e) {
                Assumptions.abort("skipped: the reference bridge library is not available: " + e.getMessage());
            }
        }
        TextDataset data = TextDataset.of(TEXT, 0.1);
        ModelSpec model = new ModelSpec(ModelSpec.ModelType.GPT2, data.tokenizer().vocabSize(), 32, 4, 4, 4, 64, 16,
                0.1f, false, 10000f, false);
        JobPlan plan = JobPlan.builder(model).ranks(2).schedule("1f1b").microbatches(4).microbatchSize(2).seqLen(16)
                .blocksPerRank(1, 3).backend(Backend.valueOf(backend.toUpperCase(Locale.ROOT)))
                .transport(SocketType.valueOf(transport.toUpperCase(Locale.ROOT))).rankMesh(new MeshShape(rows, cols), ddp, tp)
                .optimizer(OptimizerSpec.adamw(3e-3, 0.1)).seed(11).build();
        try (PipelineRuntime runtime = PipelineRuntime.start(plan);
             MeshDevice refMesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults().withThreads(1));
             ReferenceTrainer ref = new ReferenceTrainer(model, refMesh.asSubmesh(), Parallelism.NONE, 11, plan.optimizer(),
                     plan.lr(), plan.clipMaxNorm(), plan.microbatches())) {
            for (int step = 0; step < 4; step++) {
                Batch b = data.trainBatch(11, step, plan.batchSize(), 16);
                runtime.step(step, List.of(b));
                ref.step(step, List.of(b));
            }
            WeightDiff d = WeightDiff.compare(runtime.weights(), ref.weights());
            assertTrue(d.maxRelative() < 1e-5, backend + "/" + transport + ": weights differ by " + d.maxRelative() + " in " + d.worstParam());
        }
    }
}

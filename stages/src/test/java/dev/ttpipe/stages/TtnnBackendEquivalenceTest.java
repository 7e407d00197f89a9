package dev.ttpipe.stages;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.ttnn.BridgeLibrary;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static dev.ttpipe.stages.ParallelEquivalenceTest.BATCH;
import static dev.ttpipe.stages.ParallelEquivalenceTest.SEQ;
import static dev.ttpipe.stages.ParallelEquivalenceTest.STEPS;
import static dev.ttpipe.stages.ParallelEquivalenceTest.TEXT;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The model code runs unchanged on the ttnn backend (JNA over the reference bridge library): the
 * tiny GPT (and llama) trained with DDP or TP on a ttnn mesh ends with the weights and losses of
 * the plain single-device cpu run (norm-wise relative difference below 1e-5). This exercises every
 * op the stages use, Partial layouts, in-place collectives, views, through the native library.
 */
class TtnnBackendEquivalenceTest {
    @BeforeEach
    void needsTheReferenceLibrary() {
        assumeTrue(BridgeLibrary.locate().isPresent(), "the reference bridge library was not built (no C compiler?): "
                + "run 'mvn -pl device-bridge package'; tried " + BridgeLibrary.candidates(null));
    }

    static ParallelEquivalenceTest.Run train(String backend, ModelSpec spec, MeshShape shape, boolean ddp, boolean tp,
                                             int microbatches) {
        TextDataset data = TextDataset.of(TEXT, 0.1);
        try (MeshDevice mesh = Backends.open(backend, shape, MeshOptions.defaults());
             ReferenceTrainer t = new ReferenceTrainer(spec, mesh.asSubmesh(), Parallelism.of(shape, ddp, tp), 42,
                     OptimizerSpec.adamw(3e-3, 0.1), LrSchedule.constant(3e-3), 1.0, microbatches)) {
            List<Double> losses = new ArrayList<>();
            for (int s = 0; s < STEPS; s++) {
                Batch b = data.trainBatch(42, s, BATCH, SEQ);
                losses.add(t.step(s, List.of(b)).loss());
            }
            return new ParallelEquivalenceTest.Run(t.weights(), losses);
        }
    }

    @Test
    void ddpOnTwoTtnnDevicesMatchesOneCpuDevice() {
        ParallelEquivalenceTest.Run cpu = train("cpu", ParallelEquivalenceTest.gpt(), new MeshShape(1, 1), false, false, 1);
        ParallelEquivalenceTest.assertSame(train("ttnn", ParallelEquivalenceTest.gpt(), new MeshShape(1, 2), true, false, 1),
                cpu, "ttnn DDP=2");
    }

    @Test
    void tpOnTwoTtnnDevicesMatchesOneCpuDevice() {
        ParallelEquivalenceTest.Run cpu = train("cpu", ParallelEquivalenceTest.gpt(), new MeshShape(1, 1), false, false, 1);
        ParallelEquivalenceTest.assertSame(train("ttnn", ParallelEquivalenceTest.gpt(), new MeshShape(1, 2), false, true, 1),
                cpu, "ttnn TP=2");
        ParallelEquivalenceTest.Run llama = train("cpu", ParallelEquivalenceTest.llama(), new MeshShape(1, 1), false, false, 1);
        ParallelEquivalenceTest.assertSame(train("ttnn", ParallelEquivalenceTest.llama(), new MeshShape(1, 2), false, true,
                1), llama, "ttnn llama TP=2");
    }

    @Test
    void ddpAndTpTogetherWithMicrobatchesOnTtnnMatchOneCpuDevice() {
        ParallelEquivalenceTest.Run cpu = train("cpu", ParallelEquivalenceTest.gpt(), new MeshShape(1, 1), false, false, 1);
        ParallelEquivalenceTest.assertSame(train("ttnn", ParallelEquivalenceTest.gpt(), new MeshShape(2, 2), true, true, 2),
                cpu, "ttnn DDP=2 x TP=2, 2 microbatches");
    }
}

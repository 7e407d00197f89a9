package dev.ttpipe.stages;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * DDP and TP inside a stage, microbatch accumulation, recomputation and the I/W split change how the
 * work is done, never the result: after several AdamW steps on the same global batches the weights
 * agree with the plain single-device run (norm-wise relative difference below 1e-5).
 */
class ParallelEquivalenceTest {
    static final String TEXT = "the quick brown fox jumps over the lazy dog. ".repeat(40);
    static final int STEPS = 4, BATCH = 4, SEQ = 8;

    static ModelSpec gpt() {
        return new ModelSpec(ModelSpec.ModelType.GPT2, TextDataset.of(TEXT, 0.1).tokenizer().vocabSize(),
                32, 4, 4, 2, 64, 16, 0.1f, false, 10000f, false);
    }

    static ModelSpec llama() {
        return new ModelSpec(ModelSpec.ModelType.LLAMA, TextDataset.of(TEXT, 0.1).tokenizer().vocabSize(),
                32, 4, 2, 2, 64, 16, 0.0f, false, 10000f, false);
    }

    /** A Qwen3: per-head q/k norms (under TP each device normalises its own heads), heads of 16 where D / H is 8. */
    static ModelSpec qwen3() {
        return new ModelSpec(ModelSpec.ModelType.QWEN3, TextDataset.of(TEXT, 0.1).tokenizer().vocabSize(),
                32, 4, 2, 2, 64, 16, 0.0f, false, 10000f, false, DType.FP32, null, 16, 0f);
    }

    record Run(Map<String, float[]> weights, List<Double> losses) {
    }

    static Run train(ModelSpec spec, MeshShape shape, boolean ddp, boolean tp, int microbatches) {
        return train(spec, shape, ddp, tp, microbatches, OptimizerSpec.adamw(3e-3, 0.1));
    }

    static Run train(ModelSpec spec, MeshShape shape, boolean ddp, boolean tp, int microbatches, OptimizerSpec opt) {
        TextDataset data = TextDataset.of(TEXT, 0.1);
        try (MeshDevice mesh = Backends.open("cpu", shape, MeshOptions.defaults());
             ReferenceTrainer t = new ReferenceTrainer(spec, mesh.asSubmesh(), Parallelism.of(shape, ddp, tp), 42,
                     opt, LrSchedule.constant(opt.learningRate()), 1.0, microbatches)) {
            List<Double> losses = new ArrayList<>();
            for (int s = 0; s < STEPS; s++) {
                Batch b = data.trainBatch(42, s, BATCH, SEQ);
                losses.add(t.step(s, List.of(b)).loss());
            }
            return new Run(t.weights(), losses);
        }
    }

    static void assertSame(Run a, Run reference, String what) {
        WeightDiff d = WeightDiff.compare(a.weights(), reference.weights());
        assertTrue(d.maxRelative() < 1e-5, what + ": weights differ by " + d.maxRelative() + " in " + d.worstParam());
        for (int i = 0; i < a.losses().size(); i++) {
            assertEquals(reference.losses().get(i), a.losses().get(i), 1e-5 * Math.abs(reference.losses().get(i)),
                    what + ": loss of step " + i);
        }
    }

    @Test
    void ddpOverTwoDevicesMatchesOneDevice() {
        Run one = train(gpt(), new MeshShape(1, 1), false, false, 1);
        assertSame(train(gpt(), new MeshShape(1, 2), true, false, 1), one, "DDP=2");
    }

    @Test
    void tpOverTwoDevicesMatchesOneDevice() {
        Run one = train(gpt(), new MeshShape(1, 1), false, false, 1);
        assertSame(train(gpt(), new MeshShape(1, 2), false, true, 1), one, "TP=2");
        Run llamaOne = train(llama(), new MeshShape(1, 1), false, false, 1);
        assertSame(train(llama(), new MeshShape(1, 2), false, true, 1), llamaOne, "llama TP=2");
        Run qwenOne = train(qwen3(), new MeshShape(1, 1), false, false, 1);
        assertSame(train(qwen3(), new MeshShape(1, 2), false, true, 1), qwenOne, "qwen3 TP=2");
    }

    @Test
    void ddpAndTpTogetherMatchOneDevice() {
        Run one = train(gpt(), new MeshShape(1, 1), false, false, 1);
        assertSame(train(gpt(), new MeshShape(2, 2), true, true, 1), one, "DDP=2 x TP=2");
        assertSame(train(qwen3(), new MeshShape(2, 2), true, true, 1), train(qwen3(), new MeshShape(1, 1), false, false, 1),
                "qwen3 DDP=2 x TP=2");
    }

    @Test
    void microbatchAccumulationMatchesTheWholeBatchDropoutIncluded() {
        Run whole = train(gpt(), new MeshShape(1, 1), false, false, 1);
        assertSame(train(gpt(), new MeshShape(1, 1), false, false, 4), whole, "4 microbatches");
    }

    @Test
    void recomputationMatchesStoredActivations() {
        Run stored = train(gpt(), new MeshShape(1, 1), false, false, 2);
        assertSame(train(new ModelSpec(ModelSpec.ModelType.GPT2, gpt().vocabSize(), 32, 4, 4, 2, 64, 16, 0.1f, false, 10000f, true), new MeshShape(1, 1), false, false, 2), stored, "memory_efficient");
    }

    @Test
    void sgdWithNesterovMomentumUnderDdpAndTpMatchesOneDevice() {
        OptimizerSpec sgd = OptimizerSpec.sgd(0.1, 0.9, true, 0.01);
        Run one = train(gpt(), new MeshShape(1, 1), false, false, 1, sgd);
        assertSame(train(gpt(), new MeshShape(2, 2), true, true, 1, sgd), one, "SGD, DDP=2 x TP=2");
        assertTrue(one.losses().get(STEPS - 1) < one.losses().get(0), "SGD lowers the loss: " + one.losses());
    }

    @Test
    void trainingLowersTheLoss() {
        Run r = train(gpt(), new MeshShape(1, 1), false, false, 1);
        assertTrue(r.losses().get(STEPS - 1) < r.losses().get(0), "loss " + r.losses());
    }

    @Test
    void meshShapeTheStrategiesCannotUseIsOneClearError() {
        StagesException e = Assertions.assertThrows(StagesException.class,
                () -> Parallelism.of(new MeshShape(1, 4), true, true));
        assertTrue(e.getMessage().contains("mesh_shape") && e.getMessage().contains("enable_ddp"), e.getMessage());
    }

}

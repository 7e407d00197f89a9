package dev.ttpipe.actors.runtime;

import dev.ttpipe.device.DType;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The memory plan of a bf16 job: parameters as in fp32, gradients and optimizer state as in fp32 plus the bf16
 * copies of the matmul weights (at most half the fp32 parameters), received tensors half, activations about half (norm statistics stay fp32), and the planned peak still within
 * 10% of the measured one.
 */
class Bf16MemoryPlanTest {

    private static JobPlan bf16(JobPlan fp32) {
        return JobPlan.builder(fp32.model().withDtype(DType.BF16)).ranks(2).schedule("1f1b").microbatches(8)
                .microbatchSize(4).seqLen(32).blocksPerRank(2, 2).backend(fp32.backend()).rankMesh(fp32.rankMesh(), false, false)
                .meshOptions(fp32.meshOptions()).optimizer(fp32.optimizer()).seed(11).build();
    }

    @Test
    void bf16HalvesActivationsAndReceivedTensorsAndTheDeviceAgrees() {
        JobPlan fp32 = MemoryPlanTest.plan("1f1b", 1, 1, false, false, false, 12L << 30);
        JobPlan plan = bf16(fp32);
        MemoryPlan p32 = MemoryPlan.of(fp32);
        MemoryPlan p16 = MemoryPlan.of(plan);
        TextDataset data = TextDataset.of(MemoryPlanTest.TEXT, 0.1);
        long[] measured = new long[plan.ranks()];
        try (PipelineRuntime runtime = PipelineRuntime.start(plan)) {
            for (int step = 0; step < 2; step++) {
                Coordinator.StepReport r = runtime.step(step, List.of(data.trainBatch(11, step, plan.batchSize(), plan.seqLen())));
                if (step > 0) for (int i = 0; i < measured.length; i++) measured[i] = Math.max(measured[i], r.memoryPeak()[i]);
            }
        }
        for (int rank = 0; rank < plan.ranks(); rank++) {
            MemoryPlan.Rank a = p32.ranks().get(rank), b = p16.ranks().get(rank);
            assertEquals(a.parameters(), b.parameters(), "rank " + rank + " parameters");
            long copies = b.optimizerAndGradients() - a.optimizerAndGradients();
            assertTrue(copies > 0 && copies <= a.parameters() / 2, "rank " + rank + " bf16 weight copies: " + copies
                    + " bytes, parameters " + a.parameters());
            assertEquals(a.received() / 2, b.received(), "rank " + rank + " received tensors");
            double ratio = (double) b.activations() / a.activations();
            assertTrue(ratio > 0.45 && ratio < 0.6, "rank " + rank + " activations bf16 / fp32: " + ratio);
            double err = (double) b.peak() / measured[rank] - 1;
            assertTrue(Math.abs(err) < 0.10, "rank " + rank + " planned " + b.peak() + " measured " + measured[rank]);
        }
    }
}

package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The memory plan against the measured peak: the plan replays each rank's row on a sim mesh; the
 * real job runs on the cpu backend, whose devices count every byte they hold. Within 10% per rank,
 * for 1F1B, GPipe (all microbatches in flight), a zero-bubble schedule (I and W apart), recompute,
 * and DDP and TP inside the stages.
 */
class MemoryPlanTest {
    static final String TEXT = "all the world's a stage, and all the men and women merely players. ".repeat(30);

    static JobPlan plan(String schedule, int rows, int cols, boolean ddp, boolean tp, boolean recompute, long capacity) {
        TextDataset data = TextDataset.of(TEXT, 0.1);
        ModelSpec model = new ModelSpec(ModelSpec.ModelType.GPT2, data.tokenizer().vocabSize(), 64, 4, 4, 4, 256, 32,
                0.1f, false, 10000f, recompute);
        return JobPlan.builder(model).ranks(2).schedule(schedule).microbatches(8).microbatchSize(4).seqLen(32)
                .blocksPerRank(2, 2).backend(Backend.CPU).rankMesh(new MeshShape(rows, cols), ddp, tp)
                .meshOptions(MeshOptions.defaults().withMemoryPerDevice(capacity))
                .optimizer(OptimizerSpec.adamw(3e-3, 0.1)).seed(11).build();
    }

    @ParameterizedTest(name = "{0}, mesh [{1}, {2}] ddp={3} tp={4} recompute={5}")
    @CsvSource({
            "1f1b, 1, 1, false, false, false",
            "gpipe, 1, 1, false, false, false",
            "zb-h1, 1, 1, false, false, false",
            "1f1b, 1, 1, false, false, true",
            "1f1b, 2, 1, true, false, false",
            "1f1b, 1, 2, false, true, false"})
    void thePlannedPeakIsWithinTenPercentOfTheMeasuredOne(String schedule, int rows, int cols, boolean ddp, boolean tp,
                                                        boolean recompute) {
        JobPlan plan = plan(schedule, rows, cols, ddp, tp, recompute, 12L << 30);
        MemoryPlan planned = MemoryPlan.of(plan);
        TextDataset data = TextDataset.of(TEXT, 0.1);
        long[] measured = new long[plan.ranks()];
        try (PipelineRuntime runtime = PipelineRuntime.start(plan)) {
            for (int step = 0; step < 2; step++) {
                Coordinator.StepReport r = runtime.step(step, List.of(data.trainBatch(11, step, plan.batchSize(), plan.seqLen())));
                if (step > 0) for (int i = 0; i < measured.length; i++) measured[i] = Math.max(measured[i], r.memoryPeak()[i]);
            }
        }
        StringBuilder report = new StringBuilder();
        for (MemoryPlan.Rank r : planned.ranks()) {
            double err = (double) r.peak() / measured[r.rank()] - 1;
            report.append(String.format("rank %d planned %d measured %d (%+.1f%%)%n", r.rank(), r.peak(), measured[r.rank()], 100 * err));
        }
        System.out.print(report);
        for (MemoryPlan.Rank r : planned.ranks()) {
            double err = Math.abs((double) r.peak() / measured[r.rank()] - 1);
            assertTrue(err <= 0.10, report.toString());
        }
    }

    @Test
    void aPlanThatDoesNotFitIsRefusedNamingTheRankAndWhatWouldFit() {
        JobPlan fits = plan("gpipe", 1, 1, false, false, false, 12L << 30);
        long peak = MemoryPlan.of(fits).largest().peak();
        JobPlan tight = plan("gpipe", 1, 1, false, false, false, peak * 9 / 10);
        ConfigException e = assertThrows(ConfigException.class, () -> MemoryPlan.of(tight).check());
        String m = e.getMessage();
        assertTrue(m.startsWith("device_config.memory_per_device: rank "), m);
        assertTrue(m.contains("runner_type: memory_efficient (recompute in backward) needs about"), m);
        assertTrue(m.contains("which fits"), m);
        assertTrue(!m.contains("\n"), m);
    }

    @Test
    void thePeakOfAGpipeRowOfManyMicrobatchesIsFoundInOnePass() {
        // GPipe keeps every microbatch in flight: a row of 250,000 microbatches has 250,000 distinct states, which the
        // comparison of every state with every other took hours over (a million ran over 300 s in `ttpipe train`)
        int m = 250_000;
        List<Action> row = new ArrayList<>(2 * m);
        for (int mb = 0; mb < m; mb++) row.add(new Action(0, ActionKind.F, mb));
        for (int mb = 0; mb < m; mb++) row.add(new Action(0, ActionKind.B, mb));
        assertEquals(m + 1, MemoryPlan.toPeak(row).size());      // every forward, then the backward that follows the peak
    }

    @Test
    void aScheduleWhosePeakIsTooFarIntoItsRowIsRefusedNamingTheLimit() {
        int m = MemoryPlan.MAX_REPLAYED + 8;
        TextDataset data = TextDataset.of(TEXT, 0.1);
        ModelSpec model = ModelSpec.gpt2(data.tokenizer().vocabSize(), 16, 2, 2, 16);
        JobPlan.Builder b = JobPlan.builder(model).ranks(2).microbatches(m).microbatchSize(1).seqLen(16).blocksPerRank(1, 1)
                .backend(Backend.SIM);
        ConfigException e = assertThrows(ConfigException.class, () -> MemoryPlan.of(b.schedule("gpipe").build(), "job.yaml:5: key"));
        assertEquals(List.of("job.yaml:5: key: " + m + " given: with schedule gpipe rank 0's memory peak comes after " + m
                + " forwards, " + (2 * m + 2) + " actions into its row, and the memory planner replays at most " + MemoryPlan.MAX_REPLAYED
                + "; expected fewer microbatches, or a schedule that keeps fewer in flight (1f1b, zb-h1, interleaved)"), e.problems());
        assertEquals(2, MemoryPlan.of(b.schedule("1f1b").build()).ranks().size());      // 1F1B keeps two in flight: planned
    }
}

package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A stage made to stall (an injected fault delays one action on its device) is found by the hang watchdog:
 * its diagnosis names the stalled rank and action and the ranks waiting on it, with the RECV and the
 * peer; with a step timeout the step fails with that diagnosis.
 */
class WatchdogTest {
    static JobPlan plan() {
        return StageActorTest.tiny(Backend.CPU);   // 2 ranks, 1F1B, 2 microbatches
    }

    static Batch batch(JobPlan plan) {
        return TextDataset.of(StageActorTest.TEXT, 0.1).trainBatch(1, 0, plan.batchSize(), 8);
    }

    @Test
    void aStalledActionIsNamedWithTheRanksWaitingOnIt() {
        JobPlan plan = plan();
        List<String> warnings = new CopyOnWriteArrayList<>();
        Faults stall = Faults.stall(new Action(1, ActionKind.F, 1), 3500);       // rank 1's F of microbatch 1 takes 3.5 s
        try (PipelineRuntime runtime = PipelineRuntime.start(plan, stall)) {
            runtime.watchdog(Duration.ofSeconds(1), Duration.ZERO, warnings::add);
            runtime.step(0, List.of(batch(plan)));                            // slow, but it finishes
        }
        assertFalse(warnings.isEmpty(), "no diagnosis while rank 1 stalled");
        String d = warnings.get(0);
        assertTrue(d.startsWith("no rank has finished an action for "), d);
        assertTrue(d.contains("rank 1: running 1F1 for "), d);
        assertTrue(d.contains("rank 0: waits 0RECV_B1 from rank 1 for "), d);
        assertTrue(d.contains("blocking chain: rank 0 waits 0RECV_B1 from rank 1, which is running 1F1 for "), d);
    }

    @Test
    void aStepTimeoutFailsTheStepWithTheDiagnosis() {
        JobPlan plan = plan();
        Faults stall = Faults.stall(new Action(1, ActionKind.F, 1), 6000);
        try (PipelineRuntime runtime = PipelineRuntime.start(plan, stall)) {
            runtime.watchdog(Duration.ofSeconds(60), Duration.ofSeconds(2), w -> { });
            PipelineFailure f = assertThrows(PipelineFailure.class, () -> runtime.step(0, List.of(batch(plan))));
            assertTrue(f.getMessage().contains("took longer than training_config.step_timeout_s = 2")
                    && f.getMessage().contains("which is running 1F1"), f.getMessage());
        }
    }
}

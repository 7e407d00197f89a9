package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.data.Batch;
import org.apache.pekko.actor.testkit.typed.javadsl.BehaviorTestKit;
import org.apache.pekko.actor.testkit.typed.javadsl.TestInbox;
import org.apache.pekko.pattern.StatusReply;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The Coordinator's state machine (joining, idle, passes, gradients, optimizer, rejoining, refusing;
 * evaluating and generating on a forward-only plan, evaluating between a training plan's steps)
 * driven message by message with Pekko's synchronous {@link BehaviorTestKit}: the two ranks are test
 * inboxes, and the test answers for them.
 */
class CoordinatorBehaviorTest {
    static final ModelSpec MODEL = ModelSpec.gpt2(32, 16, 2, 2, 8);
    static final JobPlan PLAN = JobPlan.builder(MODEL).ranks(2).microbatches(2).microbatchSize(2).seqLen(8)
            .clipMaxNorm(1.0).backend(Backend.CPU).build();

    private TestInbox<StageActor.Command> rank0;
    private TestInbox<StageActor.Command> rank1;
    private TestInbox<StatusReply<Coordinator.StepReport>> client;

    @BeforeEach
    void inboxes() {
        rank0 = TestInbox.create();
        rank1 = TestInbox.create();
        client = TestInbox.create();
    }

    private BehaviorTestKit<Coordinator.Command> coordinator(Faults faults) {
        return BehaviorTestKit.create(Coordinator.create(PLAN, List.of(rank0.getRef(), rank1.getRef()), faults));
    }

    /** Both ranks join the plan's job. */
    private BehaviorTestKit<Coordinator.Command> joined(Faults faults) {
        BehaviorTestKit<Coordinator.Command> kit = coordinator(faults);
        for (TestInbox<StageActor.Command> r : List.of(rank0, rank1)) {
            StageActor.JoinJob join = (StageActor.JoinJob) r.receiveMessage();
            assertEquals(PLAN.jobId(), join.jobId());
            assertEquals(PLAN.fingerprint(), join.fingerprint());
        }
        kit.run(new Coordinator.Joined(0, PLAN.jobId(), null));
        kit.run(new Coordinator.Joined(1, PLAN.jobId(), null));
        return kit;
    }

    static Batch batch() {
        int n = PLAN.batchSize() * PLAN.seqLen();
        int[] inputs = new int[n], targets = new int[n];
        for (int i = 0; i < n; i++) {
            inputs[i] = i % 32;
            targets[i] = (i + 1) % 32;
        }
        return new Batch(PLAN.batchSize(), PLAN.seqLen(), inputs, targets);
    }

    private static ActionEvent event(int rank, ActionKind kind) {
        return new ActionEvent(rank, new Action(rank, kind), -1, 0, 1, 0, 0, 0, 0, 0);
    }

    /** Answers the pass of {@code step} for both ranks: rank 1 (the last stage) reports both microbatches' losses. */
    private void passDone(BehaviorTestKit<Coordinator.Command> kit, int pass, double lossPerMicrobatch) {
        StageActor.BeginPass p0 = (StageActor.BeginPass) rank0.receiveMessage();
        StageActor.BeginPass p1 = (StageActor.BeginPass) rank1.receiveMessage();
        assertEquals(pass, p0.pass());
        assertTrue(p0.data() != null && p1.data() != null, "the first and last stages' ranks get the microbatches");
        kit.run(new Coordinator.PassDone(1, pass, List.of(), Map.of(0, new LossOutput(lossPerMicrobatch, 16),
                1, new LossOutput(lossPerMicrobatch, 16)), Map.of()));
        assertFalse(rank0.hasMessages(), "the step goes on before every rank finished the pass");
        kit.run(new Coordinator.PassDone(0, pass, List.of(), Map.of(), Map.of()));
    }

    private static TreeMap<Integer, double[]> sums(int stage, double... values) {
        TreeMap<Integer, double[]> m = new TreeMap<>();
        m.put(stage, values);
        return m;
    }

    @Test
    void aStepAsksForStepsAreStashedWhileJoiningAndRunThroughPassesGradientsAndOptimizer() {
        BehaviorTestKit<Coordinator.Command> kit = coordinator(Faults.NONE);
        rank0.receiveMessage();
        rank1.receiveMessage();
        kit.run(new Coordinator.RunStep(0, List.of(batch()), client.getRef()));
        assertFalse(rank0.hasMessages(), "a step before every rank joined waits");
        kit.run(new Coordinator.Joined(1, PLAN.jobId(), null));
        kit.run(new Coordinator.Joined(0, PLAN.jobId(), null));

        passDone(kit, 0, 32.0);
        assertInstanceOf(StageActor.FinishStep.class, rank0.receiveMessage());
        assertInstanceOf(StageActor.FinishStep.class, rank1.receiveMessage());
        // Ranks answer in any order; the norm adds stage after stage.
        kit.run(new Coordinator.GradReport(1, sums(1, 1.0, 2.0), null, -1, new float[0][], event(1, ActionKind.REDUCE_GRAD)));
        kit.run(new Coordinator.GradReport(0, sums(0, 0.5, 0.5), null, -1, new float[0][], event(0, ActionKind.REDUCE_GRAD)));
        StageActor.ApplyOptimizer a0 = (StageActor.ApplyOptimizer) rank0.receiveMessage();
        StageActor.ApplyOptimizer a1 = (StageActor.ApplyOptimizer) rank1.receiveMessage();
        assertFalse(a0.skip());
        assertEquals(a0.clip(), a1.clip());
        assertEquals(1.0 / 2.0, a0.clip(), 1e-6, "norm 2 clipped to 1");
        kit.run(new Coordinator.OptimizerDone(0, event(0, ActionKind.OPTIMIZER_STEP), 100));
        assertFalse(client.hasMessages());
        kit.run(new Coordinator.OptimizerDone(1, event(1, ActionKind.OPTIMIZER_STEP), 200));

        Coordinator.StepReport report = client.receiveMessage().getValue();
        assertEquals(0, report.step());
        assertEquals(2.0, report.gradNorm(), 1e-12);
        assertEquals(64.0 / 32, report.loss(), 1e-12, "summed losses over the 32 counted targets");
        assertTrue(report.applied());
        assertEquals(List.of(100L, 200L), Arrays.stream(report.memoryPeak()).boxed().toList());

        kit.run(new Coordinator.RunStep(1, List.of(batch()), client.getRef()));
        assertEquals(1, ((StageActor.BeginPass) rank0.receiveMessage()).pass(), "idle again: the next step begins");
    }

    /** A coordinator of {@code plan} whose two ranks have joined. */
    private BehaviorTestKit<Coordinator.Command> joined(JobPlan plan) {
        BehaviorTestKit<Coordinator.Command> kit = BehaviorTestKit.create(Coordinator.create(plan, List.of(rank0.getRef(), rank1.getRef())));
        rank0.receiveMessage();
        rank1.receiveMessage();
        kit.run(new Coordinator.Joined(0, plan.jobId(), null));
        kit.run(new Coordinator.Joined(1, plan.jobId(), null));
        return kit;
    }

    static JobPlan forwardOnly(int microbatches) {
        return JobPlan.builder(MODEL).ranks(2).forwardOnly().microbatches(microbatches).microbatchSize(2).seqLen(8)
                .backend(Backend.CPU).build();
    }

    @Test
    void evaluationScoresTheBatchesInPassesOfThePlansMicrobatchesAndAddsTheLossesInBatchOrder() {
        BehaviorTestKit<Coordinator.Command> kit = joined(forwardOnly(2));
        TestInbox<StatusReply<Coordinator.EvalReport>> eval = TestInbox.create();
        kit.run(new Coordinator.RunEval(List.of(batch(), batch(), batch()), eval.getRef()));
        StageActor.BeginPass p0 = (StageActor.BeginPass) rank0.receiveMessage();
        StageActor.BeginPass p1 = (StageActor.BeginPass) rank1.receiveMessage();
        assertEquals(new Inference.Score(2), p0.inference());
        assertEquals(2, p1.data().targets().length, "the last stage's rank gets the targets of the pass's batches");
        kit.run(new Coordinator.PassDone(1, p1.pass(), List.of(), Map.of(1, new LossOutput(2.0, 16), 0, new LossOutput(1.0, 16)), Map.of()));
        kit.run(new Coordinator.PassDone(0, p0.pass(), List.of(), Map.of(), Map.of()));
        StageActor.BeginPass second = (StageActor.BeginPass) rank1.receiveMessage();
        assertEquals(new Inference.Score(1), second.inference(), "the third batch in a pass of its own");
        rank0.receiveMessage();
        kit.run(new Coordinator.PassDone(1, p1.pass(), List.of(), Map.of(0, new LossOutput(99, 16)), Map.of()));   // late: ignored
        kit.run(new Coordinator.PassDone(1, second.pass(), List.of(), Map.of(0, new LossOutput(4.0, 16)), Map.of()));
        assertFalse(eval.hasMessages(), "rank 0 has not finished the pass");
        kit.run(new Coordinator.PassDone(0, second.pass(), List.of(), Map.of(), Map.of()));
        Coordinator.EvalReport r = eval.receiveMessage().getValue();
        assertEquals(1.0 + 2.0 + 4.0, r.lossSum());
        assertEquals(48, r.counted());
        assertEquals(3L * PLAN.batchSize() * PLAN.seqLen(), r.tokens());
    }

    @Test
    void generationPicksEachTokenFromTheLastRanksLogitsAndFeedsItToTheFirst() {
        BehaviorTestKit<Coordinator.Command> kit = joined(forwardOnly(3));
        TestInbox<StatusReply<Coordinator.GenerateReport>> gen = TestInbox.create();
        List<Integer> streamed = new ArrayList<>();
        kit.run(new Coordinator.RunGenerate(new int[]{7, 8, 9}, 2, 0, 0, 1, Integer.MAX_VALUE, streamed::add, gen.getRef()));
        StageActor.BeginPass prompt = (StageActor.BeginPass) rank0.receiveMessage();
        rank1.receiveMessage();
        assertEquals(new Inference.Decode(3, 0, 5), prompt.inference(), "the prompt's 3 tokens in one pass");
        assertEquals(List.of(7, 8, 9), Arrays.stream(prompt.data().inputs()).map(t -> t[0]).toList());
        kit.run(new Coordinator.PassDone(0, prompt.pass(), List.of(), Map.of(), Map.of()));
        kit.run(new Coordinator.PassDone(1, prompt.pass(), List.of(), Map.of(), Map.of(2, new float[]{0, 0, 5, 1})));
        StageActor.BeginPass next = (StageActor.BeginPass) rank0.receiveMessage();
        rank1.receiveMessage();
        assertEquals(new Inference.Decode(1, 3, 5), next.inference(), "the picked token, at position 3");
        assertEquals(2, next.data().inputs()[0][0]);
        kit.run(new Coordinator.PassDone(1, next.pass(), List.of(), Map.of(), Map.of(0, new float[]{9, 0, 5, 1})));
        kit.run(new Coordinator.PassDone(0, next.pass(), List.of(), Map.of(), Map.of()));
        assertEquals(List.of(7, 8, 9, 2, 0), Arrays.stream(gen.receiveMessage().getValue().ids()).boxed().toList());
        assertEquals(List.of(2, 0), streamed);
        assertFalse(rank0.hasMessages(), "no pass after the last token");
    }

    @Test
    void evaluationOnATrainingPlanNumbersItsPassesBelowZeroAndAStepRunsAfterIt() {
        BehaviorTestKit<Coordinator.Command> kit = joined(PLAN);
        TestInbox<StatusReply<Coordinator.EvalReport>> eval = TestInbox.create();
        kit.run(new Coordinator.RunEval(List.of(batch(), batch(), batch()), eval.getRef()));
        StageActor.BeginPass p0 = (StageActor.BeginPass) rank0.receiveMessage();
        StageActor.BeginPass p1 = (StageActor.BeginPass) rank1.receiveMessage();
        assertEquals(-1, p0.pass(), "the ranks run a negative pass on their evaluation rows");
        assertEquals(new Inference.Score(2), p1.inference(), "as many batches a pass as a step has microbatches");
        kit.run(new Coordinator.PassDone(1, -1, List.of(), Map.of(0, new LossOutput(1.0, 16), 1, new LossOutput(2.0, 16)), Map.of()));
        kit.run(new Coordinator.PassDone(0, -1, List.of(), Map.of(), Map.of()));
        StageActor.BeginPass second = (StageActor.BeginPass) rank0.receiveMessage();
        rank1.receiveMessage();
        assertEquals(-2, second.pass());
        kit.run(new Coordinator.PassDone(1, -2, List.of(), Map.of(0, new LossOutput(4.0, 16)), Map.of()));
        kit.run(new Coordinator.PassDone(0, -2, List.of(), Map.of(), Map.of()));
        Coordinator.EvalReport r = eval.receiveMessage().getValue();
        assertEquals((1.0 + 2.0 + 4.0) / 48, r.loss());
        kit.run(new Coordinator.RunStep(0, List.of(batch()), client.getRef()));
        StageActor.BeginPass step = (StageActor.BeginPass) rank0.receiveMessage();
        assertEquals(0, step.pass());
        assertEquals(null, step.inference(), "then a training pass");
    }

    @Test
    void generationIsRefusedOnATrainingPlanAndAPromptLongerThanThePlansMicrobatches() {
        BehaviorTestKit<Coordinator.Command> kit = joined(PLAN);
        TestInbox<StatusReply<Coordinator.GenerateReport>> refused = TestInbox.create();
        kit.run(new Coordinator.RunGenerate(new int[]{1}, 1, 0, 0, 1, Integer.MAX_VALUE, id -> { }, refused.getRef()));
        assertTrue(refused.receiveMessage().getError().getMessage().contains("generation runs on a forward-only plan"));
        assertFalse(rank0.hasMessages());
        inboxes();
        BehaviorTestKit<Coordinator.Command> infer = joined(forwardOnly(2));
        TestInbox<StatusReply<Coordinator.GenerateReport>> gen = TestInbox.create();
        infer.run(new Coordinator.RunGenerate(new int[]{1, 2, 3}, 1, 0, 0, 1, Integer.MAX_VALUE, id -> { }, gen.getRef()));
        assertTrue(gen.receiveMessage().getError().getMessage().contains("expected 1..2 prompt tokens"));
        assertFalse(rank0.hasMessages());
    }

    @Test
    void aRankFailureEndsTheStepWithItsMessageAndTheNextStepRuns() {
        BehaviorTestKit<Coordinator.Command> kit = joined(Faults.NONE);
        kit.run(new Coordinator.RunStep(0, List.of(batch()), client.getRef()));
        rank0.receiveMessage();
        rank1.receiveMessage();
        kit.run(new Coordinator.RunStep(1, List.of(batch()), client.getRef()));
        assertEquals("step 0 is still running", client.receiveMessage().getError().getMessage());
        kit.run(new Coordinator.RankFailed(1, "rank 1, stage 1, action 1F0 (microbatch 0): boom"));
        assertEquals("rank 1, stage 1, action 1F0 (microbatch 0): boom", client.receiveMessage().getError().getMessage());
        kit.run(new Coordinator.PassDone(0, 0, List.of(), Map.of(), Map.of()));          // late: ignored
        kit.run(new Coordinator.RunStep(1, List.of(batch()), client.getRef()));
        assertInstanceOf(StageActor.BeginPass.class, rank0.receiveMessage());
    }

    @Test
    void aNonFiniteGradientSkipsTheOptimizerOnEveryRankAndSaysWhere() {
        BehaviorTestKit<Coordinator.Command> kit = joined(Faults.NONE);
        kit.run(new Coordinator.RunStep(0, List.of(batch()), client.getRef()));
        passDone(kit, 0, 32.0);
        rank0.receiveMessage();
        rank1.receiveMessage();
        kit.run(new Coordinator.GradReport(0, sums(0, Double.NaN), "stage 0 (rank 0), parameter wte", 0, new float[0][],
                event(0, ActionKind.REDUCE_GRAD)));
        kit.run(new Coordinator.GradReport(1, sums(1, Double.NaN), "stage 1 (rank 1), parameter h.1.w", 1, new float[0][],
                event(1, ActionKind.REDUCE_GRAD)));
        assertTrue(((StageActor.ApplyOptimizer) rank0.receiveMessage()).skip());
        assertTrue(((StageActor.ApplyOptimizer) rank1.receiveMessage()).skip());
        kit.run(new Coordinator.OptimizerDone(0, event(0, ActionKind.OPTIMIZER_STEP), 0));
        kit.run(new Coordinator.OptimizerDone(1, event(1, ActionKind.OPTIMIZER_STEP), 0));
        Coordinator.StepReport report = client.receiveMessage().getValue();
        assertFalse(report.applied());
        assertEquals("non-finite gradient, first at stage 1 (rank 1), parameter h.1.w", report.nonFinite(),
                "the highest stage saw it first (backward runs from the last stage down)");
    }

    @Test
    void aRankThatCannotJoinMakesTheCoordinatorRefuseEveryStep() {
        BehaviorTestKit<Coordinator.Command> kit = coordinator(Faults.NONE);
        kit.run(new Coordinator.RunStep(0, List.of(batch()), client.getRef()));
        kit.run(new Coordinator.Joined(1, PLAN.jobId(), "it was started with a different plan"));
        String why = "rank 1 cannot join the job: it was started with a different plan";
        assertEquals(why, client.receiveMessage().getError().getMessage(), "the stashed step is answered");
        kit.run(new Coordinator.RunStep(1, List.of(batch()), client.getRef()));
        assertEquals(why, client.receiveMessage().getError().getMessage());
    }

    @Test
    void aRejoinGivesEveryRankAFreshJobIdAndRefusesStepsUntilAllJoined() {
        BehaviorTestKit<Coordinator.Command> kit = joined(Faults.NONE);
        TestInbox<StatusReply<Long>> rejoined = TestInbox.create();
        kit.run(new Coordinator.Rejoin(rejoined.getRef()));
        long id = ((StageActor.JoinJob) rank0.receiveMessage()).jobId();
        assertEquals(id, ((StageActor.JoinJob) rank1.receiveMessage()).jobId());
        assertNotEquals(PLAN.jobId(), id);
        kit.run(new Coordinator.RunStep(3, List.of(batch()), client.getRef()));
        assertEquals("the job is recovering from a failed step", client.receiveMessage().getError().getMessage());
        kit.run(new Coordinator.Joined(0, PLAN.jobId(), null));               // of the old id: not counted
        kit.run(new Coordinator.Joined(0, id, null));
        assertFalse(rejoined.hasMessages());
        kit.run(new Coordinator.Joined(1, id, null));
        assertEquals(id, rejoined.receiveMessage().getValue());
        kit.run(new Coordinator.RunStep(3, List.of(batch()), client.getRef()));
        assertInstanceOf(StageActor.BeginPass.class, rank0.receiveMessage());
    }

    @Test
    void anInjectedLossScaleReachesTheRanksThatComputeTheLoss() {
        BehaviorTestKit<Coordinator.Command> kit = joined(Faults.scaledGradients(2.0));
        kit.run(new Coordinator.RunStep(0, List.of(batch()), client.getRef()));
        StageActor.BeginPass p = (StageActor.BeginPass) rank1.receiveMessage();
        assertEquals(2.0f / 32, p.data().lossScale(), "twice 1 / counted targets");
    }
}

package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.transport.LocalTransport;
import org.apache.pekko.actor.testkit.typed.javadsl.ActorTestKit;
import org.apache.pekko.actor.testkit.typed.javadsl.TestProbe;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.pattern.StatusReply;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * One StageActor on a real CPU submesh, driven through its protocol with Pekko's {@link ActorTestKit}
 * (a probe stands in for the Coordinator): its phases initialising, idle, in a pass and failed, a
 * rejoin, and the step's end. The rank holds the whole model (one rank), so a pass needs no transport.
 */
class StageActorBehaviorTest {
    static final ActorTestKit KIT = ActorTestKit.create();
    static final Duration WAIT = Duration.ofSeconds(30);
    static final ModelSpec MODEL = ModelSpec.gpt2(32, 16, 2, 2, 8);
    static final JobPlan PLAN = JobPlan.builder(MODEL).ranks(1).microbatches(2).microbatchSize(2).seqLen(8)
            .backend(Backend.CPU).build();

    private MeshDevice mesh;
    private LocalTransport transport;
    private TestProbe<Coordinator.Command> coordinator;
    /** When set, rank 0's forward of microbatch 1 throws on its device. */
    private final AtomicBoolean failF1 = new AtomicBoolean();

    @BeforeEach
    void start() {
        mesh = Backends.open("cpu", PLAN.rankMesh(), PLAN.meshOptions());
        transport = new LocalTransport();
        coordinator = KIT.createTestProbe();
    }

    @AfterEach
    void stop() {
        transport.close();
        mesh.close();
    }

    @AfterAll
    static void shutdown() {
        KIT.shutdownTestKit();
    }

    private ActorRef<StageActor.Command> spawn() {
        Faults faults = new Faults() {
            @Override
            public void beforeCompute(int rank, Action a) {
                if (failF1.get() && a.equals(new Action(0, ActionKind.F, 1))) throw new IllegalStateException("injected kernel failure");
            }
        };
        return KIT.spawn(StageActor.create(PLAN, 0, mesh.createSubmeshes(PLAN.rankMesh()).get(0), transport, faults));
    }

    static MicrobatchData data() {
        int[][] inputs = new int[2][16], targets = new int[2][16];
        for (int mb = 0; mb < 2; mb++) {
            for (int i = 0; i < 16; i++) {
                inputs[mb][i] = (i + mb) % 32;
                targets[mb][i] = (i + mb + 1) % 32;
            }
        }
        return new MicrobatchData(2, 8, inputs, targets, 1f / 32);
    }

    private void join(ActorRef<StageActor.Command> rank, long jobId) {
        rank.tell(new StageActor.JoinJob(jobId, PLAN.fingerprint(), coordinator.getRef()));
        Coordinator.Joined joined = coordinator.expectMessageClass(Coordinator.Joined.class, WAIT);
        assertEquals(jobId, joined.jobId());
        assertNull(joined.problem());
    }

    @Test
    void joinsOnceItsStagesExistThenRunsAPassAndTheStepsEnd() {
        ActorRef<StageActor.Command> rank = spawn();
        join(rank, PLAN.jobId());                               // stashed while initialising, answered after

        rank.tell(new StageActor.BeginPass(0, 0, data(), coordinator.getRef()));
        Coordinator.PassDone done = coordinator.expectMessageClass(Coordinator.PassDone.class, WAIT);
        assertEquals(0, done.pass());
        assertEquals(2, done.losses().size(), "the last stage's losses of both microbatches");
        assertEquals(PLAN.schedule().row(0).size(), done.events().size());

        rank.tell(new StageActor.FinishStep(0, coordinator.getRef()));
        Coordinator.GradReport grads = coordinator.expectMessageClass(Coordinator.GradReport.class, WAIT);
        assertEquals(PLAN.stages(), grads.stageSums().size());
        assertNull(grads.nonFinite());
        assertEquals(ActionKind.REDUCE_GRAD, grads.event().action().kind());

        rank.tell(new StageActor.ApplyOptimizer(0, 1e-3, 1.0, false, null, coordinator.getRef()));
        Coordinator.OptimizerDone opt = coordinator.expectMessageClass(Coordinator.OptimizerDone.class, WAIT);
        assertEquals(ActionKind.OPTIMIZER_STEP, opt.event().action().kind());
        assertTrue(opt.memoryPeak() > 0);
    }

    @Test
    void aDifferentPlanIsRefusedNamingBothFingerprints() {
        ActorRef<StageActor.Command> rank = spawn();
        rank.tell(new StageActor.JoinJob(PLAN.jobId(), "another plan", coordinator.getRef()));
        Coordinator.Joined joined = coordinator.expectMessageClass(Coordinator.Joined.class, WAIT);
        assertTrue(joined.problem().startsWith("it was started with a different plan (config or flags) than rank 0"), joined.problem());
        assertTrue(joined.problem().contains("rank 0: another plan"), joined.problem());
    }

    @Test
    void aFailedKernelFailsThePassNamingItThenANewPassRuns() {
        ActorRef<StageActor.Command> rank = spawn();
        join(rank, PLAN.jobId());
        failF1.set(true);
        rank.tell(new StageActor.BeginPass(0, 0, data(), coordinator.getRef()));
        Coordinator.RankFailed failed = coordinator.expectMessageClass(Coordinator.RankFailed.class, WAIT);
        assertEquals("rank 0, stage 0, action 0F1 (microbatch 1): injected kernel failure", failed.message());
        coordinator.expectNoMessage(Duration.ofMillis(300));    // one failure, however many results come late

        failF1.set(false);
        rank.tell(new StageActor.BeginPass(0, 1, data(), coordinator.getRef()));
        assertEquals(1, coordinator.expectMessageClass(Coordinator.PassDone.class, WAIT).pass(), "failed, then a new pass");
    }

    @Test
    void aDroppedFrameFailsTheRunningPassOrTheNextOne() {
        ActorRef<StageActor.Command> rank = spawn();
        join(rank, PLAN.jobId());
        // Dropped while idle: a frame of the next pass (another rank began it first), which fails as it begins here.
        rank.tell(new StageActor.FrameDropped("aeron:ipc 1->0", "frame 3, checksum mismatch"));
        coordinator.expectNoMessage(Duration.ofMillis(300));
        rank.tell(new StageActor.BeginPass(0, 0, data(), coordinator.getRef()));
        assertEquals("rank 0: on aeron:ipc 1->0, frame 3, checksum mismatch",
                coordinator.expectMessageClass(Coordinator.RankFailed.class, WAIT).message());
        coordinator.expectNoMessage(Duration.ofMillis(300));

        // Hold the device queue so the pass is still running when the frame is dropped.
        join(rank, PLAN.jobId() + 1);
        CountDownLatch release = new CountDownLatch(1);
        TestProbe<StatusReply<Object>> held = KIT.createTestProbe();
        rank.tell(new StageActor.RunOnDevice(stages -> {
            try {
                return release.await(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        }, held.getRef()));
        rank.tell(new StageActor.BeginPass(0, 1, data(), coordinator.getRef()));
        rank.tell(new StageActor.FrameDropped("aeron:ipc 1->0", "frame 4, checksum mismatch"));
        Coordinator.RankFailed failed = coordinator.expectMessageClass(Coordinator.RankFailed.class, WAIT);
        assertEquals("rank 0: on aeron:ipc 1->0, frame 4, checksum mismatch", failed.message());
        release.countDown();
        held.expectMessageClass(StatusReply.class, WAIT);
        coordinator.expectNoMessage(Duration.ofMillis(300));    // the kernels queued before are freed, not reported

        join(rank, PLAN.jobId() + 2);                           // a rejoin: a new pass under the new id
        rank.tell(new StageActor.BeginPass(0, 2, data(), coordinator.getRef()));
        assertEquals(2, coordinator.expectMessageClass(Coordinator.PassDone.class, WAIT).pass());
    }

    @Test
    void statsSayTheRowAndThatNothingFinishedYet() {
        ActorRef<StageActor.Command> rank = spawn();
        join(rank, PLAN.jobId());
        TestProbe<StageStats> stats = KIT.createTestProbe();
        rank.tell(new StageActor.GetStats(stats.getRef()));
        StageStats s = stats.expectMessageClass(StageStats.class, WAIT);
        assertEquals(0, s.rank());
        assertEquals(PLAN.schedule().row(0).size(), s.rowLength());
        assertEquals(-1, s.waiting().sinceFinishedMs(), "nothing finished yet");
    }
}

package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.transport.FrameHeader;
import dev.ttpipe.transport.TensorKind;
import dev.ttpipe.transport.TensorPayload;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.Collectors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The row interpreter alone, without actors or kernels: two ranks' executors wired to each other
 * through fake ports (a send is an arrival at the other rank, when the test delivers it), their
 * device queues completed by the test in a random order. Every interleaving must finish the pass on
 * both ranks, keep at most two actions on a device queue, run the static rows in their order, and in
 * ready-first mode accumulate weight gradients in microbatch order.
 */
class RankExecutorTest {
    static MeshDevice mesh;
    static Submesh submesh;

    @BeforeAll
    static void open() {
        mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults());
        submesh = mesh.createSubmeshes(new MeshShape(1, 1)).get(0);
    }

    @AfterAll
    static void close() {
        mesh.close();
    }

    static JobPlan plan(String schedule, int ranks, int microbatches, boolean readyFirst) {
        ModelSpec model = ModelSpec.gpt2(32, 16, 2, 4, 8);
        return JobPlan.builder(model).ranks(ranks).schedule(schedule).microbatches(microbatches).microbatchSize(1).seqLen(8)
                .readyFirst(readyFirst).backend(Backend.CPU).build();
    }

    /** A tensor from another rank that says whether it was used or thrown away. */
    static final class Payload implements TensorPayload {
        final FrameHeader header;
        final Tensor tensor;
        boolean discarded;

        Payload(FrameHeader header, Tensor tensor) {
            this.header = header;
            this.tensor = tensor;
        }

        @Override
        public FrameHeader header() {
            return header;
        }

        @Override
        public Tensor materialize(Submesh dst) {
            return tensor;
        }

        @Override
        public void discard() {
            discarded = true;
            tensor.close();
        }
    }

    /** One rank: its executor, its device queue (what the port was told to compute), what it sent. */
    static final class Rank implements RankExecutor.Port {
        final int index;
        final JobPlan plan;
        final RankExecutor executor;
        final ArrayDeque<Action> device = new ArrayDeque<>();
        final List<Action> computed = new ArrayList<>();
        final List<Payload> outbox = new ArrayList<>();
        int maxQueued;
        int aborts;
        RankExecutor.PassResult result;

        Rank(JobPlan plan, int index) {
            this.plan = plan;
            this.index = index;
            this.executor = RankExecutor.of(plan, index, this);
        }

        @Override
        public void compute(Action a, TensorPayload input, int buffered) {
            boolean needsInput = (a.kind() == ActionKind.F && a.stage() > 0)
                    || ((a.kind() == ActionKind.B || a.kind() == ActionKind.I) && a.stage() < plan.stages() - 1);
            assertEquals(needsInput, input != null, a + ": input given " + (input != null));
            if (input != null) input.materialize(submesh).close();
            device.addLast(a);
            maxQueued = Math.max(maxQueued, device.size());
        }

        @Override
        public void send(int toRank, FrameHeader header, Tensor t) {
            assertEquals(plan.schedule().rankOfStage(header.toStage()), toRank);
            assertTrue(toRank != index, "a send to its own rank: " + header);
            outbox.add(new Payload(header, t));
        }

        @Override
        public long memoryInUse() {
            return 0;
        }

        @Override
        public void abortStep() {
            aborts++;
        }

        /** The device finishes its oldest action: an output when the action has one for another stage. */
        void completeOne() {
            Action a = device.pollFirst();
            computed.add(a);
            boolean output = (a.kind() == ActionKind.F && a.stage() < plan.stages() - 1)
                    || ((a.kind() == ActionKind.B || a.kind() == ActionKind.I) && a.stage() > 0);
            Tensor out = output ? submesh.ops().zeros(Shape.of(4), Layout.REPLICATED, DType.FP32) : null;
            long now = System.nanoTime();
            took(executor.computed(executor.generation(), a, out, null, null, now, now, 0, -1));
        }

        void took(RankExecutor.PassResult r) {
            if (r != null) {
                assertNull(result, "a pass finished twice");
                result = r;
            }
        }
    }

    /** Runs one pass on every rank, completing device actions and delivering frames in an order drawn from {@code seed}. */
    static List<Rank> runPass(JobPlan plan, long seed) {
        return runPass(plan, seed, Integer.MAX_VALUE);
    }

    /** {@link #runPass(JobPlan, long)} of the rows' first {@code microbatches} microbatches. */
    static List<Rank> runPass(JobPlan plan, long seed, int microbatches) {
        List<Rank> ranks = new ArrayList<>();
        for (int r = 0; r < plan.ranks(); r++) ranks.add(new Rank(plan, r));
        Random random = new Random(seed);
        for (Rank r : ranks) r.took(r.executor.begin(7, microbatches));
        for (int moves = 0; moves < 10_000; moves++) {
            List<Runnable> possible = new ArrayList<>();
            for (Rank r : ranks) {
                if (!r.device.isEmpty()) possible.add(r::completeOne);
                if (!r.outbox.isEmpty()) {
                    possible.add(() -> {
                        Payload p = r.outbox.remove(0);       // frames of one channel arrive in order
                        Rank to = ranks.get(plan.schedule().rankOfStage(p.header.toStage()));
                        to.took(to.executor.arrived(p, System.nanoTime()));
                    });
                }
            }
            if (possible.isEmpty()) break;
            possible.get(random.nextInt(possible.size())).run();
        }
        return ranks;
    }

    static List<Action> computeActions(List<Action> row) {
        return row.stream().filter(a -> a.kind().isCompute()).collect(Collectors.toList());
    }

    /** Inference: a forward-only plan's pass may run fewer microbatches than the rows hold; nothing is stashed. */
    @Test
    void aForwardOnlyPassRunsItsFirstMicrobatchesInOrderAndStashesNothing() {
        JobPlan plan = JobPlan.builder(ModelSpec.gpt2(32, 16, 2, 4, 8)).ranks(3).forwardOnly().microbatches(4).microbatchSize(1)
                .seqLen(8).backend(Backend.CPU).build();
        assertTrue(plan.forwardOnly());
        for (long seed = 0; seed < 20; seed++) {
            for (Rank r : runPass(plan, seed, 3)) {
                assertNotNull(r.result, "seed " + seed + ": rank " + r.index + " did not finish");
                List<Action> row = plan.schedule().row(r.index).stream().filter(a -> a.microbatch() < 3).toList();
                assertEquals(computeActions(row), r.computed, "rank " + r.index);
                assertEquals(row.size(), r.result.events().size(), "one event per action of the microbatches run");
                assertEquals(0, r.executor.stashed(), "a forward-only pass stashes nothing");
            }
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"1f1b", "gpipe", "zb-h1"})
    void everyInterleavingFinishesThePassRunningEachRowInItsOrder(String schedule) {
        JobPlan plan = plan(schedule, 2, 4, false);
        for (long seed = 0; seed < 50; seed++) {
            List<Rank> ranks = runPass(plan, seed);
            for (Rank r : ranks) {
                assertNotNull(r.result, schedule + " seed " + seed + ": rank " + r.index + " did not finish; device "
                        + r.device + ", waiting " + r.executor.waiting(0));
                assertEquals(7, r.result.pass());
                assertEquals(computeActions(plan.schedule().row(r.index)), r.computed, "rank " + r.index + " ran its row out of order");
                assertTrue(r.maxQueued <= RankExecutor.QUEUE_DEPTH, "device queue held " + r.maxQueued);
                assertEquals(plan.schedule().row(r.index).size(), r.result.events().size(), "one event per action of the row");
                assertFalse(r.executor.inPass());
                assertEquals(0, r.executor.buffered());
                assertEquals(0, r.executor.stashed());
            }
        }
    }

    @Test
    void readyFirstAccumulatesWeightGradientsInMicrobatchOrderWithinTheInFlightLimit() {
        JobPlan plan = plan("1f1b", 2, 4, true);
        int[] limits = plan.inFlightLimits();
        for (long seed = 0; seed < 50; seed++) {
            for (Rank r : runPass(plan, seed)) {
                assertNotNull(r.result, "seed " + seed + ": rank " + r.index + " did not finish");
                Map<Integer, Integer> lastWeight = new HashMap<>();
                Map<Integer, Integer> inFlight = new HashMap<>();
                for (Action a : r.computed) {
                    if (a.kind() == ActionKind.F) {
                        int n = inFlight.merge(a.stage(), 1, Integer::sum);
                        assertTrue(n <= Math.max(1, limits[a.stage()]), "seed " + seed + ": " + n + " forwards in flight on stage " + a.stage());
                    }
                    if (a.kind() == ActionKind.B || a.kind() == ActionKind.W) {
                        inFlight.merge(a.stage(), -1, Integer::sum);
                        int previous = lastWeight.getOrDefault(a.stage(), -1);
                        assertEquals(previous + 1, a.microbatch(), "seed " + seed + ": weight gradients out of order: " + r.computed);
                        lastWeight.put(a.stage(), a.microbatch());
                    }
                }
            }
        }
    }

    @Test
    void aRecvWaitsForItsTensorAndSaysFromWhichRank() {
        JobPlan plan = plan("1f1b", 2, 2, false);
        Rank last = new Rank(plan, 1);
        assertNull(last.executor.begin(0));
        assertTrue(last.device.isEmpty(), "rank 1 computed before its input came: " + last.device);
        StageStats.Waiting w = last.executor.waiting(0);
        assertEquals("1RECV_F0", w.waitingFor());
        assertEquals(0, w.waitingFromRank());
        assertTrue(w.inPass());

        Tensor x = submesh.ops().zeros(Shape.of(4), Layout.REPLICATED, DType.FP32);
        Payload p = new Payload(header(plan.jobId(), TensorKind.ACTIVATION, 0, 1, 0), x);
        last.took(last.executor.arrived(p, System.nanoTime()));
        // F0 now, and the last stage's B0 (it needs no tensor from another rank) behind it on the queue.
        assertEquals(List.of(new Action(1, ActionKind.F, 0), new Action(1, ActionKind.B, 0)), List.copyOf(last.device));
        assertFalse(p.discarded);
    }

    @Test
    void aFailureDropsTheStepAndARejoinIgnoresResultsOfTheOldGeneration() {
        JobPlan plan = plan("1f1b", 2, 2, false);
        Rank first = new Rank(plan, 0);
        first.executor.begin(0);
        assertEquals(2, first.device.size(), "F0 and F1 need no input: both queued");
        int oldGeneration = first.executor.generation();

        // A tensor of another job is not taken.
        Payload foreign = new Payload(header(99, TensorKind.GRADIENT, 1, 0, 0),
                submesh.ops().zeros(Shape.of(4), Layout.REPLICATED, DType.FP32));
        first.executor.arrived(foreign, System.nanoTime());
        assertTrue(foreign.discarded);

        String where = first.executor.failed(oldGeneration, first.device.peekFirst());
        assertEquals("rank 0, stage 0, action 0F0 (microbatch 0)", where);
        assertEquals(1, first.aborts, "the stages drop their stash");
        assertFalse(first.executor.inPass());
        assertNull(first.executor.failed(oldGeneration, first.device.peekLast()), "only the first failure fails the pass");

        Payload late = new Payload(header(plan.jobId(), TensorKind.GRADIENT, 1, 0, 0),
                submesh.ops().zeros(Shape.of(4), Layout.REPLICATED, DType.FP32));
        first.executor.arrived(late, System.nanoTime());
        assertTrue(late.discarded, "after a failure, arrivals of the step are dropped");

        first.executor.join(plan.jobId() + 1);
        assertEquals(oldGeneration + 1, first.executor.generation());
        Tensor stale = submesh.ops().zeros(Shape.of(4), Layout.REPLICATED, DType.FP32);
        long now = System.nanoTime();
        assertNull(first.executor.computed(oldGeneration, new Action(0, ActionKind.F, 1), stale, null, null, now, now, 0, -1));
        assertEquals(0, first.executor.actionsRun(), "a result of the old generation is not counted");

        first.device.clear();
        first.executor.begin(1);
        assertEquals(2, first.device.size(), "a new pass runs after the rejoin");
    }

    private static FrameHeader header(long job, TensorKind kind, int from, int to, int mb) {
        return new FrameHeader(job, 0, from, to, mb, kind, DType.FP32, Shape.of(4), Layout.REPLICATED, 0, 0);
    }
}

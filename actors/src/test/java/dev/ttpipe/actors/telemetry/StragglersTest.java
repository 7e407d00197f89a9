package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.actors.runtime.ActionEvent;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.Partitioner;
import org.junit.jupiter.api.Test;
import org.yaml.snakeyaml.Yaml;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.UnaryOperator;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The straggler rule on measured steps made to order: past the warm-up, a rank or link is named
 * after 3 steps in a row at 1.5x or more, once, and cleared after 3 below; a rank with more blocks (or the head) that runs at
 * its peers' pace is not named; a slow link whose SENDs are a sliver of the step is not named. A
 * link is measured at its receiver too (each frame's first chunk to its last, where the transport
 * times its frames: Aeron, whose SENDs only queue), and the slower of the two measures counts.
 */
class StragglersTest {
    private static final long MIB = 1 << 20;
    private static final long PASS_NS = 200_000_000L;

    private static JobPlan plan(Integer... blocksPerRank) {
        return JobPlan.builder(ModelSpec.gpt2(16, 16, 2, 8, 8)).ranks(4).microbatches(4).microbatchSize(1).seqLen(8)
                .blocksPerRank(blocksPerRank).backend(Backend.CPU).transport(SocketType.AERON).build();
    }

    /**
     * One step of 4 microbatches: each rank's F takes its stage's planned cost at a pace that makes a
     * 2-block stage's F 10 ms, times {@code fSlow[rank]}; B twice that, times {@code bSlow[rank]}; every
     * SEND moves 1 MiB in 1 ms, link 1 -> 2's forward SENDs in {@code link12Ms}.
     */
    private static Coordinator.StepReport step(JobPlan plan, int step, double[] fSlow, double[] bSlow, double link12Ms) {
        return step(plan, step, fSlow, bSlow, link12Ms, -1);
    }

    /**
     * As above, and where {@code wire12Ms} is not negative, every frame is timed on the link at its
     * receiver too (its RECV's first chunk to last): 1 MiB in 1 ms, link 1 -> 2's forward frames in
     * {@code wire12Ms}.
     */
    private static Coordinator.StepReport step(JobPlan plan, int step, double[] fSlow, double[] bSlow, double link12Ms,
                                               double wire12Ms) {
        Partitioner.Costs costs = Partitioner.costs(plan.model(), plan.seqLen());
        double nsPerUnit = 10e6 / (2 * costs.block());
        List<ActionEvent> events = new ArrayList<>();
        long t = 0;
        for (int s = 0; s < 4; s++) {
            double f = costs.of(plan.slices().get(s)) * nsPerUnit;
            for (int mb = 0; mb < 4; mb++) {
                events.add(event(s, ActionKind.F, mb, t, (long) (f * fSlow[s]), 0));
                events.add(event(s, ActionKind.B, mb, t, (long) (2 * f * bSlow[s]), 0));
                if (s < 3) events.add(event(s, ActionKind.SEND_F, mb, t, (long) (s == 1 ? link12Ms * 1e6 : 1e6), MIB));
                if (s > 0) events.add(event(s, ActionKind.SEND_B, mb, t, 1_000_000L, MIB));
                if (wire12Ms < 0) continue;
                if (s > 0) events.add(received(s, ActionKind.RECV_F, mb, t, (long) (s == 2 ? wire12Ms * 1e6 : 1e6)));
                if (s < 3) events.add(received(s, ActionKind.RECV_B, mb, t, 1_000_000L));
            }
        }
        return new Coordinator.StepReport(step, 1.0, 1.0, 1e-3, 0, 32, 0, PASS_NS, new long[] {0}, new long[] {PASS_NS}, events,
                new long[4], null);
    }

    private static ActionEvent event(int rank, ActionKind kind, int mb, long start, long duration, long bytes) {
        return new ActionEvent(rank, new Action(rank, kind, mb), 0, start, start + duration, bytes, 0, 0, 0, 0);
    }

    /** A RECV of 1 MiB at {@code rank} that waited no time, whose frame was {@code linkNs} on the link. */
    private static ActionEvent received(int rank, ActionKind kind, int mb, long start, long linkNs) {
        return new ActionEvent(rank, new Action(rank, kind, mb), 0, start, start, MIB, 0, 0, 0, 0, linkNs);
    }

    private static final double[] EVEN = {1, 1, 1, 1};

    @Test
    void aRankAndALinkThatStaySlowAreNamedOnceAndClearedOnce() {
        JobPlan plan = plan(2, 2, 2, 2);
        Stragglers s = new Stragglers(plan, false);
        // rank 2: F 2x, B 1.5x, 1.67x over both (as much of each)
        double[] f = {1, 1, 2, 1}, b = {1, 1, 1.5, 1};
        for (int step = 0; step < Stragglers.Thresholds.DEFAULT.warmupSteps(); step++) {
            assertEquals(List.of(), s.observe(step(plan, step, f, b, 5)), "warm-up: left out");
        }
        assertEquals(Map.of(), s.view().slowRanks());
        assertEquals(List.of(), s.observe(step(plan, 5, f, b, 5)));
        assertEquals(List.of(), s.observe(step(plan, 6, f, b, 5)));
        List<String> named = s.observe(step(plan, 7, f, b, 5));
        assertEquals(List.of("rank 2 runs F 2.0x slower than planned: 20 ms vs 10 ms",
                "  suggested blocks_per_rank: {0: 2, 1: 3, 2: 1, 3: 2}",
                "link 1 -> 2 is 5.0x slower than the others: 5.0 ms/MiB vs 1.0 ms/MiB"), named);
        Stragglers.View v = s.view();
        assertEquals(Map.of(2, 8), v.slowRanks());
        assertEquals(Map.of(List.of(1, 2), 8), v.slowLinks());
        assertEquals(2.0, v.worst(2).slowdown(), 1e-6);
        assertEquals(1.5, v.ranks().stream().filter(t -> t.rank() == 2 && t.kind() == ActionKind.B).findFirst().orElseThrow()
                .slowdown(), 1e-6);
        for (int r : new int[] {0, 1, 3}) assertEquals(1.0, v.worst(r).slowdown(), 1e-6, "rank " + r);
        // Still slow, or back for a step or two: nothing new to say.
        assertEquals(List.of(), s.observe(step(plan, 8, f, b, 5)));
        assertEquals(List.of(), s.observe(step(plan, 9, EVEN, EVEN, 1)));
        assertEquals(List.of(), s.observe(step(plan, 10, f, b, 5)));
        assertEquals(List.of(), s.observe(step(plan, 11, EVEN, EVEN, 1)));
        assertEquals(List.of(), s.observe(step(plan, 12, EVEN, EVEN, 1)));
        assertEquals(List.of("rank 2 keeps up again (1.0x planned)", "link 1 -> 2 keeps up again"),
                s.observe(step(plan, 13, EVEN, EVEN, 1)));
        assertEquals(Map.of(), s.view().slowRanks());
        assertNull(s.view().blocksPerRank());
    }

    /** telemetry.straggler_margin, straggler_steps and straggler_warmup_steps move the rule's thresholds. */
    @Test
    void theMarginTheStepsInARowAndTheWarmUpComeFromTheThresholds() {
        JobPlan plan = plan(2, 2, 2, 2);
        double[] f = {1, 1, 2, 1}, b = {1, 1, 1.5, 1};             // rank 2: 1.67x over both
        Stragglers higher = new Stragglers(plan, false, new Stragglers.Thresholds(2.5, 3, 5));
        for (int step = 0; step < 12; step++) assertEquals(List.of(), higher.observe(step(plan, step, f, b, 2)));
        assertEquals(2.5, higher.margin(), 1e-12);
        assertEquals(Map.of(), higher.view().slowRanks(), "1.67x is under a margin of 2.5x");
        assertEquals(Map.of(), higher.view().slowLinks(), "a link at 2x too");

        Stragglers quick = new Stragglers(plan, false, new Stragglers.Thresholds(1.5, 1, 0));
        assertEquals(List.of("rank 2 runs F 2.0x slower than planned: 20 ms vs 10 ms",
                "  suggested blocks_per_rank: {0: 2, 1: 3, 2: 1, 3: 2}",
                "link 1 -> 2 is 5.0x slower than the others: 5.0 ms/MiB vs 1.0 ms/MiB"), quick.observe(step(plan, 0, f, b, 5)),
                "no warm-up, named at the first step");
        assertEquals(Map.of(2, 1), quick.view().slowRanks());
        assertEquals(Map.of(List.of(1, 2), 1), quick.view().slowLinks());
        assertEquals(List.of("rank 2 keeps up again (1.0x planned)", "link 1 -> 2 keeps up again"),
                quick.observe(step(plan, 1, EVEN, EVEN, 1)));

        Stragglers patient = new Stragglers(plan, false, new Stragglers.Thresholds(1.5, 5, 2));
        for (int step = 0; step < 6; step++) assertEquals(List.of(), patient.observe(step(plan, step, f, b, 1)), "step " + step);
        assertEquals(List.of("rank 2 runs F 2.0x slower than planned: 20 ms vs 10 ms",
                "  suggested blocks_per_rank: {0: 2, 1: 3, 2: 1, 3: 2}"), patient.observe(step(plan, 6, f, b, 1)),
                "2 left out, then 5 in a row");
    }

    @Test
    void ranksThatShareCoresMustBeSlowerByTheirSharingToBeNamed() {
        JobPlan oneThread = JobPlan.builder(ModelSpec.gpt2(16, 16, 2, 8, 8)).ranks(4).microbatches(4).microbatchSize(1).seqLen(8)
                .backend(Backend.CPU).meshOptions(MeshOptions.defaults().withThreads(1)).build();
        assertEquals(2.0, Stragglers.sharing(oneThread, true, 2), 1e-12, "4 ranks of 1 thread on 2 cores");
        assertEquals(1.0, Stragglers.sharing(oneThread, true, 8), 1e-12, "more cores than threads");
        assertEquals(1.0, Stragglers.sharing(oneThread, false, 2), 1e-12, "worker processes: a rank each");
        JobPlan sim = JobPlan.builder(ModelSpec.gpt2(16, 16, 2, 8, 8)).ranks(4).microbatches(4).microbatchSize(1).seqLen(8)
                .backend(Backend.SIM).build();
        assertEquals(1.0, Stragglers.sharing(sim, true, 2), 1e-12, "modeled time");
        // as many threads as cores for each of 4 ranks: 4x sharing, a margin of 6x; rank 2 at 1.67x is not named
        JobPlan plan = JobPlan.builder(ModelSpec.gpt2(16, 16, 2, 8, 8)).ranks(4).microbatches(4).microbatchSize(1).seqLen(8)
                .blocksPerRank(2, 2, 2, 2).backend(Backend.CPU)
                .meshOptions(MeshOptions.defaults().withThreads(Runtime.getRuntime().availableProcessors())).build();
        Stragglers shared = new Stragglers(plan, true);
        assertEquals(6.0, shared.margin(), 1e-12);
        double[] f = {1, 1, 2, 1}, b = {1, 1, 1.5, 1};
        for (int step = 0; step < 12; step++) assertEquals(List.of(), shared.observe(step(plan, step, f, b, 1)));
        assertEquals(2.0, shared.view().worst(2).slowdown(), 1e-6, "measured, not named");
        assertEquals(Map.of(), shared.view().slowRanks());
    }

    @Test
    void aSuggestionForManyRanksWrapsAt80ColumnsAsAYamlFlowMap() {
        List<String> entries = new ArrayList<>();
        for (int r = 0; r < 24; r++) entries.add(r + ": " + (r == 7 ? 1 : 4));
        List<String> lines = Stragglers.suggestion(entries);
        assertTrue(lines.size() > 1, lines.toString());
        for (String l : lines) assertTrue(l.length() <= 80, l);
        Map<?, ?> yaml = new Yaml().load(String.join("\n", lines).strip());
        Map<?, ?> split = (Map<?, ?>) yaml.get("suggested blocks_per_rank");
        assertEquals(24, split.size(), yaml.toString());
        for (int r = 0; r < 24; r++) assertEquals(r == 7 ? 1 : 4, split.get(r), yaml.toString());
        assertEquals(List.of("  suggested blocks_per_rank: {0: 1, 1: 2}"), Stragglers.suggestion(List.of("0: 1", "1: 2")));
    }

    @Test
    void ranksWithMoreBlocksOrTheHeadAtTheirPeersPaceAreNotNamed() {
        JobPlan plan = plan(3, 1, 2, 2);
        Stragglers s = new Stragglers(plan, false);
        for (int step = 0; step < 10; step++) assertEquals(List.of(), s.observe(step(plan, step, EVEN, EVEN, 1)));
        for (Stragglers.RankTime t : s.view().ranks()) assertEquals(1.0, t.slowdown(), 1e-6, t.toString());
        assertTrue(s.view().worst(0).seconds() > 2.9 * s.view().worst(1).seconds(), "rank 0 holds 3 blocks, rank 1 one");
    }

    @Test
    void aSlowLinkThatCostsTheStepLittleIsMeasuredButNotNamed() {
        JobPlan plan = plan(2, 2, 2, 2);
        Stragglers s = new Stragglers(plan, false);
        // 4 SENDs of 0.5 ms against 0.1 ms on the others: 2 ms of a 200 ms pass, 1%
        double scale = 0.1;
        for (int step = 0; step < 10; step++) {
            Coordinator.StepReport r = step(plan, step, EVEN, EVEN, 5);
            List<ActionEvent> shrunk = new ArrayList<>();
            for (ActionEvent e : r.events()) {
                long d = e.kind().isComm() ? (long) (e.durationNs() * scale) : e.durationNs();
                shrunk.add(new ActionEvent(e.rank(), e.action(), e.pass(), e.startNs(), e.startNs() + d, e.bytes(), 0, 0, 0, 0));
            }
            assertEquals(List.of(), s.observe(new Coordinator.StepReport(step, 1, 1, 1e-3, 0, 32, 0, PASS_NS, new long[] {0},
                    new long[] {PASS_NS}, shrunk, new long[4], null)));
        }
        assertEquals(5.0, s.view().link(1, 2).slowdown(), 1e-6);
        assertEquals(Map.of(), s.view().slowLinks());
    }

    /** {@code r} with each event through {@code f}. */
    private static Coordinator.StepReport reshaped(Coordinator.StepReport r, UnaryOperator<ActionEvent> f) {
        return new Coordinator.StepReport(r.step(), 1, 1, 1e-3, 0, 32, 0, PASS_NS, new long[] {0}, new long[] {PASS_NS},
                r.events().stream().map(f).toList(), new long[4], null);
    }

    /** The step's SENDs only queue, as on Aeron: 10 us per MiB, every link. */
    private static Coordinator.StepReport queued(Coordinator.StepReport r) {
        return reshaped(r, e -> e.kind() != ActionKind.SEND_F && e.kind() != ActionKind.SEND_B ? e
                : new ActionEvent(e.rank(), e.action(), e.pass(), e.startNs(), e.startNs() + 10_000, e.bytes(), 0, 0, 0, 0));
    }

    /** SENDs that only queue: link 1 -> 2, slow on the wire, is named from its receiver's times. */
    @Test
    void aLinkSlowOnTheWireIsNamedFromItsFramesTimeAtTheReceiver() {
        JobPlan plan = plan(2, 2, 2, 2);
        Stragglers s = new Stragglers(plan, false);
        for (int step = 0; step < 7; step++) {
            assertEquals(List.of(), s.observe(queued(step(plan, step, EVEN, EVEN, 1, 5))), "step " + step);
        }
        assertEquals(List.of("link 1 -> 2 is 5.0x slower than the others: 5.0 ms/MiB vs 1.0 ms/MiB"),
                s.observe(queued(step(plan, 7, EVEN, EVEN, 1, 5))));
        assertEquals(Map.of(List.of(1, 2), 8), s.view().slowLinks());
        assertEquals(5.0, s.view().link(1, 2).secondsPerMiB() * 1e3, 1e-9, "the receive side's time, not the SENDs' 10 us");
        for (int step = 8; step < 10; step++) assertEquals(List.of(), s.observe(queued(step(plan, step, EVEN, EVEN, 1, 1))));
        assertEquals(List.of("link 1 -> 2 keeps up again"), s.observe(queued(step(plan, 10, EVEN, EVEN, 1, 1))));
        assertEquals(Map.of(), s.view().slowLinks());

        Stragglers sendsOnly = new Stragglers(plan, false);
        for (int step = 0; step < 10; step++) assertEquals(List.of(), sendsOnly.observe(queued(step(plan, step, EVEN, EVEN, 1))));
        assertEquals(Map.of(), sendsOnly.view().slowLinks(), "without the receiver's times, SENDs that only queue show nothing");
    }

    /** Without the receive side's times (the local transport, fabric), the SENDs' alone; with both, the slower. */
    @Test
    void theSlowerOfTheSendsAndTheFramesOnTheLinkCounts() {
        JobPlan plan = plan(2, 2, 2, 2);
        Stragglers sendsOnly = new Stragglers(plan, false, new Stragglers.Thresholds(1.5, 1, 0));
        assertEquals(List.of(), sendsOnly.observe(step(plan, 0, EVEN, EVEN, 0.01)), "fast SENDs, frames not timed");
        assertEquals(0.01, sendsOnly.view().link(1, 2).secondsPerMiB() * 1e3, 1e-9);
        Stragglers slowSends = new Stragglers(plan, false, new Stragglers.Thresholds(1.5, 1, 0));
        assertEquals(List.of("link 1 -> 2 is 4.0x slower than the others: 4.0 ms/MiB vs 1.0 ms/MiB"),
                slowSends.observe(step(plan, 0, EVEN, EVEN, 4, 1)), "SENDs slower than the frames on the link");
        Stragglers slowWire = new Stragglers(plan, false, new Stragglers.Thresholds(1.5, 1, 0));
        assertEquals(List.of("link 1 -> 2 is 3.0x slower than the others: 3.0 ms/MiB vs 1.0 ms/MiB"),
                slowWire.observe(step(plan, 0, EVEN, EVEN, 0.5, 3)), "frames on the link slower than the SENDs");
    }

    /** A RECV of a tensor handed over in memory (no bytes) or not timed (-1) says nothing of a link. */
    @Test
    void receivesWithoutBytesOrATimeOnTheLinkAreLeftOut() {
        JobPlan plan = plan(2, 2, 2, 2);
        Stragglers s = new Stragglers(plan, false, new Stragglers.Thresholds(1.5, 1, 0));
        List<ActionEvent> events = new ArrayList<>(step(plan, 0, EVEN, EVEN, 1).events());
        for (int mb = 0; mb < 4; mb++) {
            events.add(new ActionEvent(2, new Action(2, ActionKind.RECV_F, mb), 0, 0, 0, 0, 0, 0, 0, 0, 50_000_000L));
            events.add(received(2, ActionKind.RECV_F, mb, 0, -1));
        }
        assertEquals(List.of(), s.observe(new Coordinator.StepReport(0, 1, 1, 1e-3, 0, 32, 0, PASS_NS, new long[] {0},
                new long[] {PASS_NS}, events, new long[4], null)));
        assertEquals(1.0, s.view().link(1, 2).slowdown(), 1e-9);
    }

    /** Frames slow on the wire, but 4 x 0.5 ms of a 200 ms pass (1%): measured, not named. */
    @Test
    void aLinkSlowOnTheWireThatCostsTheStepLittleIsNotNamed() {
        JobPlan plan = plan(2, 2, 2, 2);
        Stragglers s = new Stragglers(plan, false);
        for (int step = 0; step < 10; step++) {
            assertEquals(List.of(), s.observe(reshaped(queued(step(plan, step, EVEN, EVEN, 1, 5)), e -> e.linkNs() < 0 ? e
                    : new ActionEvent(e.rank(), e.action(), e.pass(), e.startNs(), e.endNs(), e.bytes(), 0, 0, 0, 0, e.linkNs() / 10))));
        }
        assertEquals(5.0, s.view().link(1, 2).slowdown(), 1e-6);
        assertEquals(Map.of(), s.view().slowLinks());
    }
}

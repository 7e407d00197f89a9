package dev.ttpipe.schedules;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class SimulatorTest {
    private static final double EPS = 1e-9;

    @Test
    void gpipeAndOneFOneBHaveTheTextbookBubbleWithEqualStages() {
        for (int p = 1; p <= 8; p++) {
            for (int m = 1; m <= 24; m += (m < 4 ? 1 : 5)) {
                for (double[] fb : new double[][]{{1, 2}, {1.5, 1.5}, {0.7, 2.3}}) {
                    CostModel costs = CostModel.uniform(fb[0], fb[1], fb[1] / 2, fb[1] / 2, 0);
                    double expected = (p - 1.0) / (m + p - 1.0);
                    for (String name : List.of("gpipe", "1f1b")) {
                        SimResult r = Simulator.simulate(Schedules.generate(name, p, m, 1, null), costs);
                        assertEquals(expected, r.bubbleFraction(), EPS, name + " P=" + p + " M=" + m);
                        assertEquals((m + p - 1) * (fb[0] + fb[1]), r.makespan(), EPS, name + " P=" + p + " M=" + m);
                        for (int rank = 0; rank < p; rank++) assertEquals(expected, r.bubbleFraction(rank), EPS);
                    }
                }
            }
        }
    }

    @Test
    void oneFOneBHoldsMinOfPMinusRankAndMActivations() {
        CostModel costs = CostModel.uniform(1, 2, 1, 1, 0);
        for (int p = 1; p <= 8; p++) {
            for (int m = 1; m <= 12; m++) {
                SimResult r = Simulator.simulate(Schedules.generate("1f1b", p, m, 1, null), costs);
                SimResult gpipe = Simulator.simulate(Schedules.generate("gpipe", p, m, 1, null), costs);
                for (int rank = 0; rank < p; rank++) {
                    assertEquals(Math.min(p - rank, m), r.peakActivations(rank), "P=" + p + " M=" + m + " rank " + rank);
                    assertEquals(m, gpipe.peakActivations(rank));
                }
            }
        }
    }

    @Test
    void interleavingDividesTheIdleTimeByTheVirtualStages() {
        double f = 1.2;
        double b = 2.6;
        for (int p = 2; p <= 6; p++) {
            for (int v = 2; v <= 4; v++) {
                for (int m = p; m <= 3 * p; m += p) {
                    // a rank's share of the model costs F and B; each of its V chunks a V-th of that
                    CostModel costs = CostModel.uniform(f / v, b / v, b / v / 2, b / v / 2, 0);
                    SimResult r = Simulator.simulate(Schedules.generate("interleaved", p, m, v, null), costs);
                    SimResult plain = Simulator.simulate(Schedules.generate("1f1b", p, m, 1, null), CostModel.uniform(f, b, b / 2, b / 2, 0));
                    for (int rank = 0; rank < p; rank++) {
                        double idle = r.makespan() - r.busy(rank);
                        assertEquals((p - 1) * (f + b) / v, idle, EPS, "P=" + p + " V=" + v + " M=" + m + " rank " + rank);
                        assertEquals(plain.makespan() - plain.busy(rank), v * idle, EPS);
                    }
                }
            }
        }
    }

    @Test
    void zeroBubbleH1IdlesAThirdOfOneFOneBWhenFIAndWCostTheSame() {
        for (int p = 2; p <= 8; p++) {
            for (int m = p; m <= 3 * p; m += p) {
                double t = 1.5;
                CostModel costs = CostModel.uniform(t, 2 * t, t, t, 0);
                SimResult zb = Simulator.simulate(Schedules.generate("zb-h1", p, m, 1, null), costs);
                SimResult base = Simulator.simulate(Schedules.generate("1f1b", p, m, 1, null), costs);
                double zbIdle = zb.makespan() - m * 3 * t;
                double baseIdle = base.makespan() - m * 3 * t;
                assertEquals(baseIdle / 3, zbIdle, EPS, "P=" + p + " M=" + m);
                assertEquals((p - 1) * t, zbIdle, EPS);
                for (int rank = 0; rank < p; rank++) assertTrue(zb.peakActivations(rank) <= base.peakActivations(0));
            }
        }
    }

    @Test
    void communicationDelaysEveryCrossRankHop() {
        // one microbatch through P stages: P forwards, P backwards, 2(P-1) hops
        int p = 4;
        SimResult r = Simulator.simulate(Schedules.generate("1f1b", p, 1, 1, null), CostModel.uniform(1, 2, 1, 1, 0.25));
        assertEquals(p * 3 + 2 * (p - 1) * 0.25, r.makespan(), EPS);
        SimResult lowered = Simulator.simulate(Lowering.lower(Schedules.generate("1f1b", p, 1, 1, null)), CostModel.uniform(1, 2, 1, 1, 0.25));
        assertEquals(r.makespan(), lowered.makespan(), EPS);
    }

    @Test
    void stagesOnOneRankHandOverWithoutCommunicationTime() {
        // P=1 holding 3 stages: no hop crosses ranks, so comm never counts
        SimResult r = Simulator.simulate(Schedules.generate("interleaved", 1, 2, 3, null), CostModel.uniform(1, 2, 1, 1, 5));
        assertEquals(2 * 3 * 3, r.makespan(), EPS);
        assertEquals(0, r.bubbleFraction(), EPS);
    }

    @Test
    void sendAndReceiveOverheadOccupiesTheRank() {
        Schedule lowered = Lowering.lower(Schedules.generate("gpipe", 2, 1, 1, null));
        CostModel costs = CostModel.builder().forward(1).backward(2).comm(0.5).commOverhead(0.1).build();
        // 0F0, 0SEND_F0 (0.1), hop 0.5, 1RECV_F0 (0.1), 1F0, 1B0, 1SEND_B0, hop, 0RECV_B0, 0B0
        assertEquals(1 + 0.1 + 0.5 + 0.1 + 1 + 2 + 0.1 + 0.5 + 0.1 + 2, Simulator.simulate(lowered, costs).makespan(), EPS);
    }

    @Test
    void unevenStagesMakeTheSlowestStageTheBottleneck() {
        CostModel costs = CostModel.builder().forward(1, 1, 3, 1).backward(2, 2, 6, 2).build();
        SimResult r = Simulator.simulate(Schedules.generate("1f1b", 4, 16, 1, null), costs);
        assertEquals(0, r.bubbleFraction(2), 0.2);
        assertTrue(r.makespan() >= 16 * 9);
        assertTrue(r.bubbleFraction(0) > 0.5, "fast stages wait for the slow one");
    }

    @Test
    void countsActivationsUntilTheWeightPassAndInBytes() {
        CostModel costs = CostModel.builder().forward(1).backwardInput(1).backwardWeight(1)
                .memoryPerMicrobatchBytes(1000, 2000).build();
        Schedule s = ScheduleCsv.read("0F0,0F1,0I0,0I1,0W0,0W1\n1F0,1I0,1W0,1F1,1I1,1W1\n", "split.csv");
        SimResult r = Simulator.simulate(s, costs);
        assertEquals(2, r.peakActivations(0));
        assertEquals(2000, r.peakActivationBytes(0));
        assertEquals(1, r.peakActivations(1));
        assertEquals(2000, r.peakActivationBytes(1));
        assertEquals(-1, Simulator.simulate(s, CostModel.uniform(1, 2, 1, 1, 0)).peakActivationBytes(0));
    }

    @Test
    void reportsStagesOverTheirMemoryLimit() {
        CostModel costs = CostModel.uniform(1, 2, 1, 1, 0).toBuilder().memoryLimitMicrobatches(3).build();
        SimResult gpipe = Simulator.simulate(Schedules.generate("gpipe", 2, 4, 1, null), costs);
        assertEquals(List.of("stage 0 holds 4 microbatches of activations at peak, over its limit of 3",
                "stage 1 holds 4 microbatches of activations at peak, over its limit of 3"), gpipe.memoryLimitViolations());
        assertEquals(List.of(), Simulator.simulate(Schedules.generate("1f1b", 2, 4, 1, null), costs).memoryLimitViolations());
        CostModel bytes = CostModel.uniform(1, 2, 1, 1, 0).toBuilder().memoryPerMicrobatchBytes(100).memoryLimitBytes(250).build();
        assertEquals(2, bytes.memoryLimitMicrobatches(0));
        assertEquals(List.of(), Simulator.simulate(Schedules.generate("1f1b", 2, 4, 1, null), bytes).memoryLimitViolations());
        assertEquals(2, Simulator.simulate(Schedules.generate("gpipe", 2, 4, 1, null), bytes).memoryLimitViolations().size());
    }

    @Test
    void reportsADeadlockInsteadOfHanging() {
        Schedule cyclic = ScheduleCsv.read("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n", "cyclic.csv");
        ScheduleException e = assertThrows(ScheduleException.class, () -> Simulator.simulate(cyclic, CostModel.uniform(1, 2, 1, 1, 0)));
        assertTrue(e.reason().contains("deadlock"), e.reason());
    }

    @Test
    void rejectsACostModelForAnotherNumberOfStages() {
        CostModel three = CostModel.builder().forward(1, 1, 1).backward(2).build();
        ScheduleException e = assertThrows(ScheduleException.class,
                () -> Simulator.simulate(Schedules.generate("1f1b", 4, 4, 1, null), three));
        assertTrue(e.getMessage().contains("costs for 3 stages but schedule 1f1b has 4 stages"), e.getMessage());
    }

    @Test
    void measuredTimelinesGiveTheSameFiguresAsTheSimulation() {
        Schedule s = Schedules.generate("1f1b", 3, 5, 1, null);
        SimResult simulated = Simulator.simulate(s, CostModel.uniform(1, 2, 1, 1, 0.1));
        List<TimedAction> measured = new ArrayList<>();
        for (TimedAction e : simulated.events()) measured.add(new TimedAction(e.rank(), e.action(), e.start() + 100, e.end() + 100));
        Collections.reverse(measured);
        SimResult replay = SimResult.of(s, measured);
        assertEquals(simulated.makespan(), replay.makespan(), EPS);
        assertEquals(100, replay.start(), EPS);
        assertEquals(simulated.bubbleFraction(), replay.bubbleFraction(), EPS);
        for (int r = 0; r < 3; r++) {
            assertEquals(simulated.peakActivations(r), replay.peakActivations(r));
            assertEquals(simulated.busy(r), replay.busy(r), EPS);
        }
        assertEquals(simulated.events().get(0).action(), replay.events().get(0).action());
    }

    @Test
    void costModelFillsInTheMissingHalvesOfTheBackward() {
        CostModel fromB = CostModel.builder().forward(1).backward(3).build();
        assertEquals(1.5, fromB.backwardInput(0), EPS);
        assertEquals(1.5, fromB.backwardWeight(7), EPS);
        CostModel fromHalves = CostModel.builder().forward(1).backwardInput(1, 2).backwardWeight(0.5).build();
        assertEquals(2.5, fromHalves.backward(1), EPS);
        assertEquals(2, fromHalves.stages());
        assertThrows(IllegalArgumentException.class, () -> CostModel.builder().forward(1).build());
        assertThrows(IllegalArgumentException.class, () -> CostModel.builder().forward(-1).backward(1).build());
        assertThrows(IllegalArgumentException.class, () -> CostModel.builder().forward(1, 2).backward(1, 2, 3).build());
    }

    @Test
    void ranksSharingOneProcessorTakeTheirTotalWork() {
        Schedule s = Schedules.generate("1f1b", 4, 8, 1, null);
        CostModel own = CostModel.uniform(1, 2, 1, 1, 0);
        double total = 4 * 8 * 3.0;
        SimResult one = Simulator.simulate(s, own.toBuilder().sharedProcessors(1).build());
        assertEquals(total, one.makespan(), 1e-9, "one processor: always some rank can run, so the work back to back");
        SimResult two = Simulator.simulate(s, own.toBuilder().sharedProcessors(2).build());
        assertTrue(two.makespan() >= total / 2 - 1e-9 && two.makespan() < one.makespan(), "two: between half and all");
        SimResult plenty = Simulator.simulate(s, own.toBuilder().sharedProcessors(4).build());
        assertEquals(Simulator.simulate(s, own).makespan(), plenty.makespan(), 1e-9, "a processor per rank: as without sharing");
    }
}

package dev.ttpipe.schedules;

import org.junit.jupiter.api.Test;

import java.util.HashSet;
import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class SchedulesTest {

    @Test
    void looksNamesUpCaseInsensitivelyWithAliases() {
        assertEquals("interleaved", Schedules.canonicalName("Interleaved-1F1B"));
        assertEquals("1f1b", Schedules.generate("1F1B", 2, 2, 1, null).name());
        assertEquals(Schedules.generate("interleaved", 2, 4, 2, null), Schedules.generate("interleaved-1f1b", 2, 4, 2, null));
    }

    @Test
    void unknownNamesListTheKnownOnes() {
        ScheduleException e = assertThrows(ScheduleException.class, () -> Schedules.generate("nope", 4, 8, 1, null));
        assertTrue(e.getMessage().startsWith("unknown schedule \"nope\"; known schedules: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-greedy, dualpipev"),
                e.getMessage());
    }

    @Test
    void forwardOnlyRunsEveryForwardInOrderAndLowersToSendsAndReceivesOnly() {
        Schedule s = Lowering.lower(Schedules.forwardOnly(3, 2));
        assertEquals("forward", s.name());
        assertEquals(3, s.stages());
        assertEquals(2, s.microbatches());
        assertEquals("0F0 0SEND_F0 0F1 0SEND_F1", String.join(" ", s.row(0).stream().map(Action::toString).toList()));
        assertEquals("1RECV_F0 1F0 1SEND_F0 1RECV_F1 1F1 1SEND_F1", String.join(" ", s.row(1).stream().map(Action::toString).toList()));
        assertEquals("2RECV_F0 2F0 2RECV_F1 2F1", String.join(" ", s.row(2).stream().map(Action::toString).toList()));
        assertTrue(assertThrows(ScheduleException.class, () -> Schedules.forwardOnly(2, 0)).getMessage()
                .contains("schedule forward needs at least 1 microbatch, got 0"));
    }

    @Test
    void forwardOnlyOverATrainingScheduleKeepsEachStageOnItsRankAndValidates() {
        for (Schedule training : List.of(Schedules.generate("1f1b", 3, 4, 1, null), Schedules.generate("interleaved", 2, 4, 2, null),
                Schedules.generate("dualpipev", 2, 4, 2, null))) {
            Schedule s = Lowering.lower(Schedules.forwardOnly(training, 3));
            assertRunsToTheEnd(s);
            assertEquals(training.stages(), s.stages(), training.name());
            for (int stage = 0; stage < s.stages(); stage++) assertEquals(training.rankOfStage(stage), s.rankOfStage(stage));
            for (List<Action> row : s.rows()) {
                assertTrue(row.stream().allMatch(a -> a.kind() == ActionKind.F || a.kind() == ActionKind.SEND_F
                        || a.kind() == ActionKind.RECV_F), row.toString());
                assertEquals(3 * s.stagesOfRank(s.rows().indexOf(row)).length, row.stream().filter(a -> a.kind() == ActionKind.F).count());
            }
        }
        // dualpipev's rank 0 holds the first and the last stage: all of stage 0's microbatches first
        assertEquals("0F0 0SEND_F0 0F1 0SEND_F1 3RECV_F0 3F0 3RECV_F1 3F1", String.join(" ", Lowering.lower(
                Schedules.forwardOnly(Schedules.generate("dualpipev", 2, 4, 2, null), 2)).row(0).stream().map(Action::toString).toList()));
        assertEquals(Lowering.lower(Schedules.forwardOnly(3, 2)),
                Lowering.lower(Schedules.forwardOnly(Schedules.generate("gpipe", 3, 4, 1, null), 2)));
    }

    /**
     * Runs every row in order, each action once what it needs is done (F after the stage before's F of the
     * microbatch, a RECV_F after its SEND_F, a SEND_F after its F), and fails when the rows block each other.
     * (The Validator asks a training schedule for its backward, so it does not take a forward-only one.)
     */
    private static void assertRunsToTheEnd(Schedule s) {
        Set<String> done = new HashSet<>();
        int[] at = new int[s.ranks()];
        for (boolean moved = true; moved; ) {
            moved = false;
            for (int r = 0; r < s.ranks(); r++) {
                while (at[r] < s.row(r).size()) {
                    Action a = s.row(r).get(at[r]);
                    String needs = switch (a.kind()) {
                        case F -> a.stage() == 0 ? null : (a.stage() - 1) + "F" + a.microbatch();
                        case RECV_F -> (a.stage() - 1) + "SEND_F" + a.microbatch();
                        case SEND_F -> a.stage() + "F" + a.microbatch();
                        default -> throw new AssertionError("not a forward action: " + a);
                    };
                    if (needs != null && !done.contains(needs)) break;
                    done.add(a.toString());
                    at[r]++;
                    moved = true;
                }
            }
        }
        for (int r = 0; r < s.ranks(); r++) assertEquals(s.row(r).size(), at[r], "rank " + r + " blocked at " + at[r] + " in " + s.row(r));
    }

    @Test
    void interleavedNeedsAMultipleOfTheRanks() {
        ScheduleException e = assertThrows(ScheduleException.class, () -> Schedules.generate("interleaved", 4, 6, 2, null));
        assertEquals("interleaved needs the microbatch count to be a multiple of the 4 pipeline ranks (Megatron's constraint),"
                + " got 6 microbatches; try 4 or 8", e.getMessage());
        assertTrue(assertThrows(ScheduleException.class, () -> Schedules.generate("interleaved", 4, 3, 2, null))
                .getMessage().endsWith("try 4"));
        assertTrue(assertThrows(ScheduleException.class, () -> Schedules.generate("interleaved", 4, 8, 1, null))
                .getMessage().contains("at least 2 virtual stages"));
    }

    @Test
    void dualPipeVNeedsTwiceAsManyMicrobatchesAsRanks() {
        assertTrue(assertThrows(ScheduleException.class, () -> Schedules.generate("dualpipev", 4, 7, 2, null))
                .getMessage().contains("at least 2P = 8 microbatches"));
        Schedule s = Schedules.generate("dualpipev", 4, 8, 2, null);
        for (int r = 0; r < 4; r++) {
            assertEquals(r, s.stagesOfRank(r)[0]);
            assertEquals(7 - r, s.stagesOfRank(r)[1]);
        }
    }

    @Test
    void oneStagePerRankSchedulesRejectVirtualStages() {
        assertTrue(assertThrows(ScheduleException.class, () -> Schedules.generate("1f1b", 4, 8, 2, null))
                .getMessage().contains("holds one stage per rank, got 2 virtual stages"));
        assertThrows(ScheduleException.class, () -> Schedules.generate("gpipe", 0, 8, 1, null));
        assertThrows(ScheduleException.class, () -> Schedules.generate("gpipe", 2, 0, 1, null));
    }

    @Test
    void zeroBubbleH2HoldsAtMostTwicePActivations() {
        CostModel costs = CostModel.uniform(1, 2, 1, 1, 0);
        for (int p = 2; p <= 6; p++) {
            SimResult r = Simulator.simulate(Schedules.generate("zb-h2", p, 4 * p, 1, null), costs);
            assertEquals(2 * p, r.peakActivations(0));
            for (int rank = 0; rank < p; rank++) assertTrue(r.peakActivations(rank) <= 2 * p);
        }
    }

    @Test
    void dualPipeVBeatsOneFOneBOnTheSameModel() {
        // a rank's share costs F=2, B=4; DualPipeV splits it in two stages of half the cost
        SimResult v = Simulator.simulate(Schedules.generate("dualpipev", 4, 16, 2, null), CostModel.uniform(1, 2, 1, 1, 0));
        SimResult base = Simulator.simulate(Schedules.generate("1f1b", 4, 16, 1, null), CostModel.uniform(2, 4, 2, 2, 0));
        assertTrue(v.makespan() < base.makespan(), v.makespan() + " vs " + base.makespan());
    }
}

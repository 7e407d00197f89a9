package dev.ttpipe.schedules;

import org.junit.jupiter.api.Test;

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

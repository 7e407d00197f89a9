package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.runtime.ActionEvent;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.schedules.Schedules;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The runtime overhead between back-to-back compute actions: every pair counts, measured from when
 * the device was free and the input was there; pairs whose input came after the device was free are
 * counted as having waited for data.
 */
class DispatchGapTest {

    private static ActionEvent ev(int rank, int stage, String kind, int mb, long start, long end) {
        return new ActionEvent(rank, new Action(stage, ActionKind.valueOf(kind), mb), 0, start, end, 0, end - start, 0, 0, 0);
    }

    /** Rank 1 (the last of two) of a GPipe pass over {@code microbatches}, with these events. */
    private static StepAnalysis analyse(int microbatches, ActionEvent... events) {
        Schedule schedule = Schedules.generate("gpipe", 2, microbatches, 1, null);
        return new StepAnalysis(schedule, List.of(events), events[events.length - 1].endNs());
    }

    @Test
    void aPairWhoseDataWasThereCountsItsGap() {
        // rank 1: F0 runs 0..100; F1's activation arrived at 60, before F0 ended; F1 starts at 107.
        StepAnalysis a = analyse(2,
                ev(1, 1, "RECV_F", 0, 0, 0),
                ev(1, 1, "F", 0, 0, 100_000),
                ev(1, 1, "RECV_F", 1, 50_000, 60_000),
                ev(1, 1, "F", 1, 107_000, 200_000));
        assertEquals(1, a.overhead().pairs());
        assertEquals(0, a.overhead().waitedForData());
        assertEquals(7.0, a.overhead().medianUs(), 1e-9);
    }

    @Test
    void aPairWhoseDataCameLateCountsFromTheArrival() {
        // F1's activation arrived at 150, after F0 ended at 100: the runtime's part is 150 -> 157, the rest was waiting.
        StepAnalysis a = analyse(2,
                ev(1, 1, "RECV_F", 0, 0, 0),
                ev(1, 1, "F", 0, 0, 100_000),
                ev(1, 1, "RECV_F", 1, 50_000, 150_000),
                ev(1, 1, "F", 1, 157_000, 200_000));
        assertEquals(1, a.overhead().pairs());
        assertEquals(1, a.overhead().waitedForData());
        assertEquals(7.0, a.overhead().medianUs(), 1e-9);
    }

    @Test
    void eachActionIsJudgedByItsOwnArrivalEvenWhenWaitsOverlap() {
        // With the next action already queued, the rank starts waiting for F2's data before F1 runs:
        // F1 (data at 20) follows F0 after 3 us; F2 (data at 250, after F1 ended at 200) waited, then took 5 us.
        StepAnalysis a = analyse(3,
                ev(1, 1, "RECV_F", 0, 0, 0),
                ev(1, 1, "F", 0, 0, 100_000),
                ev(1, 1, "RECV_F", 1, 10_000, 20_000),
                ev(1, 1, "RECV_F", 2, 30_000, 250_000),
                ev(1, 1, "F", 1, 103_000, 200_000),
                ev(1, 1, "F", 2, 255_000, 300_000));
        assertEquals(2, a.overhead().pairs());
        assertEquals(1, a.overhead().waitedForData());
        assertEquals(4.0, a.overhead().medianUs(), 1e-9);
        assertEquals(5.0 - 0.1 * 2, a.overhead().p90Us(), 1e-9);
    }

    @Test
    void theLastStagesBackwardNeedsNoArrival() {
        // rank 1 holds the last stage: B0 needs only its own F0, so F0 -> B0 is always a back-to-back pair.
        StepAnalysis a = analyse(2,
                ev(1, 1, "RECV_F", 0, 0, 0),
                ev(1, 1, "F", 0, 0, 100_000),
                ev(1, 1, "B", 0, 120_000, 300_000));
        assertEquals(1, a.overhead().pairs());
        assertEquals(20.0, a.overhead().medianUs(), 1e-9);
    }
}

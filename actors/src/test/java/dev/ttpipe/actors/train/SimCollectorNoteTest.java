package dev.ttpipe.actors.train;

import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A sim run of 256 ranks and 1024 microbatches in one JVM under G1 is told about the collector's pauses and ZGC; a
 * smaller one, or one under ZGC, is not. A trace too large for a browser's Perfetto is told how to open it.
 */
class SimCollectorNoteTest {
    private static final List<String> G1 = List.of("G1 Young Generation", "G1 Old Generation");

    @Test
    void aLargeSimRunUnderG1IsToldOfThePausesAndZgc() {
        String note = TrainingJob.collectorNote(256, 1024, G1);
        assertTrue(note != null && note.startsWith("note: 256 ranks x 1024 microbatches of the sim backend")
                && note.contains("TTPIPE_JAVA_OPTS='-XX:+UseZGC -Xmx4096m' avoids it"), note);
        assertNull(TrainingJob.collectorNote(128, 512, G1), "sim-pp128 held within 1% in every run measured");
        assertNull(TrainingJob.collectorNote(256, 1024, List.of("ZGC Cycles", "ZGC Pauses")));
    }

    /**
     * sim-pp256 restarts under ZGC; sim-pp128, a chosen collector, a JVM without ZGC or already on it, or a threshold 0 do
     * not. A default heap under 16 KiB a rank x microbatch is raised to it where that is at most half the machine's
     * memory; a chosen one, or one that cannot grow, keeps the collector.
     */
    @Test
    void onlyALargeRunOnAnUnchosenCollectorRestartsUnderZgc() {
        long gib = 1L << 30, above = CollectorRestart.DEFAULT_ABOVE;
        CollectorRestart.Restart r = CollectorRestart.decide(256, 1024, above, "G1", false, true, 6 * gib, false, 24 * gib);
        assertTrue(r != null && r.line().startsWith("ttpipe: 256 ranks x 1024 microbatches of the sim backend: restarting this"
                + " JVM under ZGC, since G1's pauses") && r.line().endsWith("TTPIPE_JAVA_OPTS=-XX:+UseG1GC keeps G1)"), String.valueOf(r));
        assertEquals(List.of("-XX:+UseZGC"), r.flags());
        assertNull(CollectorRestart.decide(128, 512, above, "G1", false, true, 6 * gib, false, 24 * gib));
        assertNull(CollectorRestart.decide(256, 1024, above, "G1", true, true, 6 * gib, false, 24 * gib));
        assertNull(CollectorRestart.decide(256, 1024, above, "G1", false, false, 6 * gib, false, 24 * gib));
        assertNull(CollectorRestart.decide(256, 1024, above, "ZGC", false, true, 6 * gib, false, 24 * gib));
        assertNull(CollectorRestart.decide(256, 1024, 0, "G1", false, true, 6 * gib, false, 24 * gib));

        CollectorRestart.Restart grown = CollectorRestart.decide(256, 1024, above, "G1", false, true, 3_900_000_000L, false,
                15_600_000_000L);
        assertTrue(grown != null && grown.line().contains("under ZGC with -Xmx4096m, since G1's pauses at this size lengthen passes"
                + " against the simulator and ZGC stalls in a smaller heap (TTPIPE_JAVA_OPTS=-XX:+UseG1GC keeps G1)"),
                String.valueOf(grown));
        assertEquals(List.of("-XX:+UseZGC", "-Xmx4096m"), grown.flags());
        assertNull(CollectorRestart.decide(256, 1024, above, "G1", false, true, 2 * gib, true, 24 * gib), "-Xmx2g chosen");
        assertNull(CollectorRestart.decide(256, 1024, above, "G1", false, true, 2 * gib, false, 7_800_000_000L), "an 8 GB machine");
    }

    /** A trace over 512 MiB (sim-pp256's was 1.5 GiB) says how to open it and which key keeps fewer steps; a smaller one nothing. */
    @Test
    void aLargeTraceSaysHowToOpenIt() {
        String note = TrainingJob.largeTraceNote(1_597_109_054L, 10);
        assertTrue(note != null && note.startsWith("trace.json is 1.5 GiB: ") && note.contains("trace_processor")
                && note.endsWith("telemetry.trace_steps (now 10)"), note);
        assertNull(TrainingJob.largeTraceNote(512L << 20, 10));
    }
}

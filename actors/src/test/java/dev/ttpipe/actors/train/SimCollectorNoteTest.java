package dev.ttpipe.actors.train;

import org.junit.jupiter.api.Test;

import java.util.List;

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
                && note.contains("TTPIPE_JAVA_OPTS=-XX:+UseZGC"), note);
        assertNull(TrainingJob.collectorNote(128, 512, G1), "sim-pp128 held within 1% in every run measured");
        assertNull(TrainingJob.collectorNote(256, 1024, List.of("ZGC Cycles", "ZGC Pauses")));
    }

    /** sim-pp256 restarts under ZGC; sim-pp128, a chosen collector, a JVM without ZGC or already on it, or a threshold 0 do not. */
    @Test
    void onlyALargeRunOnAnUnchosenCollectorRestartsUnderZgc() {
        String why = CollectorRestart.reason(256, 1024, CollectorRestart.DEFAULT_ABOVE, "G1", false, true);
        assertTrue(why != null && why.startsWith("ttpipe: 256 ranks x 1024 microbatches of the sim backend: restarting")
                && why.endsWith("TTPIPE_JAVA_OPTS=-XX:+UseG1GC keeps G1)"), why);
        assertNull(CollectorRestart.reason(128, 512, CollectorRestart.DEFAULT_ABOVE, "G1", false, true));
        assertNull(CollectorRestart.reason(256, 1024, CollectorRestart.DEFAULT_ABOVE, "G1", true, true));
        assertNull(CollectorRestart.reason(256, 1024, CollectorRestart.DEFAULT_ABOVE, "G1", false, false));
        assertNull(CollectorRestart.reason(256, 1024, CollectorRestart.DEFAULT_ABOVE, "ZGC", false, true));
        assertNull(CollectorRestart.reason(256, 1024, 0, "G1", false, true));
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

package dev.ttpipe.actors.cli;

import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code ttpipe bench faults} prints figures (never judged here: how fast a fault stops a job is a benchmark's
 * figure, not a test's threshold). The killed-worker fault needs two worker JVMs and is left to a manual run;
 * MultiProcessTest checks that such a job stops and names the rank.
 */
class BenchFaultsCommandTest {
    @Test
    void corruptFrameRoundsPrintOneTimeEachAndTheirMedianAsJson() {
        CliTest.Result r = CliTest.run("bench", "faults", "--faults", "corrupt-frame", "--rounds", "2", "--json");
        assertEquals(0, r.code(), r.out() + r.err());
        Map<?, ?> j = (Map<?, ?>) MiniJson.parse(r.out().strip());
        List<?> seconds = (List<?>) j.get("corrupt_frame_seconds");
        assertEquals(2, seconds.size(), r.out());
        for (Object s : seconds) assertTrue(((Number) s).doubleValue() > 0, r.out());
        double median = ((Number) j.get("corrupt_frame_median_seconds")).doubleValue();
        double a = ((Number) seconds.get(0)).doubleValue(), b = ((Number) seconds.get(1)).doubleValue();
        assertEquals((a + b) / 2, median, 1e-12, r.out());
        assertFalse(j.containsKey("killed_worker_seconds"), "not asked for: " + r.out());
    }

    @Test
    void badFaultsAndRoundsAreOneLineWithExitCodeTwo() {
        CliTest.assertOneLineBadInput(CliTest.run("bench", "faults", "--faults", "meteor"), "--faults: 'meteor' given",
                "expected some of corrupt-frame, killed-worker");
        CliTest.assertOneLineBadInput(CliTest.run("bench", "faults", "--rounds", "0"), "--rounds: 0 given, expected 1 or more");
        CliTest.assertOneLineBadInput(CliTest.run("bench", "faults", "--base-port", "80"), "--base-port: 80 given");
    }
}

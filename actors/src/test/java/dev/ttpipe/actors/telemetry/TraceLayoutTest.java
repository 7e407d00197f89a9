package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.schedules.CostModel;
import dev.ttpipe.schedules.Simulator;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The measured trace of a real run of configs/nanogpt-pp4-1f1b.yaml and the simulator's trace of the
 * same schedule open side by side in Perfetto: the same processes and tracks with the same names,
 * and the same spans (action notation) on the same tracks; every flow arrow of the measured trace
 * runs forward in time, from inside its SEND's slice to inside its RECV's.
 */
class TraceLayoutTest {
    private static final Pattern META = Pattern.compile(
            "\\{\"name\":\"(process_name|thread_name)\",\"ph\":\"M\",\"pid\":(\\d+),\"tid\":(\\d+),\"args\":\\{\"name\":\"([^\"]+)\"");
    private static final Pattern SPAN = Pattern.compile("\"ph\":\"X\",\"name\":\"([^\"]+)\".*?\"pid\":(\\d+),\"tid\":(\\d+)");
    private static final Pattern SIM_SPAN = Pattern.compile("\\{\"name\":\"([^\"]+)\",\"cat\":\"[A-Z_]+\",\"ph\":\"X\",\"pid\":(\\d+),\"tid\":(\\d+)");

    @Test
    void measuredAndSimulatedTracesShareProcessesTracksAndSpanNames(@TempDir Path dir) throws Exception {
        TrainingJob job = train(dir, 1);
        String measured = Files.readString(dir.resolve("trace.json"));
        String simulated = dev.ttpipe.schedules.ChromeTrace.render(Simulator.simulate(job.plan().schedule(),
                CostModel.uniform(1, 2, 1, 1, 0.1)));

        Set<String> measuredTracks = matches(META, measured, m -> m.group(1) + " " + m.group(2) + "/" + m.group(3) + " " + m.group(4));
        Set<String> simulatedTracks = matches(META, simulated, m -> m.group(1) + " " + m.group(2) + "/" + m.group(3) + " " + m.group(4));
        assertEquals(simulatedTracks, measuredTracks);
        assertTrue(measuredTracks.contains("process_name 2/0 rank 2"), measuredTracks.toString());
        assertTrue(measuredTracks.contains("thread_name 2/5 stage 2"), measuredTracks.toString());

        Set<String> measuredSpans = matches(SPAN, measured, m -> m.group(2) + "/" + m.group(3) + " " + m.group(1));
        measuredSpans.removeIf(s -> s.contains("REDUCE_GRAD") || s.contains("OPTIMIZER_STEP"));   // step work, after the pass
        Set<String> simulatedSpans = matches(SIM_SPAN, simulated, m -> m.group(2) + "/" + m.group(3) + " " + m.group(1));
        assertFalse(simulatedSpans.isEmpty());
        assertEquals(simulatedSpans, measuredSpans);
        assertTrue(measured.contains("\"name\":\"step 1\""), "the step is marked");
    }

    @Test
    void flowArrowsRunForwardInTimeFromInsideTheSendToInsideTheReceive(@TempDir Path dir) throws Exception {
        train(dir, 1);
        String trace = Files.readString(dir.resolve("trace.json"));
        Pattern slice = Pattern.compile("\"ph\":\"X\",\"name\":\"([^\"]+)\".*?\"pid\":(\\d+),\"tid\":(\\d+),\"ts\":([-0-9.E]+),\"dur\":([-0-9.E]+)");
        Pattern flow = Pattern.compile("\"ph\":\"([sf])\"(?:,\"bp\":\"e\")?,\"id\":(\\d+),\"name\":\"([^\"]+)\".*?\"pid\":(\\d+),\"tid\":(\\d+),\"ts\":([-0-9.E]+)");
        List<Object[]> slices = new ArrayList<>();
        Matcher m = slice.matcher(trace);
        while (m.find()) {
            slices.add(new Object[]{m.group(1), Integer.parseInt(m.group(2)), Integer.parseInt(m.group(3)),
                    Double.parseDouble(m.group(4)), Double.parseDouble(m.group(5))});
        }
        Map<String, Double> starts = new HashMap<>();
        Matcher f = flow.matcher(trace);
        int ends = 0;
        while (f.find()) {
            String id = f.group(2), name = f.group(3);
            int pid = Integer.parseInt(f.group(4)), tid = Integer.parseInt(f.group(5));
            double ts = Double.parseDouble(f.group(6));
            boolean start = f.group(1).equals("s");
            String expected = start ? name.substring(0, name.indexOf(" -> ")) : name.substring(name.indexOf(" -> ") + 4);
            boolean inside = slices.stream().anyMatch(s -> (int) s[1] == pid && (int) s[2] == tid
                    && (double) s[3] < ts && ts < (double) s[3] + (double) s[4] && expected.equals(s[0]));
            assertTrue(inside, "flow " + (start ? "start" : "end") + " of " + name + " at " + ts + " on " + pid + "/" + tid
                    + " lies in no slice of " + expected);
            if (start) {
                starts.put(id, ts);
            } else {
                ends++;
                assertTrue(starts.containsKey(id), "flow " + id + " ends before it starts in the file");
                assertTrue(starts.get(id) < ts, "flow " + name + " points back in time: " + starts.get(id) + " -> " + ts);
            }
        }
        // 8 microbatches, 3 stage boundaries, activations and gradients
        assertEquals(8 * 3 * 2, ends);
    }

    /**
     * Counters are step functions: each rank's buffered arrivals, stash and memory are written where they change,
     * never twice in a row with one value, and every rank has all three.
     */
    @Test
    void countersAreWrittenWhereTheirValueChanges(@TempDir Path dir) throws Exception {
        train(dir, 2);
        Pattern counter = Pattern.compile("\\{\"ph\":\"C\",\"name\":\"([a-z ]+)\",\"pid\":(\\d+),\"ts\":[-0-9.]+,\"args\":\\{\"[a-z]+\":(\\d+)\\}\\}");
        Map<String, String> last = new HashMap<>();
        int samples = 0;
        Matcher m = counter.matcher(Files.readString(dir.resolve("trace.json")));
        while (m.find()) {
            String key = m.group(2) + " " + m.group(1);
            assertFalse(m.group(3).equals(last.put(key, m.group(3))), key + " written twice in a row with " + m.group(3));
            samples++;
        }
        Set<String> keys = new TreeSet<>(last.keySet());
        for (int rank = 0; rank < 4; rank++) {
            for (String name : List.of("buffered arrivals", "stashed microbatches", "device memory")) {
                assertTrue(keys.contains(rank + " " + name), rank + " " + name + " missing from " + keys);
            }
        }
        assertTrue(samples > 4 * 3, "the counters change over the steps: " + samples + " samples");
    }

    @Test
    void timesAreMicrosecondsWrittenExactlyToTheNanosecond() {
        assertEquals("4219834.161", ChromeTrace.us(4_219_834_161L));
        assertEquals("12", ChromeTrace.us(12_000));
        assertEquals("0.005", ChromeTrace.us(5));
        assertEquals("0.15", ChromeTrace.us(150));
        assertEquals("1000.01", ChromeTrace.us(1_000_010));
        assertEquals("-0.5", ChromeTrace.us(-500));
        assertEquals("0", ChromeTrace.us(0));
        assertEquals("steps 1-10 and 60", ChromeTrace.stepsText(List.of(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 60)));
        assertEquals("steps 1, 3-4 and 6", ChromeTrace.stepsText(List.of(1, 3, 4, 6)));
        assertEquals("step 3", ChromeTrace.stepsText(List.of(3)));
        assertEquals("no step", ChromeTrace.stepsText(List.of()));
    }

    /** Trains configs/nanogpt-pp4-1f1b.yaml for {@code steps} steps into run directory {@code dir}. */
    private static TrainingJob train(Path dir, int steps) throws Exception {
        TtpipeConfig cfg = ConfigLoader.load(Path.of("..", "configs", "nanogpt-pp4-1f1b.yaml"));
        cfg.training.maxSteps = steps;
        TrainingJob job = TrainingJob.fromConfig(cfg);
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan())) {
            job.run(runtime, dir, null);
        }
        return job;
    }

    private static Set<String> matches(Pattern p, String text, Function<Matcher, String> key) {
        Set<String> out = new TreeSet<>();
        Matcher m = p.matcher(text);
        while (m.find()) out.add(key.apply(m));
        return out;
    }
}

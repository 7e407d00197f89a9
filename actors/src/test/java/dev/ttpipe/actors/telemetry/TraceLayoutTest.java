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
        Path config = Path.of("..", "configs", "nanogpt-pp4-1f1b.yaml");
        TtpipeConfig cfg = ConfigLoader.load(config);
        cfg.training.maxSteps = 1;
        TrainingJob job = TrainingJob.fromConfig(cfg);
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan())) {
            job.run(runtime, dir, null);
        }
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
        TtpipeConfig cfg = ConfigLoader.load(Path.of("..", "configs", "nanogpt-pp4-1f1b.yaml"));
        cfg.training.maxSteps = 1;
        TrainingJob job = TrainingJob.fromConfig(cfg);
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan())) {
            job.run(runtime, dir, null);
        }
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

    private static Set<String> matches(Pattern p, String text, Function<Matcher, String> key) {
        Set<String> out = new TreeSet<>();
        Matcher m = p.matcher(text);
        while (m.find()) out.add(key.apply(m));
        return out;
    }
}

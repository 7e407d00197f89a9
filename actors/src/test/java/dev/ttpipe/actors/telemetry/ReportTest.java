package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.cli.Main;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * `ttpipe report` on real runs: the page holds the loss curve, the measured and simulated timelines,
 * the per-rank table and the per-stage costs; two runs stand side by side; headless Chromium opens it
 * with no console error (skipped, with a message, where Chromium is not installed).
 */
class ReportTest {
    static final String CONFIG = String.join("\n",
            "training_config: {batch_size: 8, max_steps: 6, learning_rate: 0.003, eval_every: 3}",
            "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 3, max_sequence_length: 16}",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 3, blocks_per_rank: {0: 1, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
            "telemetry: {port: 0}",
            "");

    static int run(String... args) {
        PrintStream old = System.out;
        try {
            System.setOut(new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8));
            return Main.run(args);
        } finally {
            System.setOut(old);
        }
    }

    @Test
    void aReportShowsTheCurvesTheTimelinesAndTheTables(@TempDir Path dir) throws Exception {
        Path cfg = Files.writeString(dir.resolve("job.yaml"), CONFIG);
        assertEquals(0, run("train", cfg.toString(), "--run-dir", dir.resolve("a").toString()));
        assertEquals(0, run("train", cfg.toString(), "--run-dir", dir.resolve("b").toString(), "--schedule", "gpipe"));
        assertEquals(0, run("report", dir.resolve("a").toString()));
        String html = Files.readString(dir.resolve("a/report.html"));
        assertTrue(html.matches("(?s).*<div id=\"loss-curve\"><svg.*<polyline.*<circle.*</svg></div>.*"), "loss curve with validation dots");
        assertTrue(html.matches("(?s).*<div id=\"timeline\"><svg.*measured.*<rect.*</svg>.*"), "measured timeline");
        assertTrue(html.matches("(?s).*<div id=\"prediction\"><svg.*simulated, same measured costs.*</svg>.*"), "prediction");
        assertTrue(html.matches("(?s).*<table id=\"rank-table\">.*<td>0</td>.*<td>1</td>.*</table>.*"), "per-rank table");
        assertTrue(html.contains("<table id=\"stage-table\">") && html.contains("<table id=\"metadata\">"));
        assertFalse(html.contains("http://") && html.matches("(?s).*(src|href)=\"http.*"), "self-contained: fetches nothing");
        assertEquals(0, run("report", dir.resolve("a").toString(), dir.resolve("b").toString(), "--out", dir.resolve("ab.html").toString()));
        String both = Files.readString(dir.resolve("ab.html"));
        assertTrue(both.contains("<div id=\"loss-compare\">") && both.contains(">a</h2>") && both.contains(">b</h2>"), "side by side");
        assertEquals(2, run("report", dir.resolve("nothing").toString()));
        assertEquals(0, run("report", dir.resolve("a").toString(), "--step", "2", "--out", dir.resolve("s2.html").toString()));
        assertTrue(Files.readString(dir.resolve("s2.html")).contains("Timeline of step 2 (ms)"));
        assertTrue(html.contains("Timeline of step 6 (ms)") && html.contains("<th>received per step</th>"), "the last step by default");

        Path chromium = List.of(Path.of("/usr/bin/chromium"), Path.of("/usr/bin/chromium-browser")).stream()
                .filter(Files::isExecutable).findFirst().orElse(null);
        Assumptions.assumeTrue(chromium != null, "skipped the browser check: Chromium is not installed (.ci/run installs it)");
        List<String> cmd = new ArrayList<>(List.of(chromium.toString(), "--headless", "--no-sandbox", "--disable-gpu",
                "--enable-logging=stderr", "--v=0", "--dump-dom", dir.resolve("a/report.html").toUri().toString()));
        Process p = new ProcessBuilder(cmd).redirectOutput(dir.resolve("dom.html").toFile()).redirectError(dir.resolve("log.txt").toFile())
                .start();
        assertTrue(p.waitFor(90, TimeUnit.SECONDS), "chromium did not finish");
        String dom = Files.readString(dir.resolve("dom.html"));
        String log = Files.readString(dir.resolve("log.txt"));
        assertTrue(dom.contains("id=\"loss-curve\"") && dom.contains("id=\"timeline\"") && dom.contains("id=\"rank-table\""),
                "the page as Chromium loaded it:\n" + dom.substring(0, Math.min(500, dom.length())));
        for (String line : log.split("\n")) {
            assertFalse(line.contains("CONSOLE") || line.contains("Uncaught"), "console error: " + line);
        }
    }

    /**
     * {@code telemetry.trace_steps: 1} keeps the first step and the last; --step of another names the ones held. A
     * trace in another JSON layout (one line, as a tool that re-saves it writes it) is read whole and draws the same
     * timeline as ttpipe's own layout, which is read a line at a time.
     */
    @Test
    void theTracedStepsFollowTraceStepsAndATraceInAnotherLayoutReadsTheSame(@TempDir Path dir) throws Exception {
        Path cfg = Files.writeString(dir.resolve("job.yaml"), CONFIG.replace("telemetry: {port: 0}", "telemetry: {port: 0, trace_steps: 1}"));
        Path a = dir.resolve("a");
        assertEquals(0, run("train", cfg.toString(), "--run-dir", a.toString()));
        String trace = Files.readString(a.resolve("trace.json"));
        assertTrue(trace.contains("\"name\":\"step 1\"") && trace.contains("\"name\":\"step 6\""), "the first and the last");
        assertFalse(trace.contains("\"name\":\"step 2\""), "step 2 is not traced");
        Report.Run read = Report.Run.read(a);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Report.html(List.of(read), 3));
        assertTrue(e.getMessage().contains("--step: 3 is not in") && e.getMessage().contains("which holds steps 1 and 6"), e.getMessage());
        String streamed = Report.timeline(read, 1);
        assertTrue(streamed.contains("Timeline of step 1 (ms)") && streamed.contains("<rect"), streamed);

        assertTrue(TracedSpans.ownLayout(a.resolve("trace.json")));
        Files.writeString(a.resolve("trace.json"), trace.replace("\n", "\r\n"));       // CRLF line breaks: still a line at a time
        assertTrue(TracedSpans.ownLayout(a.resolve("trace.json")));
        assertEquals(read.trace(), Report.Run.read(a).trace());
        Files.writeString(a.resolve("trace.json"), trace.replace("\n", ""));           // one line: read whole
        assertFalse(TracedSpans.ownLayout(a.resolve("trace.json")));
        Report.Run whole = Report.Run.read(a);
        assertEquals(read.trace(), whole.trace());
        assertEquals(streamed, Report.timeline(whole, 1));
        assertEquals(2, run("report", a.toString(), "--step", "3"));
    }

    /** A lost tail: a resume from an earlier step than the last drops the steps after it, whatever came later. */
    @Test
    void aMarkDropsEveryEarlierLineOfALaterStep() throws Exception {
        List<Map<?, ?>> kept = Report.Run.lastWrites(List.of("{\"step\":1,\"loss\":3}", "{\"step\":2,\"loss\":2.9}",
                "{\"step\":3,\"loss\":2.8}", "{\"step\":2,\"mark\":{\"kind\":\"recovery\",\"from_step\":1},\"loss\":2.7}"));
        assertEquals(List.of(1, 2), kept.stream().map(m -> ((Number) m.get("step")).intValue()).toList());
        assertEquals(2.7, ((Number) kept.get(1).get("loss")).doubleValue());
    }
}

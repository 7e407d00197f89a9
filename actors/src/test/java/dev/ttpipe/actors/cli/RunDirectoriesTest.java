package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.telemetry.Report;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static dev.ttpipe.actors.cli.CliTest.run;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Run directories across runs and resumes: what {@code latest} names, where a resume writes, what the report draws. */
class RunDirectoriesTest {
    static final String JOB = String.join("\n",
            "training_config: {batch_size: 4, max_steps: STEPS, learning_rate: 0.003, runs_dir: RUNS, model_save_interval: 3}",
            "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 2, max_sequence_length: 16}",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 2, blocks_per_rank: {0: 1, 1: 1}, num_microbatches: 2, schedule: 1f1b}",
            "");

    static Path job(Path dir, String name, int steps) throws Exception {
        return Files.writeString(dir.resolve(name), JOB.replace("STEPS", Integer.toString(steps))
                .replace("RUNS", dir.resolve("runs").toString()));
    }

    static void train(String... args) {
        CliTest.Result r = run(args);
        assertEquals(0, r.code(), r.out() + r.err());
    }

    /**
     * {@code latest} is the complete checkpoint with the highest step across the runs directory, not the run
     * whose name sorts last; every command that resolves it says which it chose.
     */
    @Test
    void latestIsTheNewestCompleteCheckpointByStepNotTheLastNamedRun(@TempDir Path dir) throws Exception {
        Path runs = dir.resolve("runs");
        train("train", job(dir, "long.yaml", 6).toString(), "--run-dir", runs.resolve("a-long").toString());
        train("train", job(dir, "short.yaml", 3).toString(), "--run-dir", runs.resolve("z-short").toString());
        Path unfinished = Files.createDirectories(runs.resolve("zz-crashed/checkpoints/step-000009"));   // no trainer_state.json
        Files.createDirectories(runs.resolve("zz-crashed/checkpoints/step-000012.tmp"));
        assertTrue(Files.isDirectory(unfinished));
        Path newest = runs.resolve("a-long/checkpoints/step-000006");
        String chose = "ttpipe: latest: " + newest + " (step 6, the newest of 3 complete checkpoints under " + runs + ")";

        Path text = Files.writeString(dir.resolve("sums.txt"), "1+2=3\n4+5=9\n7+8=15\n".repeat(40));
        CliTest.Result e = run("eval", "latest", "--runs-dir", runs.toString(), "--data", text.toString(), "--batches", "1");
        assertEquals(0, e.code(), e.out() + e.err());
        assertTrue(CliTest.joined(e.err()).contains(chose), e.err());
        assertTrue(e.out().contains(newest.toString()), e.out());

        CliTest.Result g = run("generate", "latest", "--runs-dir", runs.toString(), "--prompt", "1+2=", "--max-new-tokens", "2");
        assertEquals(0, g.code(), g.out() + g.err());
        assertTrue(CliTest.joined(g.err()).contains(chose), g.err());

        CliTest.Result x = run("export", "latest", "--runs-dir", runs.toString(), "--out", dir.resolve("hf").toString());
        assertEquals(0, x.code(), x.out() + x.err());
        assertTrue(CliTest.joined(x.err()).contains(chose), x.err());

        CliTest.Result t = run("train", job(dir, "long.yaml", 8).toString(), "--resume", "latest", "--allow-config-change",
                "--run-dir", dir.resolve("continued").toString());
        assertEquals(0, t.code(), t.out() + t.err());
        assertTrue(CliTest.joined(t.err()).contains(chose), t.err());
        assertTrue(t.joined().contains("resumed from " + newest + " at step 6"), t.out());
    }

    static long lines(Path file) throws Exception {
        return Files.readAllLines(file).size();
    }

    /**
     * A resume goes on in the run directory it resumes (no new one), appending to metrics.jsonl with the resume
     * marked; the report plots against the recorded step, keeps the resumed timeline's write of steps 4..6 over the
     * first one's, and marks the resume.
     */
    @Test
    void aResumeContinuesItsRunDirectoryAndTheReportPlotsByStep(@TempDir Path dir) throws Exception {
        Path runs = dir.resolve("runs"), a = runs.resolve("a");
        Path cfg = job(dir, "job.yaml", 6);
        train("train", cfg.toString(), "--run-dir", a.toString());
        train("train", cfg.toString(), "--resume", a.resolve("checkpoints/step-000003").toString());
        try (var s = Files.list(runs)) {
            assertEquals(1, s.count(), "the resume wrote into runs/a, no other run directory");
        }
        List<String> metrics = Files.readAllLines(a.resolve("metrics.jsonl"));
        assertEquals(9, metrics.size(), "6 steps, then steps 4..6 again");
        assertTrue(metrics.get(6).startsWith("{\"step\":4,") && metrics.get(6).contains("\"mark\":{\"kind\":\"resume\",\"from_step\":3,"),
                metrics.get(6));
        assertTrue(Files.readString(a.resolve("stdout.log")).contains("resumed from "), "stdout.log goes on too");

        train("train", job(dir, "longer.yaml", 8).toString(), "--resume", "latest", "--allow-config-change");
        CliTest.Result j = run("report", a.toString(), "--json");
        assertEquals(0, j.code(), j.err());
        assertTrue(j.out().contains("\"steps\":8,\"first_step\":1,\"last_step\":8,\"marks\":2"), j.out());
        train("report", a.toString());
        String html = Files.readString(a.resolve("report.html"));
        assertTrue(html.contains(">step 8</text>") && !html.contains(">step 11</text>"), "the axis is the recorded step, not the line count");
        assertTrue(html.contains("resumed at step 3</text>") && html.contains("resumed at step 6</text>"), "the resumes are marked");

        List<Map<?, ?>> kept = Report.Run.read(a).steps();
        assertEquals(List.of(1, 2, 3, 4, 5, 6, 7, 8), kept.stream().map(m -> ((Number) m.get("step")).intValue()).toList());
        assertTrue(kept.get(3).containsKey("mark"), "step 4 is the resumed run's, not the first write");
    }

    /**
     * A run directory is never clobbered: a fresh run into one that holds checkpoints is one line saying to resume
     * it or pick another, and changes nothing there; an empty --run-dir or one naming a file is refused.
     */
    @Test
    void aFreshRunIntoARunDirectoryWithCheckpointsIsRefused(@TempDir Path dir) throws Exception {
        Path a = dir.resolve("runs/a");
        Path cfg = job(dir, "job.yaml", 3);
        train("train", cfg.toString(), "--run-dir", a.toString());
        long before = lines(a.resolve("metrics.jsonl"));
        CliTest.assertOneLineBadInput(run("train", cfg.toString(), "--run-dir", a.toString()),
                "--run-dir: " + a + " holds an earlier run's checkpoints (the newest step-000003)",
                "continue that run with --resume " + a + ", or pick another --run-dir");
        assertEquals(before, lines(a.resolve("metrics.jsonl")), "nothing written");
        assertTrue(Files.isDirectory(a.resolve("checkpoints/step-000003")));
        CliTest.assertOneLineBadInput(run("train", cfg.toString(), "--run-dir", ""), "--run-dir: '' given, expected a directory");
        CliTest.assertOneLineBadInput(run("train", cfg.toString(), "--run-dir", cfg.toString()), "--run-dir: " + cfg + " is a file");
        Path other = dir.resolve("runs/b");
        train("train", cfg.toString(), "--run-dir", other.toString());
        CliTest.assertOneLineBadInput(run("train", job(dir, "more.yaml", 5).toString(), "--run-dir", other.toString(), "--resume",
                a.toString(), "--allow-config-change"), "--run-dir: " + other + " holds an earlier run's checkpoints");
    }
}

package dev.ttpipe.actors.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;

import static dev.ttpipe.actors.cli.CliTest.run;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Run directories across runs and resumes: what {@code latest} names. */
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
        assertTrue(e.err().contains(chose), e.err());
        assertTrue(e.out().contains(newest.toString()), e.out());

        CliTest.Result g = run("generate", "latest", "--runs-dir", runs.toString(), "--prompt", "1+2=", "--max-new-tokens", "2");
        assertEquals(0, g.code(), g.out() + g.err());
        assertTrue(g.err().contains(chose), g.err());

        CliTest.Result x = run("export", "latest", "--runs-dir", runs.toString(), "--out", dir.resolve("hf").toString());
        assertEquals(0, x.code(), x.out() + x.err());
        assertTrue(x.err().contains(chose), x.err());

        CliTest.Result t = run("train", job(dir, "long.yaml", 8).toString(), "--resume", "latest", "--allow-config-change",
                "--run-dir", dir.resolve("continued").toString());
        assertEquals(0, t.code(), t.out() + t.err());
        assertTrue(t.err().contains(chose), t.err());
        assertTrue(t.out().contains("resumed from " + newest + " at step 6"), t.out());
    }
}

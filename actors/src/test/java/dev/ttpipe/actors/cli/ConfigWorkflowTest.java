package dev.ttpipe.actors.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;

import static dev.ttpipe.actors.cli.CliTest.assertOneLineBadInput;
import static dev.ttpipe.actors.cli.CliTest.run;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code --set KEY=VALUE}, {@code --print-config} and {@code --dry-run}: a config changed and looked at from the command line. */
class ConfigWorkflowTest {
    static Path config(Path dir) throws Exception {
        return CliTest.config(dir, CliTest.SMALL.replace("RUNS", dir.resolve("runs").toString()));
    }

    static boolean noRunDirectory(Path dir) {
        return !Files.exists(dir.resolve("runs"));
    }

    /** Every key can be set, nested sections included; each value printed says where it came from. */
    @Test
    void setChangesAnyKeyAndPrintConfigSaysWhereEachValueCameFrom(@TempDir Path dir) throws Exception {
        Path cfg = config(dir);
        CliTest.Result r = run("train", cfg.toString(), "--set", "training_config.learning_rate=0.01", "--set",
                "training_config.eval_every=1", "--set", "device_config.sim.gflops=5", "--max-steps", "7", "--print-config");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.out().matches("(?s).*\n  learning_rate: 0\\.01 +# --set\n.*"), r.out());
        assertTrue(r.out().matches("(?s).*\n  eval_every: 1 +# --set\n.*"), r.out());
        assertTrue(r.out().matches("(?s).*\n  max_steps: 7 +# --max-steps\n.*"), r.out());
        assertTrue(r.out().matches("(?s).*\n  batch_size: 8 +# job\\.yaml:1\n.*"), r.out());
        assertTrue(r.out().matches("(?s).*\n  num_heads: 2 +# job\\.yaml:2\n.*"), r.out());
        assertTrue(r.out().matches("(?s).*\n  dropout_prob: 0\\.0 +# default\n.*"), r.out());
        assertTrue(noRunDirectory(dir), "--print-config runs nothing");

        CliTest.Result val = run("train", cfg.toString(), "--set", "training_config.eval_every=1", "--max-steps", "3", "--log-every", "1",
                "--run-dir", dir.resolve("runs/val").toString());
        assertEquals(0, val.code(), val.err());
        assertTrue(val.joined().matches("(?s).*step 3/3, .*loss \\d\\.\\d{4}, val \\d\\.\\d{4} @3, .*"), "the validation loss on the progress line: " + val.out());

        CliTest.Result set = run("train", cfg.toString(), "--set", "training_config.max_steps=1", "--set",
                "transformer_config.runner_type=memory_efficient", "--set", "training_config.gradient_accumulation_steps=2",
                "--run-dir", dir.resolve("runs/one").toString());
        assertEquals(0, set.code(), set.err());
        assertEquals(1, Files.readAllLines(dir.resolve("runs/one/metrics.jsonl")).size(), "max_steps set to 1");
        assertTrue(set.joined().contains("numerics: fp32, recompute on (runner_type memory_efficient), gradient accumulation 2, matmul "),
                set.out());
        assertTrue(Files.readString(dir.resolve("runs/one/run.json")).contains("\"training_config.max_steps\":\"--set\""),
                "run.json records the flags");
    }

    /** A --set is checked exactly as the YAML's keys: unknown keys and bad values are one line naming the key, exit 2. */
    @Test
    void aBadSetIsOneLineNamingTheKey(@TempDir Path dir) throws Exception {
        Path cfg = config(dir);
        assertOneLineBadInput(run("train", cfg.toString(), "--set", "training_config.learning_rat=0.1"),
                "--set training_config.learning_rat: unknown key (did you mean 'learning_rate'?)");
        assertOneLineBadInput(run("train", cfg.toString(), "--set", "training_config.learning_rate=fast"),
                "--set training_config.learning_rate: 'fast' given, expected a number");
        assertOneLineBadInput(run("train", cfg.toString(), "--set", "device_config.dtype=fp8"),
                "--set device_config.dtype: 'fp8' given, expected one of fp32, bf16");
        assertOneLineBadInput(run("train", cfg.toString(), "--set", "learning_rate"),
                "--set: 'learning_rate' given, expected KEY=VALUE");
        assertOneLineBadInput(run("train", cfg.toString(), "--set", "training_config.batch_size.x=1"),
                "--set training_config.batch_size.x: training_config.batch_size is '8' in the config, expected a section");
        assertOneLineBadInput(run("verify", cfg.toString(), "--set", "multihost_config.pipeline_parallel_config.num_microbatches=3"),
                "--set multihost_config.pipeline_parallel_config.num_microbatches", "do not divide batch_size 8");
        assertTrue(noRunDirectory(dir));
    }

    /** --dry-run checks the config, the data and the memory, prints the plan and exits 0, or 2 when the job could not start. */
    @Test
    void dryRunPlansAndExitsWithoutRunning(@TempDir Path dir) throws Exception {
        Path cfg = config(dir);
        CliTest.Result r = run("train", cfg.toString(), "--set", "device_config.dtype=bf16", "--dry-run");
        assertEquals(0, r.code(), r.err());
        String joined = r.joined();
        assertTrue(joined.contains("ttpipe train: gpt2 3 blocks") && joined.contains("numerics: bf16, recompute off, gradient accumulation 1")
                && joined.contains("memory plan: at most") && joined.contains("dry run: the config is valid"), r.out());
        assertFalse(r.out().contains("loss"), r.out());
        CliTest.Result v = run("verify", cfg.toString(), "--dry-run");
        assertEquals(0, v.code(), v.err());
        assertTrue(v.out().contains("dry run:"), v.out());
        CliTest.Result w = run("worker", cfg.toString(), "--rank", "0", "--dry-run");
        assertEquals(0, w.code(), w.err());
        assertTrue(w.out().contains("dry run:"), w.out());
        CliTest.Result l = run("launch", cfg.toString(), "--set", "multihost_config.socket_type=aeron", "--dry-run");
        assertEquals(0, l.code(), l.err());
        assertTrue(l.out().contains("launch would start 2 worker processes"), l.out());
        assertTrue(noRunDirectory(dir), "a dry run writes nothing");
        assertOneLineBadInput(run("train", cfg.toString(), "--set", "device_config.memory_per_device=64KiB", "--dry-run"),
                "--set device_config.memory_per_device: rank ", "per device, its devices have 64.0 KiB");
    }

    /** simulate takes --set and --print-config on its CONFIG too; a key it sets in a section the file lacks names no line. */
    @Test
    void simulateTakesSetAndPrintConfig(@TempDir Path dir) throws Exception {
        Path cfg = config(dir);
        CliTest.Result r = run("simulate", cfg.toString(), "--set", "multihost_config.pipeline_parallel_config.schedule=gpipe", "--json");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.out().contains("\"schedule\":\"gpipe\""), r.out());
        CliTest.Result p = run("simulate", cfg.toString(), "--set", "multihost_config.pipeline_parallel_config.schedule=gpipe",
                "--print-config");
        assertEquals(0, p.code(), p.err());
        assertTrue(p.out().matches("(?s).*\n    schedule: gpipe +# --set\n.*"), p.out());
        Path bare = CliTest.config(dir, "training_config: {batch_size: 8}\n");
        assertOneLineBadInput(run("simulate", bare.toString(), "--set", "multihost_config.pipeline_parallel_config.num_microbatches=0"),
                "--set multihost_config.pipeline_parallel_config.num_microbatches: '0' given, expected in [1, 1048576]");
        assertOneLineBadInput(run("simulate", "--set", "training_config.seed=1"), "--set: training_config.seed=1 given without a CONFIG");
    }

    /** tune and bench step take a config as train does: --set, --print-config and --dry-run, which run nothing. */
    @Test
    void tuneAndBenchStepTakeSetPrintConfigAndDryRun(@TempDir Path dir) throws Exception {
        Path cfg = config(dir);
        for (String[] command : new String[][]{{"tune"}, {"bench", "step"}}) {
            String name = String.join(" ", command);
            CliTest.Result p = run(with(command, cfg.toString(), "--set", "training_config.learning_rate=0.02", "--print-config"));
            assertEquals(0, p.code(), name + ": " + p.err());
            assertTrue(p.out().matches("(?s).*\n  learning_rate: 0\\.02 +# --set\n.*"), name + ": " + p.out());
            CliTest.Result d = run(with(command, cfg.toString(), "--set", "device_config.dtype=bf16", "--dry-run"));
            assertEquals(0, d.code(), name + ": " + d.err());
            String joined = d.joined();
            assertTrue(joined.contains("ttpipe train: gpt2 3 blocks") && joined.contains("numerics: bf16")
                    && joined.contains("memory plan: at most") && joined.contains("dry run: the config is valid"), name + ": " + d.out());
            assertFalse(d.out().contains("best:") || d.out().contains("machine peak") || d.out().contains("loss"), name + ": " + d.out());
            assertOneLineBadInput(run(with(command, cfg.toString(), "--set", "training_config.learning_rat=0.1", "--dry-run")),
                    "--set training_config.learning_rat: unknown key (did you mean 'learning_rate'?)");
        }
        CliTest.Result t = run("tune", cfg.toString(), "--verify-top", "2", "--out", dir.resolve("best.yaml").toString(), "--dry-run");
        assertTrue(t.joined().matches("(?s).*tune would search up to [\\d,]+ candidates \\(schedules .*; microbatches 1, 2, 4, 8;"
                + " pipeline ranks 2; recompute off and on\\) in a budget of 60 s, with costs measured on the cpu backend, then run"
                + " the 2 best and the config as it is, 8 steps each; the best would be written to .*best\\.yaml\n.*"), t.out());
        assertFalse(Files.exists(dir.resolve("best.yaml")), "a dry run writes nothing");
        CliTest.Result m = run("tune", cfg.toString(), "--memory-per-device", "3MiB", "--print-config");
        assertTrue(m.out().matches("(?s).*\n  memory_per_device: \\S+ +# --memory-per-device\n.*"), m.out());
        CliTest.Result b = run("bench", "step", cfg.toString(), "--steps", "3", "--dry-run");
        assertTrue(b.joined().contains("bench step would run 1 warm-up step and time 3 steps of the reference trainer, then of the"
                + " pipeline"), b.out());
        assertOneLineBadInput(run("tune", cfg.toString(), "--top", "0", "--dry-run"), "--top: 0 given, expected a positive integer");
        assertTrue(noRunDirectory(dir), "nothing ran");
    }

    private static String[] with(String[] command, String... args) {
        String[] all = java.util.Arrays.copyOf(command, command.length + args.length);
        System.arraycopy(args, 0, all, command.length, args.length);
        return all;
    }
}

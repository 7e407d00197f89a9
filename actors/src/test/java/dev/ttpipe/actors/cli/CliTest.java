package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.runtime.Faults;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The commands as a user runs them: exit codes, one-line errors, run directories, verify's verdict.
 * {@link #run} is how other packages' tests run a command line too.
 */
public class CliTest {
    public record Result(int code, String out, String err) {
        /** {@link #out} with the lines that wrapping broke joined again (see {@link CliTest#joined}). */
        String joined() {
            return CliTest.joined(out);
        }
    }

    /**
     * {@code text} with the lines that wrapping to 80 columns broke joined again: a break with its hanging indent
     * (two spaces, or a shell command's {@code " \"} and four) reads as one space; {@code ttpipe launch}'s
     * {@code [rank N] } in front of each line is left out.
     */
    static String joined(String text) {
        return text.replaceAll("(?m)^\\[rank \\d+\\] ", "").replace(" \\\n    ", " ").replace("\n  ", " ");
    }

    public static Result run(String... args) {
        return run(Faults.NONE, args);
    }

    /** Runs the command line with {@code faults} injected into the pipelines it starts. */
    static synchronized Result run(Faults faults, String... args) {
        PrintStream oldOut = System.out, oldErr = System.err;
        ByteArrayOutputStream out = new ByteArrayOutputStream(), err = new ByteArrayOutputStream();
        try {
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            int code = Main.run(faults, args);
            return new Result(code, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
        } finally {
            System.setOut(oldOut);
            System.setErr(oldErr);
        }
    }

    static void assertOneLineBadInput(Result r, String... fragments) {
        assertEquals(Main.EXIT_BAD_INPUT, r.code(), r.err());
        String[] lines = joined(r.err()).strip().split("\n");             // a note before it, wrapped, reads as one line
        assertTrue(lines.length <= 2, "expected one line (plus a usage hint), got:\n" + r.err());
        assertFalse(r.err().contains("\tat "), "a stack trace without --verbose:\n" + r.err());
        for (String f : fragments) assertTrue(r.err().contains(f), "'" + f + "' not in: " + r.err());
    }

    static Path config(Path dir, String text) throws Exception {
        Path p = dir.resolve("job.yaml");
        Files.writeString(p, text);
        return p;
    }

    /** A small GPT-2's Hugging Face config.json. */
    static final String HF_GPT2 = "{\"model_type\":\"gpt2\",\"vocab_size\":61,\"n_embd\":16,\"n_head\":2,\"n_layer\":2,"
            + "\"n_positions\":16,\"activation_function\":\"gelu_new\",\"layer_norm_epsilon\":1e-05}";

    /** {@code dir/hf}: a Hugging Face folder with {@code config} and an empty weights file (read only after the config). */
    static Path hfModel(Path dir, String config) throws Exception {
        Path m = Files.createDirectories(dir.resolve("hf"));
        Files.writeString(m.resolve("config.json"), config);
        Files.write(m.resolve("model.safetensors"), new byte[0]);
        return m;
    }

    /** A text to evaluate on, for --data. */
    static String evalData(Path dir) throws Exception {
        return Files.writeString(dir.resolve("data.txt"), "some text to evaluate on ".repeat(20)).toString();
    }

    static final String SMALL = String.join("\n",
            "training_config: {batch_size: 8, max_steps: 2, learning_rate: 0.003, runs_dir: RUNS}",
            "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 3, max_sequence_length: 16}",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 3, blocks_per_rank: {0: 1, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
            "");

    @Test
    void trainRunsAPipelineAndWritesItsRunDirectory(@TempDir Path dir) throws Exception {
        Path runs = dir.resolve("runs");
        Result r = run("train", config(dir, SMALL.replace("RUNS", runs.toString())).toString());
        assertEquals(0, r.code(), r.err());
        assertTrue(r.out().contains("validation loss"), r.out());
        Path run;
        try (var s = Files.list(runs)) {
            run = s.findFirst().orElseThrow();
        }
        for (String f : new String[]{"config.yaml", "vocab.txt", "metrics.jsonl", "trace.json"}) {
            assertTrue(Files.size(run.resolve(f)) > 0, f);
        }
        assertEquals(2, Files.readAllLines(run.resolve("metrics.jsonl")).size());
        String trace = Files.readString(run.resolve("trace.json"));
        assertTrue(trace.contains("\"name\":\"0F0\"") && trace.contains("\"ph\":\"s\"") && trace.contains("\"rank 1\"")
                && trace.contains("\"stage 1 comm\"") && trace.contains("\"name\":\"step 1\""), "trace");
        // the resolved config loads again as it is
        assertEquals(0, run("verify", run.resolve("config.yaml").toString(), "--steps", "1").code());
    }

    @Test
    void maxRestartsIsRefusedWhereNothingWouldRestart(@TempDir Path dir) throws Exception {
        Path cfg = config(dir, SMALL.replace("RUNS", dir.toString()).replace("max_steps: 2,", "max_steps: 2, max_restarts: 2,"));
        assertOneLineBadInput(run("train", cfg.toString()), "training_config.max_restarts: 2 given for `ttpipe train`",
                "only a job of worker processes");
        assertOneLineBadInput(run("verify", cfg.toString()), "given for `ttpipe verify`");
    }

    @Test
    void verifyPrintsBothLossesPerStepAndAgrees(@TempDir Path dir) throws Exception {
        Result r = run("verify", config(dir, SMALL.replace("RUNS", dir.toString())).toString(), "--steps", "3",
                "--schedule", "zb-h1", "--mode", "ready-first");
        assertEquals(0, r.code(), r.out() + r.err());
        assertTrue(r.out().contains("OK: the pipelined run matches"), r.out());
        assertEquals(3, r.out().lines().filter(l -> l.matches("\\s+\\d+\\s+\\d+\\.\\d+\\s+\\d+\\.\\d+\\s+.*")).count(), r.out());
    }

    /** {@code --stages} re-splits the model; a config's {@code num_workers} (one process per rank) follows it. */
    @Test
    void stagesOnTheCommandLineAlsoSetTheWorkerCount(@TempDir Path dir) throws Exception {
        Path cfg = config(dir, SMALL.replace("RUNS", dir.toString()).replace("multihost_config:", "multihost_config:\n  num_workers: 2"));
        Result r = run("train", cfg.toString(), "--stages", "3", "--max-steps", "1");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.joined().contains("3 stages on 3 ranks"), r.out());
    }

    @Test
    void badInputIsOneLineWithExitCodeTwo(@TempDir Path dir) throws Exception {
        Path cfg = config(dir, SMALL.replace("RUNS", dir.toString()));
        assertOneLineBadInput(run("train", dir.resolve("nope.yaml").toString()), "nope.yaml", "no such file");
        assertOneLineBadInput(run("train", cfg.toString(), "--schedule", "2f2b"), "--schedule", "2f2b", "1f1b");
        assertOneLineBadInput(run("train", cfg.toString(), "--microbatches", "3"), "--microbatches", "do not divide batch_size 8");
        assertOneLineBadInput(run("train", cfg.toString(), "--backend", "gpu"), "--backend", "'gpu'", "cpu, sim, ttnn");
        assertOneLineBadInput(run("train", cfg.toString(), "--stages", "0"), "--stages", "positive");
        assertOneLineBadInput(run("verify", cfg.toString(), "--steps", "0"), "--steps");
        assertOneLineBadInput(run("train", cfg.toString(), "--max-steps", "x"), "--max-steps", "'x'");
        Path bad = dir.resolve("bad.yaml");
        Files.writeString(bad, SMALL.replace("{0: 1, 1: 2}", "{0: 1, 1: 1}").replace("RUNS", dir.toString()));
        assertOneLineBadInput(run("train", bad.toString()), "bad.yaml:4: multihost_config.pipeline_parallel_config.blocks_per_rank",
                "sums to 2, expected num_blocks = 3");
    }

    @Test
    void versionAndHelpWork() {
        Result v = run("--version");
        assertEquals(0, v.code());
        assertTrue(v.out().startsWith("ttpipe "), v.out());
        Result h = run("train", "--help");
        assertEquals(0, h.code());
        assertTrue(h.out().contains("Examples:"), h.out());
    }

    @Test
    void aJobThatWouldOverflowADeviceIsRefusedBeforeItStartsInOneLine(@TempDir Path dir) throws Exception {
        Path cfg = config(dir, SMALL.replace("RUNS", dir.resolve("runs").toString()) + "device_config: {memory_per_device: 64KiB}\n");
        Result r = run("train", cfg.toString());
        assertOneLineBadInput(r, "job.yaml:5: device_config.memory_per_device: rank ", "per device, its devices have 64.0 KiB",
                "parameters ", "activations of up to ");
        assertFalse(Files.exists(dir.resolve("runs")), "a run directory was made for a job that cannot start");
    }
}

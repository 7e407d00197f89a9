package dev.ttpipe.actors.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;

import static dev.ttpipe.actors.cli.CliTest.assertOneLineBadInput;
import static dev.ttpipe.actors.cli.CliTest.config;
import static dev.ttpipe.actors.cli.CliTest.run;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** train -> export --format hf -> init_from, as a user runs them; verify against the reference trainer from those weights. */
class InitFromCliTest {
    static final String PIPELINE = String.join("\n",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 3, blocks_per_rank: {0: 1, 1: 2}, num_microbatches: 2, schedule: 1f1b}",
            "");

    /** The step-0 row of verify's table: pipeline loss and reference loss. */
    static String firstRow(String out) {
        for (String line : out.split("\n")) if (line.trim().startsWith("0 ")) return line.trim().split("\\s+")[1] + " " + line.trim().split("\\s+")[2];
        throw new AssertionError("no step 0 in:\n" + out);
    }

    @Test
    void exportedWeightsStartATrainingThatMatchesTheReferenceAndTheCheckpointItself(@TempDir Path dir) throws Exception {
        Path runs = dir.resolve("runs");
        String train = "training_config: {batch_size: 4, max_steps: 2, learning_rate: 0.01, runs_dir: " + runs + "}\n"
                + "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 3, max_sequence_length: 16}\n" + PIPELINE;
        assertEquals(0, run("train", config(dir, train).toString()).code());
        Path ckpt;
        try (var s = Files.list(runs)) {
            ckpt = s.findFirst().orElseThrow().resolve("checkpoints/step-000002");
        }
        Path hf = dir.resolve("hf");
        CliTest.Result e = run("export", ckpt.toString(), "--format", "hf", "--out", hf.toString());
        assertEquals(0, e.code(), e.err());
        assertTrue(Files.isRegularFile(hf.resolve("config.json")) && Files.isRegularFile(hf.resolve("model.safetensors")), e.out());

        // the shape comes from config.json: no transformer_config at all
        String fromHf = "training_config: {batch_size: 4, max_steps: 2, learning_rate: 0.01, runs_dir: " + runs + ", init_from: " + hf
                + "}\n" + PIPELINE;
        CliTest.Result a = run("verify", config(dir, fromHf).toString(), "--steps", "2");
        assertEquals(0, a.code(), a.out() + a.err());
        assertTrue(a.out().contains("both initialised from " + hf), a.out());
        String fromCkpt = fromHf.replace("init_from: " + hf, "model_path: " + ckpt)
                + "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 3, max_sequence_length: 16}\n";
        CliTest.Result b = run("verify", config(dir, fromCkpt).toString(), "--steps", "2");
        assertEquals(0, b.code(), b.out() + b.err());
        assertEquals(firstRow(b.out()), firstRow(a.out()), "the exported weights give the checkpoint's own loss");

        String contradicts = fromHf + "transformer_config: {num_blocks: 4, num_heads: 2}\n";
        assertOneLineBadInput(run("train", config(dir, contradicts).toString()), "training_config.init_from: " + hf.resolve("config.json")
                + " differs from transformer_config (num_blocks 4 vs config.json's 3)");
    }
}

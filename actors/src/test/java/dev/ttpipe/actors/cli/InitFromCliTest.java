package dev.ttpipe.actors.cli;

import dev.ttpipe.stages.data.ArithmeticCorpus;
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

    /** The step-1 row of verify's table: pipeline loss and reference loss. */
    static String firstRow(String out) {
        for (String line : out.split("\n")) if (line.trim().startsWith("1 ")) return line.trim().split("\\s+")[1] + " " + line.trim().split("\\s+")[2];
        throw new AssertionError("no step 1 in:\n" + out);
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
        assertTrue(a.joined().contains("both initialised from " + hf), a.out());
        String fromCkpt = fromHf.replace("init_from: " + hf, "model_path: " + ckpt)
                + "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 3, max_sequence_length: 16}\n";
        CliTest.Result b = run("verify", config(dir, fromCkpt).toString(), "--steps", "2");
        assertEquals(0, b.code(), b.out() + b.err());
        assertEquals(firstRow(b.out()), firstRow(a.out()), "the exported weights give the checkpoint's own loss");

        // eval: the checkpoint (its char vocabulary from trainer_state.json) and its export (the run's vocab.txt) on one text
        Path text = Files.writeString(dir.resolve("sums.txt"), ArithmeticCorpus.generate(9, 400, 9));
        CliTest.Result ev1 = run("eval", ckpt.toString(), "--data", text.toString(), "--batches", "3");
        assertEquals(0, ev1.code(), ev1.err());
        CliTest.Result ev2 = run("eval", hf.toString(), "--data", text.toString(), "--batches", "3", "--stages", "3", "--tokenizer",
                ckpt.getParent().getParent().resolve("vocab.txt").toString());
        assertEquals(0, ev2.code(), ev2.err());
        String loss1 = ev1.out().substring(ev1.out().indexOf("loss ")), loss2 = ev2.out().substring(ev2.out().indexOf("loss "));
        assertTrue(loss1.matches("(?s)loss \\d+\\.\\d{4} nats/token, perplexity \\d+\\.\\d{2}, \\d+ tokens/s\\s*"), loss1);
        assertEquals(loss1.substring(0, loss1.indexOf(",")), loss2.substring(0, loss2.indexOf(",")), "one loss, whole or in 3 stages");
        assertOneLineBadInput(run("eval", hf.toString(), "--data", text.toString()), "no tokenizer known for a text");

        // generate: greedy with the key/value cache prints what the whole-context reference prints, in 1 or 3 stages
        CliTest.Result g1 = run("generate", ckpt.toString(), "--prompt", "\n3+4=", "--max-new-tokens", "10", "--temperature", "0");
        CliTest.Result g2 = run("generate", hf.toString(), "--prompt", "\n3+4=", "--max-new-tokens", "10", "--temperature", "0",
                "--no-kv-cache", "--stages", "3", "--tokenizer", ckpt.getParent().getParent().resolve("vocab.txt").toString());
        assertEquals(0, g1.code(), g1.err());
        assertEquals(0, g2.code(), g2.err());
        assertEquals(g2.out(), g1.out());
        assertEquals(5 + 10 + 1, g1.out().length(), g1.out());     // the prompt, 10 characters, the newline
        assertTrue(CliTest.joined(g1.err()).contains("generate: 10 new tokens in") && CliTest.joined(g1.err()).contains("key/value cache"),
                g1.err());
        assertOneLineBadInput(run("generate", ckpt.toString(), "--prompt", "1+1=", "--max-new-tokens", "20"),
                "4 prompt tokens + 20 new ones exceed the model's context of 16 tokens");

        String contradicts = fromHf + "transformer_config: {num_blocks: 4, num_heads: 2}\n";
        assertOneLineBadInput(run("train", config(dir, contradicts).toString()), "training_config.init_from: " + hf.resolve("config.json")
                + " differs from transformer_config (num_blocks 4 vs config.json's 3)");
    }
}

package dev.ttpipe.actors.cli;

import dev.ttpipe.stages.checkpoint.MiniJson;
import dev.ttpipe.stages.data.ArithmeticCorpus;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import static dev.ttpipe.actors.cli.CliTest.assertOneLineBadInput;
import static dev.ttpipe.actors.cli.CliTest.config;
import static dev.ttpipe.actors.cli.CliTest.run;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code --json} on the commands a script reads (docs/cli-json.md): stdout is one JSON object that
 * parses, with the figures the text prints; progress and tables go to stderr. (top --once --json is
 * checked against a running job in MetricsServerTest; simulate, tune, report and bench in their own tests.)
 */
class JsonOutputTest {
    /** stdout as one JSON object: exactly one non-blank line, which parses to a map. */
    static Map<?, ?> oneObject(CliTest.Result r) {
        List<String> lines = r.out().lines().filter(l -> !l.isBlank()).toList();
        assertEquals(1, lines.size(), "expected one line of JSON on stdout, got:\n" + r.out());
        return (Map<?, ?>) MiniJson.parse(lines.get(0));
    }

    static void assertKeys(Map<?, ?> j, String... keys) {
        for (String k : keys) assertTrue(j.containsKey(k), "no \"" + k + "\" in " + j);
    }

    /** The last checkpoint of a two-step run of a 2-block char model on two stages. */
    static Path trainedCheckpoint(Path dir) throws Exception {
        Path runs = dir.resolve("runs");
        String train = "training_config: {batch_size: 4, max_steps: 2, learning_rate: 0.01, runs_dir: " + runs + "}\n"
                + "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 2, max_sequence_length: 16}\n"
                + "multihost_config:\n"
                + "  pipeline_parallel_config: {num_blocks: 2, blocks_per_rank: {0: 1, 1: 1}, num_microbatches: 2, schedule: 1f1b}\n";
        assertEquals(0, run("train", config(dir, train).toString()).code());
        try (var s = Files.list(runs)) {
            return s.findFirst().orElseThrow().resolve("checkpoints/step-000002");
        }
    }

    @Test
    void evalPrintsLossPerplexityAndTokensAsOneObject(@TempDir Path dir) throws Exception {
        Path ckpt = trainedCheckpoint(dir);
        Path text = Files.writeString(dir.resolve("sums.txt"), ArithmeticCorpus.generate(9, 400, 9));
        CliTest.Result r = run("eval", ckpt.toString(), "--data", text.toString(), "--batches", "2", "--batch-size", "2", "--json");
        assertEquals(0, r.code(), r.err());
        Map<?, ?> j = oneObject(r);
        assertKeys(j, "model", "checkpoint", "data", "batches", "batch_size", "seq_len", "tokens", "stages", "backend", "loss",
                "perplexity", "seconds", "tokens_per_second");
        assertEquals(2, ((Number) j.get("batches")).intValue());
        assertEquals(2L * 2 * 16, ((Number) j.get("tokens")).longValue(), "2 batches of 2 x 16 tokens");
        assertEquals(ckpt.toString(), j.get("checkpoint"));
        double loss = ((Number) j.get("loss")).doubleValue();
        assertTrue(loss > 0, j.toString());
        assertEquals(Math.exp(loss), ((Number) j.get("perplexity")).doubleValue(), 1e-9 * Math.exp(loss));

        CliTest.Result text1 = run("eval", ckpt.toString(), "--data", text.toString(), "--batches", "2", "--batch-size", "2");
        assertTrue(text1.out().contains(String.format(Locale.ROOT, "loss %.4f nats/token", loss)), text1.out());

        CliTest.Result p = run("eval", ckpt.toString(), "--data", text.toString(), "--batches", "2", "--batch-size", "2", "--json",
                "--stages", "2", "--transport", "aeron");
        assertEquals(0, p.code(), p.err());
        Map<?, ?> pj = oneObject(p);
        assertEquals(Boolean.TRUE, pj.get("pipelined"), pj.toString());
        assertEquals("aeron", pj.get("transport"), pj.toString());
        assertEquals(j.get("loss"), pj.get("loss"), "pipelined over Aeron IPC: the one-process loss");
        assertEquals(Boolean.FALSE, j.get("pipelined"), j.toString());
        CliTest.assertOneLineBadInput(run("eval", ckpt.toString(), "--data", text.toString(), "--stages", "3"),
                "--stages: 3 given, expected 1..2 (at most one stage per block");
        CliTest.assertOneLineBadInput(run("eval", ckpt.toString(), "--data", text.toString(), "--stages", "2", "--transport", "udp"),
                "--transport: 'udp' given, expected local or aeron");
    }

    @Test
    void generatePrintsTheNewIdsTheirTextAndTokensPerSecondAsOneObject(@TempDir Path dir) throws Exception {
        Path ckpt = trainedCheckpoint(dir);
        Map<?, ?>[] j = new Map<?, ?>[2];
        for (int stages = 1; stages <= 2; stages++) {
            CliTest.Result r = run("generate", ckpt.toString(), "--prompt", "\n3+4=", "--max-new-tokens", "6", "--seed", "3",
                    "--stages", Integer.toString(stages), "--json");
            assertEquals(0, r.code(), r.err());
            j[stages - 1] = oneObject(r);
            assertKeys(j[stages - 1], "model", "prompt", "prompt_tokens", "new_tokens", "ids", "text", "stages", "pipelined", "transport",
                    "kv_cache", "temperature", "top_k", "seed", "seconds", "tokens_per_second");
            assertEquals(5, ((Number) j[stages - 1].get("prompt_tokens")).intValue());
            assertEquals(6, ((List<?>) j[stages - 1].get("ids")).size());
            assertEquals(6, ((String) j[stages - 1].get("text")).length(), "one character per token");
            assertTrue(((Number) j[stages - 1].get("tokens_per_second")).doubleValue() > 0);
        }
        assertEquals(j[0].get("ids"), j[1].get("ids"), "sampled with one seed: pipelined on 2 stages as in one process");
        assertEquals(j[0].get("text"), j[1].get("text"));
        assertEquals(Boolean.TRUE, j[1].get("pipelined"));
    }

    @Test
    void verifyPrintsTheVerdictAndEveryStepAsOneObjectAndTheTableOnStderr(@TempDir Path dir) throws Exception {
        CliTest.Result r = run("verify", config(dir, CliTest.SMALL.replace("RUNS", dir.toString())).toString(), "--steps", "2",
                "--json");
        assertEquals(0, r.code(), r.out() + r.err());
        Map<?, ?> j = oneObject(r);
        assertEquals(Boolean.TRUE, j.get("ok"), j.toString());
        List<?> steps = (List<?>) j.get("steps");
        assertEquals(2, steps.size(), j.toString());
        for (Object o : steps) {
            Map<?, ?> s = (Map<?, ?>) o;
            assertKeys(s, "step", "pipeline_loss", "reference_loss", "pipeline_grad_norm", "reference_grad_norm",
                    "grad_norm_rel_diff", "max_rel_diff", "worst_parameter", "ok");
            assertEquals(((Number) s.get("reference_loss")).doubleValue(), ((Number) s.get("pipeline_loss")).doubleValue(), 1e-5);
        }
        assertTrue(r.err().contains("OK: the pipelined run matches"), r.err());
    }

    @Test
    void preparePrintsTokenCountsAndFilesAsOneObject(@TempDir Path dir) throws Exception {
        Path text = Files.writeString(dir.resolve("corpus.txt"), TokenDataCliTest.corpus());
        Path out = dir.resolve("tok");
        CliTest.Result r = run("prepare", text.toString(), "--tokenizer", "char", "--out", out.toString(), "--json");
        assertEquals(0, r.code(), r.err());
        Map<?, ?> j = oneObject(r);
        assertKeys(j, "text", "bytes", "tokenizer", "vocab_size", "out", "train_tokens", "train_files", "val_tokens", "val_files",
                "seconds");
        assertEquals("char", j.get("tokenizer"));
        assertEquals(Files.size(text), ((Number) j.get("bytes")).longValue());
        long train = ((Number) j.get("train_tokens")).longValue(), val = ((Number) j.get("val_tokens")).longValue();
        assertEquals(Files.readString(text).length(), train + val, "a char tokenizer: one token per character");
        assertEquals(List.of(out.resolve("train_000000.bin").toString()), j.get("train_files"));
    }

    @Test
    void topRefusesJsonWithoutOnce() {
        assertOneLineBadInput(run("top", "--url", "127.0.0.1:1", "--json"), "--json given without --once", "expected --once --json");
    }
}

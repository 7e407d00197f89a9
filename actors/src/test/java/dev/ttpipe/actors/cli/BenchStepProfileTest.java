package dev.ttpipe.actors.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code ttpipe bench step --profile}: the per-op table is printed, names the op kinds and adds up to the step. */
class BenchStepProfileTest {
    private static final String ONE_RANK = String.join("\n",
            "training_config: {batch_size: 4, max_steps: 2, learning_rate: 0.003}",
            "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 2, max_sequence_length: 16}",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 2, blocks_per_rank: {0: 2}, num_microbatches: 1}",
            "");

    @Test
    void profilePrintsATablePerOpKindThatAddsUpToTheStep(@TempDir Path dir) throws Exception {
        CliTest.Result r = CliTest.run("bench", "step", CliTest.config(dir, ONE_RANK).toString(), "--steps", "2", "--profile");
        assertEquals(0, r.code(), r.err());
        String out = r.out();
        for (String kind : new String[]{"op kind", "matmul fwd (linear, + bias)", "matmul bwd weight", "attention fwd",
                "attention bwd", "layernorm fwd", "gelu/silu fwd", "optimizer", "outside ops"}) {
            assertTrue(out.contains(kind), "'" + kind + "' not in:\n" + out);
        }
        Matcher m = Pattern.compile("^  (.+?)\\s+(-?[0-9.]+)\\s+(-?[0-9.]+)%", Pattern.MULTILINE).matcher(out);
        double share = 0;
        int rows = 0;
        while (m.find()) {
            share += Double.parseDouble(m.group(3));
            rows++;
        }
        assertTrue(rows > 8, "table rows: " + rows + " in:\n" + out);
        assertEquals(100, share, 1.5, "the shares (outside ops included) add up to the step:\n" + out);
    }

    /** A bf16 step on an engine that multiplies in fp32 (here sgemm, which runs everywhere) is not held to the bf16 peak. */
    @Test
    void aBf16StepOnAnFp32EngineHasItsMfuAgainstTheFp32Peak(@TempDir Path dir) throws Exception {
        Path cfg = CliTest.config(dir, ONE_RANK + "global_env: {TTPIPE_BF16_GEMM: sgemm}\n");
        CliTest.Result r = CliTest.run("bench", "step", cfg.toString(), "--steps", "1", "--dtype", "bf16");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.out().matches("(?s).*MFU [0-9.]+% of the measured peak.*"), r.out());
        assertTrue(!r.out().matches("(?s).*MFU [0-9.]+% of the bf16 peak.*"), r.out());
    }

    /** {@code --warmup N}: N untimed steps train before the timed ones, so the third step timed alone has the loss of the third of three. */
    @Test
    void warmUpStepsRunBeforeTheTimedOnes(@TempDir Path dir) throws Exception {
        String cfg = CliTest.config(dir, ONE_RANK).toString();
        CliTest.Result three = CliTest.run("bench", "step", cfg, "--warmup", "0", "--steps", "3", "--json");
        CliTest.Result third = CliTest.run("bench", "step", cfg, "--warmup", "2", "--steps", "1", "--json");
        assertEquals(0, three.code(), three.err());
        assertEquals(0, third.code(), third.err());
        assertTrue(third.out().contains("\"steps\":1,\"warmup_steps\":2"), third.out());
        assertEquals(loss(three.out()), loss(third.out()), "the third step's loss, timed after 0 and after 2 warm-up steps");
        CliTest.Result first = CliTest.run("bench", "step", cfg, "--warmup", "0", "--steps", "1", "--json");
        assertTrue(!loss(first.out()).equals(loss(third.out())), "the first step's loss equals the third's: " + first.out());
        CliTest.assertOneLineBadInput(CliTest.run("bench", "step", cfg, "--warmup", "-1"), "--warmup: -1 given",
                "expected 0 or a positive integer");
    }

    private static String loss(String json) {
        Matcher m = Pattern.compile("\"reference\":\\{.*?\"loss\":([-0-9.eE]+)").matcher(json);
        assertTrue(m.find(), json);
        return m.group(1);
    }

    @Test
    void withoutTheFlagThereIsNoTable(@TempDir Path dir) throws Exception {
        CliTest.Result r = CliTest.run("bench", "step", CliTest.config(dir, ONE_RANK).toString(), "--steps", "1");
        assertEquals(0, r.code(), r.err());
        assertTrue(!r.out().contains("op kind"), r.out());
    }
}

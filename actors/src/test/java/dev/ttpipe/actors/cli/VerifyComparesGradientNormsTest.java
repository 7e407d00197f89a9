package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.runtime.Faults;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.Locale;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code ttpipe verify} compares each step's gradient norm: a pipeline whose gradients are twice
 * too large ({@link Mutation#PIPELINE_GRADIENT_X2}) moves AdamW's weights by less than the
 * tolerance, and only the gradient norm gives it away; the shipped SGD config verifies.
 */
class VerifyComparesGradientNormsTest {
    /** A 2-rank GPT-2 with AdamW and clipping: the weights cannot show a gradient scale error. */
    static final String ADAMW = String.join("\n",
            "training_config: {batch_size: 8, max_steps: 2, learning_rate: 0.003, use_clip_grad_norm: true,"
                    + " clip_grad_norm_max_norm: 1.0, runs_dir: RUNS}",
            "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 2, max_sequence_length: 16}",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 2, blocks_per_rank: {0: 1, 1: 1}, num_microbatches: 4, schedule: 1f1b}",
            "");

    /** The columns of step {@code step}'s row: step, losses, |g| pipeline and reference, |g| rel diff, weights' max rel diff. */
    private static double[] row(String out, int step) {
        String line = out.lines().filter(l -> l.trim().startsWith(step + " ")).findFirst().orElseThrow(() ->
                new AssertionError("no row for step " + step + " in:\n" + out));
        String[] f = line.trim().split("\\s+");
        double[] v = new double[7];
        for (int i = 0; i < 7; i++) v[i] = Double.parseDouble(f[i]);
        return v;
    }

    @Test
    void aDoubledPipelineGradientFailsVerifyThroughTheGradientNormThoughAdamWHidesItInTheWeights(@TempDir Path dir)
            throws Exception {
        Path cfg = CliTest.config(dir, ADAMW.replace("RUNS", dir.toString()));
        CliTest.Result ok = CliTest.run("verify", cfg.toString(), "--steps", "2");
        assertEquals(0, ok.code(), ok.out() + ok.err());
        assertTrue(row(ok.out(), 1)[5] <= 1e-6, ok.out());

        CliTest.Result bad = CliTest.run(Faults.scaledGradients(2.0), "verify", cfg.toString(), "--steps", "2");
        System.out.println(bad.out());
        assertEquals(1, bad.code(), bad.out() + bad.err());
        assertTrue(bad.out().contains("MISMATCH"), bad.out());
        assertTrue(bad.out().contains("beyond the tolerance 1.0E-5; worst parameter "), bad.out());
        double[] r = row(bad.out(), 1);
        assertEquals(2.0, r[3] / r[4], 1e-5, "the pipeline's gradient norm is twice the reference's:\n" + bad.out());
        assertEquals(1.0, r[5], 1e-5, bad.out());
        assertTrue(r[6] < 1e-5, String.format(Locale.ROOT, "AdamW moved the weights apart by %.2e only, below the "
                + "tolerance; the gradient norm is what catches it:%n%s", r[6], bad.out()));
    }

    @Test
    void theShippedSgdConfigVerifies() {
        CliTest.Result r = CliTest.run("verify", Path.of("..", "configs", "verify-sgd.yaml").toString(), "--steps", "3");
        System.out.println(r.out());
        assertEquals(0, r.code(), r.out() + r.err());
        assertTrue(r.out().contains("OK: the pipelined run matches"), r.out());
        assertTrue(r.out().contains("sgd optimizer"), r.out());
    }
}

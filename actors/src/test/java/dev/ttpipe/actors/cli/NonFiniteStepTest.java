package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.runtime.Faults;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * From the second step on, one parameter of stage 1 gets a NaN gradient (as an overflow in its
 * backward would leave it). Such a step is not applied: the checkpoints after steps 1, 2 and 3 hold
 * the same weights and optimizer moments, bit for bit. Each is reported with the stage and parameter,
 * and after max_nonfinite_steps in a row the job stops with that diagnosis, exit code 1.
 */
class NonFiniteStepTest {
    @Test
    void nonFiniteStepsAreNotAppliedAndStopTheJobAfterMaxInARow(@TempDir Path dir) throws Exception {
        Path cfg = CheckpointTest.write(dir, "nan.yaml", String.join("\n",
                "training_config: {batch_size: 8, max_steps: 10, learning_rate: 0.003, runs_dir: RUNS, model_save_interval: 1,",
                "  max_nonfinite_steps: 3, checkpoint_keep: 5}",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 4, max_sequence_length: 16}",
                "multihost_config:",
                "  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: {0: 2, 1: 2}, num_microbatches: 4, schedule: 1f1b}", ""));
        Path run = dir.resolve("run");
        CliTest.Result r = CliTest.run(Faults.nonFiniteGradient(1, 1), "train", cfg.toString(), "--run-dir", run.toString());
        String all = r.out() + r.err();
        assertEquals(Main.EXIT_FAILURE, r.code(), all);
        assertTrue(r.joined().contains("step 2: non-finite gradient, first at stage 1 (rank 1), parameter blocks.2."), r.out());
        assertTrue(r.joined().contains("not applied (1 in a row; training_config.max_nonfinite_steps = 3)"), r.out());
        assertTrue(r.err().contains("3 steps in a row (2..4) had non-finite values, none applied"), r.err());
        assertFalse(r.err().contains("\tat "), "a stack trace without --verbose: " + r.err());
        Path ck = run.resolve("checkpoints");
        CheckpointTest.assertSameTensors(ck.resolve("step-000001"), ck.resolve("step-000002"));
        CheckpointTest.assertSameTensors(ck.resolve("step-000001"), ck.resolve("step-000003"));
        assertTrue(Files.readString(ck.resolve("step-000003/trainer_state.json")).contains("\"optimizer_steps\": 1"));
        assertTrue(Files.readString(run.resolve("metrics.jsonl")).contains("\"not_applied\":\"non-finite gradient, first at stage 1"));
    }
}

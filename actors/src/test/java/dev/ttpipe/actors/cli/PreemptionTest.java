package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.ExitCodes;
import dev.ttpipe.actors.train.Preemption;
import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Preemption as SLURM and Kubernetes do it: a real SIGTERM to a real `ttpipe train` process stops it at a step
 * boundary with a checkpoint of that step, run.json status "preempted", the command that resumes printed and exit
 * code 143; that command (--resume auto) goes on from there and the run ends with the same weights and losses, bit
 * for bit, as an uninterrupted one; run again once the run is finished, it has nothing to do.
 */
class PreemptionTest {
    static final String CONFIG = String.join("\n",
            "training_config: {batch_size: 8, max_steps: 300, learning_rate: 0.003, model_save_interval: 1000, runs_dir: RUNS,"
                    + " use_clip_grad_norm: true, scheduler_type: cosine, warmup_steps: 5}",
            "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 3, max_sequence_length: 16, dropout_prob: 0.1}",
            "telemetry: {port: 0}",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 3, blocks_per_rank: {0: 1, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
            "");

    @Test
    void sigtermSavesAtTheStepBoundaryAndResumeAutoEndsBitIdenticalToAnUninterruptedRun(@TempDir Path dir) throws Exception {
        Path cfg = Files.writeString(dir.resolve("job.yaml"), CONFIG.replace("RUNS", dir.resolve("runs").toString()));
        Path run = dir.resolve("run");
        List<String> args = List.of("train", cfg.toString(), "--run-dir", run.toString(), "--resume", "auto", "--log-every", "50");
        Process p = TtpipeProcesses.signalledAfter(dir, "first", args, run.resolve("metrics.jsonl"), 10, "TERM");
        String out = CliTest.joined(TtpipeProcesses.log(dir, "first"));
        assertEquals(ExitCodes.SIGTERM, p.exitValue(), out);
        assertTrue(out.contains("--resume auto: no checkpoint in " + run.resolve("checkpoints") + " yet; starting from the beginning"), out);
        Map<?, ?> record = (Map<?, ?>) MiniJson.parse(Files.readString(run.resolve("run.json")));
        assertEquals("preempted", record.get("status"), record.toString());
        assertEquals("SIGTERM", record.get("preempted_by"), record.toString());
        int step = ((Number) record.get("steps_done")).intValue();
        assertTrue(step >= 10 && step < 300, record.toString());
        String resume = "ttpipe train " + cfg + " --log-every 50 --run-dir " + run + " --resume auto";
        assertEquals(resume, record.get("resume_command"), record.toString());
        assertTrue(out.contains("ttpipe: SIGTERM: finishing the current step, then saving a checkpoint and exiting with code 143"), out);
        assertTrue(out.contains("preempted (SIGTERM) at step " + step + " of 300: the checkpoint of step " + step + " is saved ("
                + run.resolve("checkpoints").resolve(String.format("step-%06d", step)) + ")"), out);
        assertTrue(out.contains("resume with: " + resume), out);
        assertEquals(String.format("step-%06d", step), Files.readString(run.resolve("checkpoints/latest")).strip());
        assertEquals(step, Files.readAllLines(run.resolve("metrics.jsonl")).size(), "every step done is in metrics.jsonl, no more");
        MiniJson.parse(Files.readString(run.resolve("trace.json")));                   // the timeline so far, loadable

        // the requeue: the same command line, in this JVM
        CliTest.Result again = CliTest.run(args.toArray(new String[0]));
        assertEquals(0, again.code(), again.out() + again.err());
        assertTrue(again.joined().contains("resumed from " + run.resolve("checkpoints").resolve(String.format("step-%06d", step))
                + " at step " + step), again.out());
        CliTest.Result whole = CliTest.run("train", cfg.toString(), "--run-dir", dir.resolve("whole").toString());
        assertEquals(0, whole.code(), whole.out() + whole.err());
        CheckpointTest.assertSameTensors(dir.resolve("whole/checkpoints/step-000300"), run.resolve("checkpoints/step-000300"));
        assertEquals(losses(dir.resolve("whole/metrics.jsonl")), losses(run.resolve("metrics.jsonl")), "the loss of every step");

        CliTest.Result done = CliTest.run(args.toArray(new String[0]));
        assertEquals(0, done.code(), done.out() + done.err());
        assertTrue(done.joined().contains("is at step 300 of 300: the run is finished, nothing to do"), done.out());
    }

    @Test
    void resumeAutoNeedsTheRunDirectory(@TempDir Path dir) throws Exception {
        Path cfg = Files.writeString(dir.resolve("job.yaml"), CONFIG.replace("RUNS", dir.resolve("runs").toString()));
        CliTest.assertOneLineBadInput(CliTest.run("train", cfg.toString(), "--resume", "auto"),
                "--resume auto: no --run-dir given, expected --run-dir DIR");
        assertFalse(Files.exists(dir.resolve("runs")), "no run directory made");
    }

    @Test
    void theResumeCommandReplacesResumeAndRunDirAndQuotesForAShell() {
        assertEquals("ttpipe train 'my job.yaml' --max-steps 9 --run-dir 'runs/it'\\''s' --resume auto",
                Preemption.resumeCommand(List.of("ttpipe", "train", "my job.yaml", "--resume", "latest", "--max-steps", "9",
                        "--run-dir=old"), Path.of("runs/it's")));
    }

    /** The loss of each step, by step (a resumed run's metrics.jsonl holds both parts). */
    static List<String> losses(Path metrics) throws Exception {
        List<String> out = new ArrayList<>();
        for (String line : Files.readAllLines(metrics)) {
            Map<?, ?> m = (Map<?, ?>) MiniJson.parse(line);
            out.add(m.get("step") + ":" + m.get("loss"));
        }
        return out;
    }
}

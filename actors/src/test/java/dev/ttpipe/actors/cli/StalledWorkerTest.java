package dev.ttpipe.actors.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A worker of a two-process {@code ttpipe launch} stopped with SIGSTOP, as a long GC pause or a swapped host
 * would stop it. Shorter than {@code multihost_config.liveness_grace_s} (8 s of the default 30 s, well over
 * the failure detector's 3 s): rank 0 names it and waits, and after SIGCONT the job goes on without a
 * restart. Longer (a grace of 4 s): rank 0 declares it dead and kills it, and the launcher restarts it as
 * it does a worker that died. Either way the final weights are bit-identical to the job run in one process
 * without a stall.
 */
class StalledWorkerTest {
    static final int STEPS = 60;

    static Path job(Path dir, int basePort, String multihost) throws Exception {
        return MultiProcessTest.write(dir, "job.yaml", MultiProcessTest.config(2, basePort, "{0: 2, 1: 2}")
                .replace("max_steps: 400", "max_steps: " + STEPS + ", model_save_interval: 10")
                .replace("  enabled: true\n", "  enabled: true\n" + multihost) + "telemetry: {port: 0}\n");
    }

    /** The final checkpoint of {@code cfg} trained in this process, uninterrupted. */
    static Path uninterrupted(Path dir, Path cfg) {
        Path run = dir.resolve("uninterrupted");
        CliTest.Result r = CliTest.run("train", cfg.toString(), "--run-dir", run.toString(),
                "--set", "multihost_config.enabled=false", "--set", "multihost_config.socket_type=local");
        assertEquals(0, r.code(), r.out() + r.err());
        return run.resolve(String.format("checkpoints/step-%06d", STEPS));
    }

    static long startLines(CliTest.Result r, int rank) {
        return r.out().lines().filter(l -> l.startsWith("[rank " + rank + "] rank " + rank + " of 2: control")).count();
    }

    /** A launch of {@code cfg} whose rank 1 has trained {@code steps} steps, and the uninterrupted run's last checkpoint. */
    record Launched(Path reference, Path run, CompletableFuture<CliTest.Result> job, ProcessHandle rank1) {
        static Launched untilStep(Path dir, Path cfg, int steps) throws Exception {
            Path reference = uninterrupted(dir, cfg);
            Path run = dir.resolve("stalled");
            CompletableFuture<CliTest.Result> job = CompletableFuture.supplyAsync(() -> CliTest.run("launch", cfg.toString(),
                    "--run-dir", run.toString()));
            return new Launched(reference, run, job, TtpipeProcesses.workerOnceStepped(run.resolve("metrics.jsonl"), steps, 1, job));
        }

        void assertSameFinalWeights() throws Exception {
            CheckpointTest.assertSameTensors(reference, run.resolve(String.format("checkpoints/step-%06d", STEPS)));
        }
    }

    @Test
    void aWorkerStoppedForLessThanTheGraceIsWaitedForAndTheJobGoesOnBitIdentical(@TempDir Path dir) throws Exception {
        Launched l = Launched.untilStep(dir, job(dir, 28300, ""), 10);
        ProcessHandle victim = l.rank1();
        TtpipeProcesses.signal(victim, "STOP");
        try {
            Thread.sleep(8_000);
        } finally {
            TtpipeProcesses.signal(victim, "CONT");
        }
        CliTest.Result r = l.job().get(240, TimeUnit.SECONDS);
        String all = r.out() + r.err();
        assertEquals(0, r.code(), all);
        assertTrue(CliTest.joined(r.out()).contains("ttpipe watchdog: rank 1 (127.0.0.1:28301) has not answered for 3 s; waiting up to"
                + " 30 s more (multihost_config.liveness_grace_s) before declaring it dead"), all);
        assertTrue(CliTest.joined(r.out()).contains("ttpipe watchdog: rank 1 (127.0.0.1:28301) answers again after "), all);
        assertFalse(all.contains("recovering") || all.contains("restarting") || all.contains("declared dead"), all);
        assertEquals(1, startLines(r, 0), r.out());
        assertEquals(1, startLines(r, 1), r.out());
        l.assertSameFinalWeights();
        MultiProcessTest.assertNoLeftovers();
    }

    @Test
    void aWorkerStoppedForLongerThanTheGraceIsDeclaredDeadAndRestartedAsADeadOneIs(@TempDir Path dir) throws Exception {
        Launched l = Launched.untilStep(dir, job(dir, 28320, "  liveness_grace_s: 4\n"), 15);
        ProcessHandle victim = l.rank1();
        CliTest.Result r;
        TtpipeProcesses.signal(victim, "STOP");                // never continued: rank 0 kills it
        try {
            r = l.job().get(240, TimeUnit.SECONDS);
        } finally {
            if (victim.isAlive()) TtpipeProcesses.signal(victim, "CONT");
        }
        String all = r.out() + r.err();
        assertEquals(0, r.code(), all);
        assertTrue(CliTest.joined(r.out()).contains("ttpipe watchdog: rank 1 (127.0.0.1:28321) has not answered for 3 s; waiting up to"
                + " 4 s more"), all);
        assertTrue(CliTest.joined(r.out()).contains("rank 1 (127.0.0.1:28321) became unreachable and did not answer within"
                + " multihost_config.liveness_grace_s (4 s): declared dead; its process " + victim.pid()
                + " was killed so that ttpipe launch starts it again"), all);
        // from here on as for a worker killed outright (MultiProcessTest)
        assertTrue(CliTest.joined(r.err()).contains("ttpipe launch: rank 1 (127.0.0.1:28321) died (exit code 137, signal 9)"), all);
        assertTrue(CliTest.joined(r.err()).contains("ttpipe launch: restarting rank 1 alone (restart 1 of 3)"), all);
        assertTrue(CliTest.joined(r.out()).contains("recovering (1 of 3, training_config.max_restarts)"), all);
        assertTrue(CliTest.joined(r.out()).contains("back at the checkpoint of step "), all);
        assertEquals(1, startLines(r, 0), r.out());
        assertEquals(2, startLines(r, 1), r.out());
        l.assertSameFinalWeights();
        MultiProcessTest.assertNoLeftovers();
    }
}

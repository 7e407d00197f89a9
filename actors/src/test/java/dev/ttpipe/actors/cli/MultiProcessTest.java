package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.multihost.Launcher;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Multi-process jobs on this machine: worker processes forming a Pekko Cluster, tensors over Aeron
 * UDP on loopback. The pipelined run matches the reference trainer with 2 and with 4 workers; a
 * worker killed with SIGKILL stops the job with its rank and host named and leaves no process or Aeron
 * directory (how fast: {@code ttpipe bench faults}); bad deployments are one line with exit code 2.
 */
class MultiProcessTest {
    static String config(int ranks, int basePort, String split) {
        StringBuilder b = new StringBuilder(String.join("\n",
                "training_config: {batch_size: 8, max_steps: 400, learning_rate: 0.003, runs_dir: RUNS}",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 4, max_sequence_length: 16}",
                "multihost_config:",
                "  enabled: true",
                "  socket_type: aeron",
                "  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: " + split + ", num_microbatches: 4, schedule: 1f1b}",
                "rank_bindings:", ""));
        for (int r = 0; r < ranks; r++) {
            b.append("  - {rank: ").append(r).append(", mesh_id: ").append(r).append(", host: \"127.0.0.1\", control_port: ")
                    .append(basePort + r).append(", data_port: ").append(basePort + 100 + 2 * r).append("}\n");
        }
        return b.toString();
    }

    static Path write(Path dir, String name, String text) throws Exception {
        Path p = dir.resolve(name);
        Files.writeString(p, text.replace("RUNS", dir.resolve("runs").toString()));
        return p;
    }

    @Test
    void verifyAcrossTwoAndFourWorkerProcessesMatchesTheReference(@TempDir Path dir) throws Exception {
        CliTest.Result two = CliTest.run("verify", write(dir, "pp2.yaml", config(2, 26100, "{0: 2, 1: 2}")).toString(), "--steps", "3");
        assertEquals(0, two.code(), two.out() + two.err());
        assertTrue(two.out().contains("OK: the pipelined run matches"), two.out());
        CliTest.Result four = CliTest.run("verify", write(dir, "pp4.yaml", config(4, 26200, "{0: 1, 1: 1, 2: 1, 3: 1}")).toString(),
                "--steps", "3");
        assertEquals(0, four.code(), four.out() + four.err());
        assertTrue(four.out().contains("OK: the pipelined run matches"), four.out());
        assertNoLeftovers();
    }

    @Test
    void aLaunchedJobSavesCheckpointsAndResumesFromOneBitForBit(@TempDir Path dir) throws Exception {
        Path cfg = write(dir, "pp2.yaml", config(2, 26500, "{0: 2, 1: 2}").replace("max_steps: 400", "max_steps: 4,"
                + " model_save_interval: 2"));
        CliTest.Result whole = CliTest.run("launch", cfg.toString(), "--run-dir", dir.resolve("whole").toString());
        assertEquals(0, whole.code(), whole.out() + whole.err());
        Path half = dir.resolve("whole/checkpoints/step-000002");
        CliTest.Result resumed = CliTest.run("launch", cfg.toString(), "--run-dir", dir.resolve("resumed").toString(),
                "--resume", half.toString());
        assertEquals(0, resumed.code(), resumed.out() + resumed.err());
        assertTrue(resumed.joined().contains("resumed from " + half + " at step 2"), resumed.out());
        CheckpointTest.assertSameTensors(dir.resolve("whole/checkpoints/step-000004"), dir.resolve("resumed/checkpoints/step-000004"));
        assertNoLeftovers();
    }

    /**
     * global_env reaches the worker processes: TTPIPE_BLAS=java given there (and nowhere else) makes rank 0's
     * worker run its matmuls on the pure-JVM kernel, as its run.json records, where OpenBLAS would load.
     */
    @Test
    void launchedWorkersStartWithGlobalEnv(@TempDir Path dir) throws Exception {
        Assumptions.assumeTrue(System.getenv("TTPIPE_BLAS") == null, "TTPIPE_BLAS is set for the tests");
        Path cfg = write(dir, "pp2.yaml", config(2, 26700, "{0: 2, 1: 2}").replace("max_steps: 400", "max_steps: 2")
                + "global_env: {TTPIPE_BLAS: java}\n");
        CliTest.Result r = CliTest.run("launch", cfg.toString(), "--run-dir", dir.resolve("run").toString());
        assertEquals(0, r.code(), r.out() + r.err());
        String record = Files.readString(dir.resolve("run/run.json"));
        assertTrue(record.contains("\"matmul_kernel\": \"pure-JVM"), record);
        assertNoLeftovers();
    }

    @Test
    void aWorkerStartedWithADifferentPlanCannotJoinTheJob(@TempDir Path dir) throws Exception {
        Path cfg = write(dir, "pp2.yaml", config(2, 26400, "{0: 2, 1: 2}"));
        var deployment = Deployment.of(ConfigLoader.load(cfg));
        var rank1 = new Launcher(cfg, List.of("--seed", "7"), deployment, System.out, System.err);
        try {
            rank1.start(1, 2);                                       // rank 1 with another seed: another plan
            CliTest.Result r = CliTest.run("worker", "--rank", "0", cfg.toString(), "--max-steps", "2");
            assertEquals(Main.EXIT_FAILURE, r.code(), r.out() + r.err());
            assertTrue(r.err().contains("rank 1 cannot join the job: it was started with a different plan"), r.out() + r.err());
        } finally {
            rank1.finish(20);
        }
        assertNoLeftovers();
    }

    @Test
    void aLaunchedJobRecoversFromAKilledWorkerAndEndsBitIdentical(@TempDir Path dir) throws Exception {
        killOneWorkerAndCompare(dir, 2, 26600, "{0: 2, 1: 2}", 1, 60);
    }

    @Test
    void aFourRankJobRestartsOnlyTheKilledWorkerWhileTheOthersRollBackAndEndsBitIdentical(@TempDir Path dir) throws Exception {
        killOneWorkerAndCompare(dir, 4, 26620, "{0: 1, 1: 1, 2: 1, 3: 1}", 2, 60);
    }

    @Test
    void whenRankZeroDiesEveryWorkerIsStartedAgainFromTheCheckpointAndTheRunEndsBitIdentical(@TempDir Path dir) throws Exception {
        killOneWorkerAndCompare(dir, 2, 26640, "{0: 2, 1: 2}", 0, 60);
    }

    /**
     * Runs the job whole, then again killing rank {@code victim} (SIGKILL) between checkpoints: only that
     * worker is started again, the others stay and roll back (rank 0: every worker is started again with
     * --resume), and the final checkpoints are bit-identical.
     */
    private static void killOneWorkerAndCompare(Path dir, int ranks, int basePort, String split, int victimRank, int steps)
            throws Exception {
        Path cfg = write(dir, "job.yaml", config(ranks, basePort, split).replace("max_steps: 400", "max_steps: " + steps + ", model_save_interval: 10"));
        CliTest.Result whole = CliTest.run("launch", cfg.toString(), "--run-dir", dir.resolve("whole").toString());
        assertEquals(0, whole.code(), whole.out() + whole.err());
        Path killed = dir.resolve("killed");
        CompletableFuture<CliTest.Result> job = CompletableFuture.supplyAsync(() -> CliTest.run("launch", cfg.toString(),
                "--run-dir", killed.toString()));
        ProcessHandle victim = TtpipeProcesses.workerOnceStepped(killed.resolve("metrics.jsonl"), 25, victimRank, job);
        victim.destroyForcibly();                                    // SIGKILL, between checkpoints 20 and 30
        CliTest.Result r = job.get(240, TimeUnit.SECONDS);
        assertEquals(0, r.code(), r.out() + r.err());
        assertTrue(CliTest.joined(r.err()).contains("rank " + victimRank + " (127.0.0.1:" + (basePort + victimRank)
                + ") died (exit code 137, signal 9)"), r.err());
        assertTrue(CliTest.joined(r.err()).contains("recovered in"), r.err());
        if (victimRank == 0) {
            assertTrue(CliTest.joined(r.err()).contains("restarting every worker from the checkpoint of step 20"), r.err());
            assertTrue(r.joined().contains("resumed from "), r.out());
        } else {
            assertTrue(CliTest.joined(r.err()).contains("restarting rank " + victimRank + " alone"), r.err());
            assertTrue(r.joined().contains("back at the checkpoint of step 20"), r.out());
            // the survivors roll back from their host copy of step 20's checkpoint, the restarted worker from the disk
            assertTrue(r.joined().contains((ranks - 1) + " of " + ranks + " ranks restored from their copy in memory, the others"
                    + " from the disk"), r.out());
        }
        for (int rank = 0; rank < ranks; rank++) {           // each printed its start line once, the victim twice (rank 0: all)
            String start = "[rank " + rank + "] rank " + rank + " of " + ranks + ": control";
            assertEquals(rank == victimRank || victimRank == 0 ? 2 : 1, r.out().lines().filter(l -> l.startsWith(start)).count(),
                    r.out());
        }
        CheckpointTest.assertSameTensors(dir.resolve("whole/checkpoints/" + String.format("step-%06d", steps)),
                killed.resolve("checkpoints/" + String.format("step-%06d", steps)));
        assertNoLeftovers();
    }

    /**
     * The launcher sees the killed worker's exit first and stops the job. How long that takes (about the
     * launcher's grace period) is a figure of {@code ttpipe bench faults}; the 60 s cap only stops a hang.
     */
    @Test
    void aWorkerKilledMidStepStopsTheJobNamingItsRankAndHost(@TempDir Path dir) throws Exception {
        // max_restarts: 0 -- the job stops instead of restarting
        Path cfg = write(dir, "pp4.yaml", config(4, 26300, "{0: 1, 1: 1, 2: 1, 3: 1}").replace("max_steps: 400",
                "max_steps: 400, max_restarts: 0"));
        CompletableFuture<CliTest.Result> job = CompletableFuture.supplyAsync(() -> CliTest.run("launch", cfg.toString()));
        ProcessHandle victim;
        try {
            victim = waitForStep(dir, "--rank 2");
        } catch (AssertionError e) {
            ProcessHandle.current().descendants().forEach(ProcessHandle::destroyForcibly);
            CliTest.Result r = job.get(30, TimeUnit.SECONDS);
            throw new AssertionError(e.getMessage() + "\nlaunch output:\n" + r.out() + r.err(), e);
        }
        victim.destroyForcibly();
        CliTest.Result r = job.get(60, TimeUnit.SECONDS);
        assertEquals(Main.EXIT_FAILURE, r.code(), r.out() + r.err());
        assertTrue(CliTest.joined(r.err()).contains("ttpipe launch: rank 2 (127.0.0.1:26302) exited with code 137"),
                r.out() + r.err());
        assertNoLeftovers();
    }

    @Test
    void aControlPortInUseIsOneLineWithExitCodeTwo(@TempDir Path dir) throws Exception {
        Path cfg = write(dir, "pp2.yaml", config(2, 26400, "{0: 2, 1: 2}"));
        try (ServerSocket taken = new ServerSocket()) {
            taken.bind(new InetSocketAddress("127.0.0.1", 26400));
            CliTest.assertOneLineBadInput(CliTest.run("worker", "--rank", "0", cfg.toString()),
                    "rank 0 control_port 127.0.0.1:26400 cannot be bound");
        }
    }

    @Test
    void anUnreachableSeedIsOneLineWithExitCodeTwo(@TempDir Path dir) throws Exception {
        Path cfg = write(dir, "pp2.yaml", config(2, 26500, "{0: 2, 1: 2}"));
        CliTest.Result r = CliTest.run("worker", "--rank", "1", cfg.toString(), "--join-timeout", "3");
        assertEquals(Main.EXIT_BAD_INPUT, r.code(), r.err());
        assertTrue(r.err().contains("the seed, rank 0 at 127.0.0.1:26500, did not answer within 3 s"), r.err());
        assertNoLeftovers();
    }

    @Test
    void aRankOutOfRangeIsOneLineWithExitCodeTwo(@TempDir Path dir) throws Exception {
        Path cfg = write(dir, "pp2.yaml", config(2, 26600, "{0: 2, 1: 2}"));
        CliTest.assertOneLineBadInput(CliTest.run("worker", "--rank", "5", cfg.toString()), "--rank: 5 given, expected 0..1");
    }

    /** Waits until the worker whose command line contains {@code marker} exists and rank 0 has finished a step. */
    static ProcessHandle waitForStep(Path dir, String marker) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
        while (System.nanoTime() < deadline) {
            List<ProcessHandle> found = ProcessHandle.current().descendants()
                    .filter(p -> cmdline(p).contains(marker)).toList();
            Path runs = dir.resolve("runs");
            boolean stepped = false;
            if (Files.isDirectory(runs)) {
                try (var s = Files.walk(runs)) {
                    stepped = s.anyMatch(f -> f.getFileName().toString().equals("metrics.jsonl") && size(f) > 0);
                }
            }
            if (!found.isEmpty() && stepped) return found.get(0);
            Thread.sleep(100);
        }
        StringBuilder seen = new StringBuilder();
        ProcessHandle.current().descendants().forEach(p -> seen.append("\n  ").append(p.pid()).append(": ")
                .append(cmdline(p).substring(Math.max(0, cmdline(p).length() - 120))));
        throw new AssertionError("no worker '" + marker + "' training within 90 s; processes:" + seen);
    }

    /** A process's command line from /proc (ProcessHandle.Info gives up on very long class paths). */
    static String cmdline(ProcessHandle p) {
        try {
            return new String(Files.readAllBytes(Path.of("/proc", Long.toString(p.pid()), "cmdline")),
                    StandardCharsets.UTF_8).replace('\0', ' ');
        } catch (IOException | RuntimeException e) {
            return p.info().commandLine().orElse("");
        }
    }

    static long size(Path f) {
        try {
            return Files.size(f);
        } catch (IOException e) {
            return 0;
        }
    }

    static void assertNoLeftovers() throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        List<ProcessHandle> alive;
        do {
            alive = ProcessHandle.current().descendants().filter(ProcessHandle::isAlive).toList();
            if (alive.isEmpty()) break;
            Thread.sleep(100);
        } while (System.nanoTime() < deadline);
        assertTrue(alive.isEmpty(), "worker processes left: " + alive);
        for (Path base : List.of(Path.of("/dev/shm"), Path.of(System.getProperty("java.io.tmpdir")))) {
            if (!Files.isDirectory(base)) continue;
            try (var s = Files.list(base)) {
                // left behind = its process is gone (a live one may belong to another job on this machine)
                List<Path> left = s.filter(p -> p.getFileName().toString().startsWith("ttpipe-aeron-"))
                        .filter(p -> !processAlive(p.getFileName().toString()))
                        .toList();
                assertTrue(left.isEmpty(), "Aeron directories left: " + left);
            }
        }
    }

    /** Whether the process named in an Aeron directory's name ({@code ttpipe-aeron-<pid>-...}) is running. */
    static boolean processAlive(String dirName) {
        try {
            long pid = Long.parseLong(dirName.substring("ttpipe-aeron-".length()).split("-")[0]);
            return ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false);
        } catch (RuntimeException e) {
            return false;
        }
    }
}

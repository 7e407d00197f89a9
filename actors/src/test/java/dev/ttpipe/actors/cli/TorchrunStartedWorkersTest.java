package dev.ttpipe.actors.cli;

import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Two real worker processes started as torchrun would start them on two nodes: only RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE=1, MASTER_ADDR=127.0.0.1 and MASTER_PORT, and a config without rank_bindings,
 * so neither knows the other's host. Rank 1 joins rank 0 (the seed at MASTER_ADDR) and announces its
 * endpoint (on this one machine TTPIPE_CONTROL_PORT and TTPIPE_DATA_PORT keep it off rank 0's ports); rank 0
 * sends both the table, and the job trains to the same losses and weights, bit for bit, as one process.
 */
class TorchrunStartedWorkersTest {
    /** The workers torchrun would start on two nodes, rank 1's own ports given, with {@code args} after the config. */
    static List<Process> startWorkers(Path dir, String name, Path cfg, int[] ports, String... args) throws IOException {
        List<Process> workers = new ArrayList<>();
        for (int r = 0; r < 2; r++) workers.add(startWorker(dir, name + r, cfg, ports, r, args));
        return workers;
    }

    static Process startWorker(Path dir, String name, Path cfg, int[] ports, int rank, String... args) throws IOException {
        List<String> cmd = new ArrayList<>(List.of("worker", cfg.toString()));
        cmd.addAll(List.of(args));
        Map<String, String> env = new java.util.HashMap<>(Map.of("RANK", "" + rank, "WORLD_SIZE", "2", "LOCAL_RANK", "0",
                "LOCAL_WORLD_SIZE", "1", "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", "29500"));
        if (rank == 1) env.putAll(Map.of("TTPIPE_CONTROL_PORT", "" + (ports[0] + 1), "TTPIPE_DATA_PORT", "" + (ports[1] + 2)));
        return TtpipeProcesses.start(dir, name, env, cmd);
    }

    @Test
    void twoWorkersThatKnowOnlyRankZerosHostFindEachOtherThroughItAndMatchOneProcess(@TempDir Path dir) throws Exception {
        int[] ports = SlurmStartedWorkersTest.freePorts();
        Path cfg = Files.writeString(dir.resolve("pp2.yaml"), SlurmStartedWorkersTest.config(4, ports[0], ports[1], dir.resolve("runs")));
        Path run = dir.resolve("run");
        List<Integer> codes = SlurmStartedWorkersTest.finish(dir, "rank", startWorkers(dir, "rank", cfg, ports, "--run-dir",
                run.toString()));
        String rank0 = CliTest.joined(TtpipeProcesses.log(dir, "rank0")), rank1 = CliTest.joined(TtpipeProcesses.log(dir, "rank1"));
        assertEquals(List.of(0, 0), codes, rank0 + rank1);
        String control0 = "127.0.0.1:" + ports[0], data0 = "127.0.0.1:" + ports[1];
        String control1 = "127.0.0.1:" + (ports[0] + 1), data1 = "127.0.0.1:" + (ports[1] + 2);
        assertTrue(rank1.contains("rank 1 of 2: control " + control1 + ", data " + data1 + ", announced through rank 0, seed "
                + control0), rank1);
        // each prints its peers' endpoints, as rank 0 sent them
        assertTrue(rank0.contains("rank 1 of 2: control " + control1 + ", data " + data1 + ", announced through rank 0\n"), rank0);
        assertTrue(rank1.contains("rank 0 of 2: control " + control0 + ", data " + data0 + " (seed, coordinator)"), rank1);
        assertTrue(rank1.contains("rank 1: job done"), rank1);
        Map<?, ?> record = (Map<?, ?>) MiniJson.parse(Files.readString(run.resolve("run.json")));
        assertEquals("finished", record.get("status"), record.toString());
        Map<?, ?> launcher = (Map<?, ?>) record.get("launcher");
        assertEquals("torchrun", launcher.get("engine"), record.toString());
        assertEquals("through rank 0", launcher.get("peers"), record.toString());
        List<String> endpoints = new ArrayList<>();
        for (Object e : (List<?>) launcher.get("endpoints")) {
            Map<?, ?> m = (Map<?, ?>) e;
            endpoints.add(m.get("rank") + " " + m.get("control") + " " + m.get("data") + " " + m.get("announced"));
        }
        assertEquals(List.of("0 " + control0 + " " + data0 + " false", "1 " + control1 + " " + data1 + " true"), endpoints,
                record.toString());
        Path one = SlurmStartedWorkersTest.oneProcess(dir, cfg);
        assertEquals(PreemptionTest.losses(one.resolve("metrics.jsonl")), PreemptionTest.losses(run.resolve("metrics.jsonl")),
                "the loss of every step");
        CheckpointTest.assertSameTensors(one.resolve("checkpoints/step-000004"), run.resolve("checkpoints/step-000004"));
    }

    /** Rank 0 alone: the rank that never announces fails the start within --join-timeout, in one line naming it. */
    @Test
    void aRankThatNeverAnnouncesFailsTheStartInOneLineNamingIt(@TempDir Path dir) throws Exception {
        int[] ports = SlurmStartedWorkersTest.freePorts();
        Path cfg = Files.writeString(dir.resolve("pp2.yaml"), SlurmStartedWorkersTest.config(4, ports[0], ports[1], dir.resolve("runs")));
        Process alone = startWorker(dir, "alone", cfg, ports, 0, "--join-timeout", "3");
        int code = exitCode(dir, "alone", alone);
        String log = TtpipeProcesses.log(dir, "alone");
        assertEquals(Main.EXIT_FAILURE, code, log);
        assertTrue(log.contains("ttpipe: rank 1 did not announce its endpoint through rank 0 within 3 s: torchrun (RANK=0,"
                + " WORLD_SIZE=2, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, MASTER_ADDR=127.0.0.1, MASTER_PORT=29500) names only rank 0's"
                + " host, so each other rank joins rank 0 at 127.0.0.1:" + ports[0] + " and announces its own; expected `ttpipe"
                + " worker CONFIG` running as rank 1, started by the same launcher and reaching 127.0.0.1:" + ports[0]), log);
    }

    /**
     * Rank 1 killed (SIGKILL) mid-run and started again by hand with the same variables, as a scheduler's restart
     * would: it joins rank 0 again, announces the endpoint it had, gets the table, and the job, which waits for it
     * (max_restarts), rolls back to its checkpoint and ends bit-identical to one process.
     */
    @Test
    void aRestartedRankAnnouncesItselfAgainAndTheJobEndsBitIdentical(@TempDir Path dir) throws Exception {
        int[] ports = SlurmStartedWorkersTest.freePorts();
        String text = SlurmStartedWorkersTest.config(30, ports[0], ports[1], dir.resolve("runs"))
                .replace("model_save_interval: 2", "model_save_interval: 10");
        Path cfg = Files.writeString(dir.resolve("pp2.yaml"), text.replace("model_save_interval: 10", "model_save_interval: 10,"
                + " max_restarts: 1"));
        Path run = dir.resolve("run");
        List<Process> workers = new ArrayList<>(startWorkers(dir, "rank", cfg, ports, "--run-dir", run.toString()));
        try {
            TtpipeProcesses.awaitSteps(run.resolve("metrics.jsonl"), 13, workers.get(0), dir.resolve("rank0.log"), 120);
            workers.get(1).destroyForcibly().waitFor();
            workers.add(startWorker(dir, "again1", cfg, ports, 1, "--run-dir", run.toString()));
        } catch (Throwable t) {
            workers.forEach(Process::destroyForcibly);
            throw t;
        }
        List<Integer> codes = List.of(exitCode(dir, "rank0", workers.get(0)), exitCode(dir, "again1", workers.get(2)));
        String rank0 = CliTest.joined(TtpipeProcesses.log(dir, "rank0")), again = CliTest.joined(TtpipeProcesses.log(dir, "again1"));
        assertEquals(List.of(0, 0), codes, rank0 + again);
        assertTrue(again.contains("rank 1 of 2: control 127.0.0.1:" + (ports[0] + 1) + ", data 127.0.0.1:" + (ports[1] + 2)
                + ", announced through rank 0, seed 127.0.0.1:" + ports[0]), again);
        assertTrue(again.contains("rank 1: job done"), again);
        assertTrue(rank0.contains("back at the checkpoint of step 10"), rank0);
        Path one = SlurmStartedWorkersTest.oneProcess(dir, Files.writeString(dir.resolve("one.yaml"), text));
        CheckpointTest.assertSameTensors(one.resolve("checkpoints/step-000030"), run.resolve("checkpoints/step-000030"));
    }

    /** {@code p}'s exit code (a hang fails after 240 s, with its log {@code dir/name.log}). */
    static int exitCode(Path dir, String name, Process p) throws Exception {
        try {
            if (!p.waitFor(240, TimeUnit.SECONDS)) throw new AssertionError(name + " did not end:\n" + TtpipeProcesses.log(dir, name));
            return p.exitValue();
        } finally {
            p.destroyForcibly();
        }
    }
}

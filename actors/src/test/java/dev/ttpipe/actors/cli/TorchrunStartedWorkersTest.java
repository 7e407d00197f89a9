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
}

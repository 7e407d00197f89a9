package dev.ttpipe.actors.cli;

import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.net.DatagramSocket;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Two real worker processes started as {@code srun -n2} would start them on one node: only SLURM's
 * variables (SLURM_PROCID 0 and 1, SLURM_NTASKS=2, SLURM_JOB_NODELIST=localhost, SLURM_TASKS_PER_NODE=2),
 * no --rank and no rank_bindings. They find each other on localhost, train to max_steps, and end with the
 * same weights, bit for bit, as the same config trained in one process.
 */
class SlurmStartedWorkersTest {
    /** The variables of every launcher ttpipe reads: the test's own environment must not leak one into the workers. */
    static final List<String> LAUNCHER_PREFIXES = List.of("SLURM", "OMPI_", "PMIX_", "RANK", "WORLD_SIZE", "LOCAL_RANK",
            "LOCAL_WORLD_SIZE", "MASTER_", "JOB_COMPLETION_INDEX", "JOBSET_NAME", "TTPIPE_LAUNCHED", "TTPIPE_MAX_RESTARTS",
            "TTPIPE_WORLD_SIZE", "TTPIPE_K8S_");

    static String config(int steps, int controlPort, int dataPort, Path runs) {
        return String.join("\n",
                "training_config: {batch_size: 8, max_steps: " + steps + ", learning_rate: 0.003, model_save_interval: 2, runs_dir: "
                        + runs + "}",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 4, max_sequence_length: 16}",
                "telemetry: {port: 0}",
                "multihost_config:",
                "  enabled: true",
                "  socket_type: aeron",
                "  control_port: " + controlPort,
                "  data_port: " + dataPort,
                "  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: {0: 2, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
                "");
    }

    @Test
    void twoWorkersStartedWithOnlySlurmsVariablesTrainAndMatchOneProcess(@TempDir Path dir) throws Exception {
        int[] ports = freePorts();
        Path cfg = Files.writeString(dir.resolve("pp2.yaml"), config(4, ports[0], ports[1], dir.resolve("runs")));
        Path run = dir.resolve("run");
        List<Process> workers = new ArrayList<>();
        try {
            for (int r = 0; r < 2; r++) {
                workers.add(start(dir, "rank" + r, Map.of("SLURM_PROCID", "" + r, "SLURM_LOCALID", "" + r, "SLURM_NTASKS", "2",
                        "SLURM_JOB_NODELIST", "localhost", "SLURM_TASKS_PER_NODE", "2"), List.of("worker", cfg.toString(), "--run-dir",
                        run.toString())));
            }
            for (int r = 0; r < 2; r++) {
                assertTrue(workers.get(r).waitFor(240, TimeUnit.SECONDS), "rank " + r + " did not end:\n" + log(dir, r));
                assertEquals(0, workers.get(r).exitValue(), log(dir, r));
            }
        } finally {
            for (Process p : workers) p.destroyForcibly();
        }
        String rank0 = log(dir, 0), rank1 = log(dir, 1);
        assertTrue(rank0.contains("launcher: SLURM (SLURM_PROCID=0, SLURM_NTASKS=2, SLURM_LOCALID=0, SLURM_JOB_NODELIST=localhost,"
                + " SLURM_TASKS_PER_NODE=2): rank 0 of 2, local rank 0"), rank0);
        assertTrue(rank0.contains("rank 0 of 2: control localhost:" + ports[0] + ", data localhost:" + ports[1] + " (seed, coordinator)"), rank0);
        assertTrue(rank1.contains("rank 1 of 2: control localhost:" + (ports[0] + 1) + ", data localhost:" + (ports[1] + 2)
                + ", seed localhost:" + ports[0]), rank1);
        assertTrue(rank1.contains("rank 1: job done"), rank1);
        Map<?, ?> record = (Map<?, ?>) MiniJson.parse(Files.readString(run.resolve("run.json")));
        assertEquals("finished", record.get("status"), record.toString());
        Map<?, ?> launcher = (Map<?, ?>) record.get("launcher");
        assertEquals("SLURM", launcher.get("engine"), record.toString());
        assertEquals("0", ((Map<?, ?>) launcher.get("variables")).get("SLURM_PROCID"), record.toString());
        assertEquals(4, Files.readAllLines(run.resolve("metrics.jsonl")).size());

        // the same config in one process (every rank an actor here, Aeron IPC): the same weights, bit for bit
        Path one = dir.resolve("one");
        Process p = start(dir, "one", Map.of(), List.of("train", cfg.toString(), "--run-dir", one.toString()));
        assertTrue(p.waitFor(240, TimeUnit.SECONDS) && p.exitValue() == 0, Files.readString(dir.resolve("one.log")));
        CheckpointTest.assertSameTensors(one.resolve("checkpoints/step-000004"), run.resolve("checkpoints/step-000004"));
    }

    /** A ttpipe process with {@code env} as its only launcher variables, its output in {@code name}.log. */
    static Process start(Path dir, String name, Map<String, String> env, List<String> args) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(ProcessHandle.current().info().command().orElse("java"));
        cmd.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments().stream()
                .filter(a -> !a.startsWith("-agentlib:jdwp") && !a.startsWith("-javaagent")).toList());
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), Main.class.getName()));
        cmd.addAll(args);
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(dir.resolve(name + ".log").toFile());
        pb.environment().keySet().removeIf(k -> LAUNCHER_PREFIXES.stream().anyMatch(k::startsWith) );
        pb.environment().putAll(env);
        return pb.start();
    }

    static String log(Path dir, int r) throws IOException {
        return Files.readString(dir.resolve("rank" + r + ".log"));
    }

    /**
     * A control port and a data port where two ranks on this host find theirs free: TCP at c and c + 1, UDP at
     * d and d + 2 (what another job holds now is skipped; a test elsewhere can still take them meanwhile).
     */
    static int[] freePorts() {
        ThreadLocalRandom rnd = ThreadLocalRandom.current();
        for (int attempt = 0; attempt < 200; attempt++) {
            int c = 30000 + 2 * rnd.nextInt(4000), d = c + 10000;
            if (tcpFree(c) && tcpFree(c + 1) && udpFree(d) && udpFree(d + 2)) return new int[]{c, d};
        }
        throw new AssertionError("no free ports found in 30000..48000");
    }

    private static boolean tcpFree(int port) {
        try (ServerSocket s = new ServerSocket()) {
            s.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port));
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    private static boolean udpFree(int port) {
        try (DatagramSocket s = new DatagramSocket(new InetSocketAddress(InetAddress.getLoopbackAddress(), port))) {
            return true;
        } catch (IOException e) {
            return false;
        }
    }
}

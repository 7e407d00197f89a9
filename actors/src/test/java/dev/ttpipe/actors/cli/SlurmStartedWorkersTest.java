package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.ExitCodes;
import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
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
 * same weights, bit for bit, as the same config trained in one process; preempted by a SIGTERM to one of
 * them and started again with the same command line, they end bit-identical too.
 */
class SlurmStartedWorkersTest {
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

    /** The two workers srun would start on one node, with {@code args} after the config. */
    static List<Process> startWorkers(Path dir, String name, Path cfg, String... args) throws IOException {
        List<Process> workers = new ArrayList<>();
        for (int r = 0; r < 2; r++) {
            List<String> cmd = new ArrayList<>(List.of("worker", cfg.toString()));
            cmd.addAll(List.of(args));
            workers.add(TtpipeProcesses.start(dir, name + r, Map.of("SLURM_PROCID", "" + r, "SLURM_LOCALID", "" + r,
                    "SLURM_NTASKS", "2", "SLURM_JOB_NODELIST", "localhost", "SLURM_TASKS_PER_NODE", "2"), cmd));
        }
        return workers;
    }

    /** Waits for both workers (a hang fails after 240 s) and answers their exit codes. */
    static List<Integer> finish(Path dir, String name, List<Process> workers) throws Exception {
        try {
            List<Integer> codes = new ArrayList<>();
            for (int r = 0; r < workers.size(); r++) {
                assertTrue(workers.get(r).waitFor(240, TimeUnit.SECONDS), "rank " + r + " did not end:\n"
                        + TtpipeProcesses.log(dir, name + r));
                codes.add(workers.get(r).exitValue());
            }
            return codes;
        } finally {
            for (Process p : workers) p.destroyForcibly();
        }
    }

    /** The same config trained in one process (every rank an actor there, Aeron IPC): its run directory. */
    static Path oneProcess(Path dir, Path cfg) throws Exception {
        Path one = dir.resolve("one");
        Process p = TtpipeProcesses.start(dir, "one", Map.of(), List.of("train", cfg.toString(), "--run-dir", one.toString()));
        assertTrue(p.waitFor(240, TimeUnit.SECONDS) && p.exitValue() == 0, TtpipeProcesses.log(dir, "one"));
        return one;
    }

    @Test
    void twoWorkersStartedWithOnlySlurmsVariablesTrainAndMatchOneProcess(@TempDir Path dir) throws Exception {
        int[] ports = freePorts();
        Path cfg = Files.writeString(dir.resolve("pp2.yaml"), config(4, ports[0], ports[1], dir.resolve("runs")));
        Path run = dir.resolve("run");
        List<Integer> codes = finish(dir, "rank", startWorkers(dir, "rank", cfg, "--run-dir", run.toString()));
        String rank0 = CliTest.joined(TtpipeProcesses.log(dir, "rank0")), rank1 = CliTest.joined(TtpipeProcesses.log(dir, "rank1"));
        assertEquals(List.of(0, 0), codes, rank0 + rank1);
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
        CheckpointTest.assertSameTensors(oneProcess(dir, cfg).resolve("checkpoints/step-000004"), run.resolve("checkpoints/step-000004"));
    }

    /**
     * SIGTERM to rank 1 alone (as a scheduler preempting one node would): rank 1 passes it on to rank 0, which
     * finishes its step, saves a checkpoint there, records "preempted" and ends the job; both exit 143. The same
     * command line again (a requeue, --resume auto) goes on from that checkpoint and ends bit-identical to one
     * uninterrupted process.
     */
    @Test
    void aSigtermToOneWorkerStopsTheJobAtAStepWithACheckpointAndTheRequeueEndsBitIdentical(@TempDir Path dir) throws Exception {
        int[] ports = freePorts();
        Path cfg = Files.writeString(dir.resolve("pp2.yaml"), config(100, ports[0], ports[1], dir.resolve("runs"))
                .replace("model_save_interval: 2", "model_save_interval: 1000"));
        Path run = dir.resolve("run");
        String[] args = {"--run-dir", run.toString(), "--resume", "auto"};
        List<Process> first = startWorkers(dir, "first", cfg, args);
        try {
            TtpipeProcesses.awaitSteps(run.resolve("metrics.jsonl"), 5, first.get(0), dir.resolve("first0.log"), 240);
            TtpipeProcesses.signal(first.get(1), "TERM");
        } catch (Throwable t) {
            first.forEach(Process::destroyForcibly);
            throw t;
        }
        assertEquals(List.of(ExitCodes.SIGTERM, ExitCodes.SIGTERM), finish(dir, "first", first),
                TtpipeProcesses.log(dir, "first0") + TtpipeProcesses.log(dir, "first1"));
        String rank0 = CliTest.joined(TtpipeProcesses.log(dir, "first0")), rank1 = TtpipeProcesses.log(dir, "first1");
        Map<?, ?> record = (Map<?, ?>) MiniJson.parse(Files.readString(run.resolve("run.json")));
        assertEquals("preempted", record.get("status"), record.toString());
        assertEquals("SIGTERM on rank 1", record.get("preempted_by"), record.toString());
        int step = ((Number) record.get("steps_done")).intValue();
        assertTrue(step >= 5 && step < 100, record.toString());
        assertTrue(rank0.contains("preempted (SIGTERM on rank 1) at step " + step + " of 100: the checkpoint of step " + step
                + " is saved"), rank0);
        assertTrue(rank0.contains("resume with: ttpipe worker " + cfg + " --run-dir " + run + " --resume auto"), rank0);
        assertTrue(rank1.contains("ttpipe: SIGTERM: finishing the current step"), rank1);
        assertTrue(rank1.contains("rank 1: the job stopped for SIGTERM on rank 1; rank 0 saved a checkpoint"), rank1);
        assertEquals(step, Files.readAllLines(run.resolve("metrics.jsonl")).size(), "no step after the checkpoint's");

        assertEquals(List.of(0, 0), finish(dir, "again", startWorkers(dir, "again", cfg, args)),
                TtpipeProcesses.log(dir, "again0") + TtpipeProcesses.log(dir, "again1"));
        assertTrue(CliTest.joined(TtpipeProcesses.log(dir, "again0")).contains("resumed from " + run.resolve("checkpoints").resolve(
                String.format("step-%06d", step)) + " at step " + step), TtpipeProcesses.log(dir, "again0"));
        CheckpointTest.assertSameTensors(oneProcess(dir, cfg).resolve("checkpoints/step-000100"), run.resolve("checkpoints/step-000100"));
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

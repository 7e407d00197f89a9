package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.config.ConfigLoader;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Workers started by hand (as SLURM or Kubernetes would), `max_restarts: 1`: rank 1 is SIGKILLed and,
 * as a requeue would, started again with the same command line. Rank 0 waits for it, every rank rolls
 * back to the latest checkpoint (after checking every link again, the new worker's too), and the job ends at max_steps
 * with exit code 0.
 */
class HandStartedWorkersTest {
    @Test
    void rankZeroWaitsForADeadWorkerToBeStartedAgainAndGoesOn(@TempDir Path dir) throws Exception {
        Path cfg = dir.resolve("pp2.yaml");
        Files.writeString(cfg, String.join("\n",
                "training_config: {batch_size: 8, max_steps: 60, learning_rate: 0.003, runs_dir: " + dir.resolve("runs")
                        + ", model_save_interval: 10, max_restarts: 1}",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 4, max_sequence_length: 16}",
                "telemetry: {port: 0}",
                "multihost_config:",
                "  enabled: true",
                "  socket_type: aeron",
                "  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: {0: 2, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
                "rank_bindings:",
                "  - {rank: 0, mesh_id: 0, host: \"127.0.0.1\", control_port: 27710, data_port: 27810}",
                "  - {rank: 1, mesh_id: 1, host: \"127.0.0.1\", control_port: 27711, data_port: 27812}", ""));
        Launcher l = new Launcher(cfg, List.of("--run-dir", dir.resolve("run").toString()),
                Deployment.of(ConfigLoader.load(cfg)), new PrintStream(PrintStream.nullOutputStream()),
                new PrintStream(PrintStream.nullOutputStream()));
        Path out0 = dir.resolve("rank0.log");
        Process rank0 = new ProcessBuilder(l.workerCommand(0)).redirectErrorStream(true).redirectOutput(out0.toFile()).start();
        Process rank1 = new ProcessBuilder(l.workerCommand(1)).redirectErrorStream(true).redirectOutput(dir.resolve("rank1.log").toFile())
                .start();
        Process again = null;
        try {
            NetworkFaultTest.waitForSteps(dir.resolve("run/metrics.jsonl"), 25, new NetworkLab.Job(rank0, rank1, out0, out0));
            rank1.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            again = new ProcessBuilder(l.workerCommand(1)).redirectErrorStream(true).redirectOutput(dir.resolve("rank1-again.log")
                    .toFile()).start();
            assertTrue(rank0.waitFor(180, TimeUnit.SECONDS), Files.readString(out0));
            String log = Files.readString(out0);
            assertEquals(0, rank0.exitValue(), log);
            assertTrue(log.contains("rank 1 (127.0.0.1:27711) became unreachable"), log);
            assertTrue(log.contains("recovering (1 of 1, training_config.max_restarts)"), log);
            String joined = log.replace("\n  ", " ");                 // wrapped lines joined
            // the restarted worker's links are checked again before the job goes on
            int recovering = joined.indexOf("recovering (1 of 1"), checked = joined.indexOf("; the slowest latency", recovering);
            assertTrue(checked > recovering && checked < joined.indexOf("recovered in", recovering), log);
            assertTrue(joined.contains("back at the checkpoint of step 20"), log);
            assertTrue(again.waitFor(30, TimeUnit.SECONDS) && again.exitValue() == 0, Files.readString(dir.resolve("rank1-again.log")));
            assertTrue(Files.isDirectory(dir.resolve("run/checkpoints/step-000060")));
        } finally {
            rank0.destroyForcibly();
            rank1.destroyForcibly();
            if (again != null) again.destroyForcibly();
        }
    }
}

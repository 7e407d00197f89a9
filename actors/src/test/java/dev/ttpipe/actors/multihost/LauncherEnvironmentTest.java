package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.config.ConfigLoader;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The environment `ttpipe launch` starts each worker process with, as tt-run does: global_env for
 * every rank, the rank's env_overrides over it, TT_MESH_GRAPH_DESC_PATH from mesh_graph_desc_path,
 * and the mesh ids of the rank's binding. A process started from the launcher's process builder for a
 * rank (its command swapped for a shell that prints the variables) sees them.
 */
class LauncherEnvironmentTest {
    @Test
    void eachWorkerProcessStartsWithGlobalEnvUnderItsOwnOverrides(@TempDir Path dir) throws Exception {
        Path mgd = Files.writeString(dir.resolve("mesh.textproto"), "mesh_descriptors { name: \"M0\" }\n");
        Path cfg = Files.writeString(dir.resolve("pp2.yaml"), String.join("\n",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 2, max_sequence_length: 16}",
                "multihost_config:",
                "  enabled: true",
                "  socket_type: aeron",
                "  pipeline_parallel_config: {blocks_per_rank: {0: 1, 1: 1}}",
                "global_env: {TTPIPE_TEST_GLOBAL: \"for every rank\", SHARED: \"global\"}",
                "mesh_graph_desc_path: mesh.textproto",
                "rank_bindings:",
                "  - {rank: 0, mesh_id: 0, control_port: 27900, data_port: 27910}",
                "  - {rank: 1, mesh_id: 5, control_port: 27901, data_port: 27912, env_overrides: {SHARED: \"rank 1's\"}}", ""));
        Deployment d = Deployment.of(ConfigLoader.load(cfg));
        assertEquals(Map.of("TTPIPE_TEST_GLOBAL", "for every rank", "SHARED", "global", "TT_MESH_GRAPH_DESC_PATH", mgd.toString()),
                d.rank(0).env());
        Launcher launcher = new Launcher(cfg, List.of(), d, new PrintStream(PrintStream.nullOutputStream()),
                new PrintStream(PrintStream.nullOutputStream()));
        assertTrue(launcher.processBuilder(1).command().contains("worker"), "the builder starts a worker");
        for (int rank = 0; rank < 2; rank++) {
            ProcessBuilder pb = launcher.processBuilder(rank);
            pb.command("sh", "-c", "printf '%s|%s|%s|%s' \"$TTPIPE_TEST_GLOBAL\" \"$SHARED\" \"$TT_MESH_GRAPH_DESC_PATH\" \"$TT_MESH_ID\"");
            pb.redirectErrorStream(true);
            Process p = pb.start();
            String seen = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(p.waitFor(10, TimeUnit.SECONDS));
            String shared = rank == 0 ? "global" : "rank 1's";
            assertEquals("for every rank|" + shared + "|" + mgd + "|" + (rank == 0 ? 0 : 5), seen, "rank " + rank);
        }
    }
}

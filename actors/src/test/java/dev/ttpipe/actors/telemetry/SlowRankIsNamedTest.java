package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.cli.CliTest;
import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.runtime.Faults;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A real 4-rank job (StageActors, the local transport, the cpu backend) in which rank 2's every
 * compute action sleeps 25 ms more (a slower device): /metrics, /status, {@code ttpipe top} and the
 * run's log name rank 2, and only rank 2, while the job runs. And every per-rank series carries the
 * rank's host and the ids of its submesh's devices.
 */
class SlowRankIsNamedTest {
    private static final int SLOW = 2;

    @Test
    void aSlowedRankIsNamedOnMetricsStatusTopAndInTheLog(@TempDir Path dir) throws Exception {
        int port = freePort();
        Path cfgFile = Files.writeString(dir.resolve("job.yaml"), String.join("\n",
                "training_config: {batch_size: 8, max_steps: 20, learning_rate: 0.003}",
                "transformer_config: {num_heads: 2, embedding_dim: 64, num_blocks: 8, max_sequence_length: 32}",
                "device_config: {threads: 1}",
                "multihost_config:",
                "  pipeline_parallel_config: {num_blocks: 8, blocks_per_rank: {0: 2, 1: 2, 2: 2, 3: 2}, num_microbatches: 4}",
                "telemetry: {port: " + port + "}",
                ""));
        TrainingJob job = TrainingJob.fromConfig(ConfigLoader.load(cfgFile));
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
        String url = "http://127.0.0.1:" + port;
        Path runDir = Files.createDirectories(dir.resolve("run"));
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan(), Faults.slowRank(SLOW, 25))) {
            CompletableFuture<TrainingJob.Result> run = CompletableFuture.supplyAsync(() -> {
                try {
                    return job.run(runtime, runDir, null);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
            String named = "ttpipe_rank_straggler{device=\"" + SLOW + "\",host=\"" + hostname() + "\",rank=\"" + SLOW + "\"} 1.0";
            String metrics = "";
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
            while (!metrics.contains(named) && !run.isDone() && System.nanoTime() < deadline) {
                try {
                    metrics = get(http, url + "/metrics");
                } catch (IOException notYet) {
                    // the server starts with the run
                }
                Thread.sleep(100);
            }
            assertTrue(metrics.contains(named), named + " never appeared while the job ran; last scrape:\n" + metrics);
            for (int r = 0; r < 4; r++) {
                if (r == SLOW) continue;
                String fine = "ttpipe_rank_straggler{device=\"" + r + "\",host=\"" + hostname() + "\",rank=\"" + r + "\"} 0.0";
                assertTrue(metrics.contains(fine), fine + " not in\n" + metrics);
            }
            Matcher slowdown = Pattern.compile("ttpipe_rank_slowdown\\{device=\"2\",host=\"[^\"]+\",kind=\"F\",rank=\"2\"} ([0-9.]+)")
                    .matcher(metrics);
            assertTrue(slowdown.find() && Double.parseDouble(slowdown.group(1)) >= Stragglers.Thresholds.DEFAULT.margin(), metrics);

            Map<?, ?> status = (Map<?, ?>) MiniJson.parse(get(http, url + "/status"));
            Map<?, ?> stragglers = (Map<?, ?>) status.get("stragglers");
            List<?> slow = (List<?>) stragglers.get("ranks");
            assertEquals(1, slow.size(), status.toString());
            Map<?, ?> rank2 = (Map<?, ?>) slow.get(0);
            assertEquals((long) SLOW, ((Number) rank2.get("rank")).longValue(), status.toString());
            assertTrue(((Number) rank2.get("ms")).doubleValue() > ((Number) rank2.get("planned_ms")).doubleValue(), status.toString());
            Map<?, ?> split = (Map<?, ?>) stragglers.get("blocks_per_rank");
            assertNotNull(split, status.toString());
            assertEquals(List.of(2L, 3L, 1L, 2L), split.values().stream().map(v -> ((Number) v).longValue()).toList(), split.toString());

            CliTest.Result once = CliTest.run("top", "--url", "127.0.0.1:" + port, "--once");
            assertEquals(0, once.code(), once.out() + once.err());
            String top = once.out();
            for (String line : top.split("\n")) assertTrue(line.length() <= 80, "wider than 80 columns: " + line);
            assertTrue(top.contains("\nstraggler: rank 2 runs "), top);
            assertTrue(top.matches("(?s).*\nstraggler: rank 2 runs [FBIW] \\d+\\.\\dx slower than planned: .*"), top);
            // rank 2's blocks at its pace would take longer than 3 at the others': one, the rest where the head is not
            assertTrue(top.contains("\n  suggested blocks_per_rank: {0: 2, 1: 3, 2: 1, 3: 2}\n"), top);
            assertFalse(top.matches("(?s).*straggler: rank [013] .*"), top);
            run.get(120, TimeUnit.SECONDS);
        }
        String log = Files.readString(runDir.resolve("stdout.log"));
        List<String> lines = log.lines().filter(l -> l.matches("step \\d+: rank \\d .*")).toList();
        assertFalse(lines.isEmpty(), log);
        assertTrue(lines.get(0).matches("step \\d+: rank 2 runs [FBIW] \\d+\\.\\dx slower than planned: .* vs .*"), log);
        assertEquals(1, lines.stream().filter(l -> l.contains("slower than planned")).count(), "named once, not every step:\n" + log);
        assertTrue(log.contains("\n  suggested blocks_per_rank: {0: 2, 1: 3, 2: 1, 3: 2}\n"), log);
    }

    /** A rank on a mesh of two devices: its series carry device="0,1" (rank 0) and "2,3" (rank 1), and the host. */
    @Test
    void everyPerRankSeriesCarriesTheRankHostAndDevices() throws Exception {
        JobPlan plan = JobPlan.builder(ModelSpec.gpt2(16, 16, 2, 2, 8)).ranks(2).microbatches(2).microbatchSize(1).seqLen(8)
                .rankMesh(new MeshShape(1, 2), false, true).backend(Backend.CPU).build();
        try (PipelineRuntime runtime = PipelineRuntime.start(plan);
             MetricsServer server = MetricsServer.start(runtime, "127.0.0.1", 0)) {
            HttpClient http = HttpClient.newHttpClient();
            String host = hostname();
            int perRank = 0;
            for (String line : get(http, server.url() + "/metrics").split("\n")) {
                if (!line.startsWith("ttpipe_rank_")) continue;
                perRank++;
                Matcher m = Pattern.compile("\\{device=\"([0-9,]+)\",host=\"([^\"]+)\",.*rank=\"(\\d)\"").matcher(line);
                assertTrue(m.find(), "no host and device labels: " + line);
                assertEquals(m.group(3).equals("0") ? "0,1" : "2,3", m.group(1), line);
                assertEquals(host, m.group(2), line);
            }
            assertTrue(perRank >= 2 * 7, "per-rank series: " + perRank);
            Map<?, ?> rank1 = (Map<?, ?>) ((List<?>) ((Map<?, ?>) MiniJson.parse(get(http, server.url() + "/status")))
                    .get("ranks")).get(1);
            assertEquals(List.of(2L, 3L), ((List<?>) rank1.get("devices")).stream().map(v -> ((Number) v).longValue()).toList());
            assertEquals(host, rank1.get("host"));
        }
    }

    /** The machine's name from the {@code hostname} program (gethostname), not from ttpipe. */
    private static String hostname() throws IOException, InterruptedException {
        Process p = new ProcessBuilder("hostname").redirectErrorStream(true).start();
        String name = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
        assertEquals(0, p.waitFor(), name);
        return name;
    }

    private static String get(HttpClient http, String url) throws IOException, InterruptedException {
        return http.send(HttpRequest.newBuilder(URI.create(url)).build(), HttpResponse.BodyHandlers.ofString()).body();
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }
}

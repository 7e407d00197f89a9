package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.cli.CliTest;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.HostName;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.stages.checkpoint.MiniJson;
import dev.ttpipe.transport.AeronTransport;
import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import org.agrona.concurrent.UnsafeBuffer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A real training job serves /metrics (Prometheus text, the validation loss too) and /status (every rank) while it runs. */
class MetricsServerTest {
    /** A sample line of the Prometheus text format: name, optional labels, a value. */
    private static final Pattern SAMPLE = Pattern.compile(
            "[a-zA-Z_:][a-zA-Z0-9_:]*(\\{[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\"(,[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\")*\\})? "
                    + "(-?[0-9.eE+-]+|NaN|\\+Inf|-Inf)");

    @Test
    void aRunningJobIsScrapedAndShowsEveryRank(@TempDir Path dir) throws Exception {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        Path cfgFile = Files.writeString(dir.resolve("job.yaml"), String.join("\n",
                "training_config: {batch_size: 8, max_steps: 400, learning_rate: 0.003, eval_every: 20}",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 3, max_sequence_length: 16}",
                "multihost_config:",
                "  pipeline_parallel_config: {num_blocks: 3, blocks_per_rank: {0: 1, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
                "telemetry: {port: " + port + "}",
                ""));
        TtpipeConfig cfg = ConfigLoader.load(cfgFile);
        TrainingJob job = TrainingJob.fromConfig(cfg);
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan())) {
            CompletableFuture<TrainingJob.Result> run = CompletableFuture.supplyAsync(() -> {
                try {
                    return job.run(runtime, Files.createDirectories(dir.resolve("run")), null);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
            String metrics = null;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (System.nanoTime() < deadline && !run.isDone()) {
                try {
                    HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/metrics")).build(),
                            HttpResponse.BodyHandlers.ofString());
                    if (r.statusCode() == 200 && r.body().contains("ttpipe_step ") && r.body().contains("ttpipe_val_loss ")) {
                        metrics = r.body();
                        break;
                    }
                } catch (IOException notYet) {
                    // the server starts with the run
                }
                Thread.sleep(50);
            }
            assertTrue(metrics != null, "never scraped a step while the job ran");
            for (String line : metrics.split("\n")) {
                if (line.isBlank() || line.startsWith("# HELP ") || line.startsWith("# TYPE ")) continue;
                assertTrue(SAMPLE.matcher(line).matches(), "not Prometheus text: " + line);
            }
            String rank0 = "device=\"0\",host=\"" + HostName.get() + "\",", rank1 = "device=\"1\",host=\"" + HostName.get() + "\",";
            for (String name : List.of("ttpipe_rank_up{" + rank1 + "rank=\"1\"} 1", "ttpipe_rank_actions_total{" + rank0 + "kind=\"F\",rank=\"0\"}",
                    "ttpipe_rank_bubble_ratio{" + rank1 + "rank=\"1\"}", "ttpipe_rank_sent_bytes{" + rank0 + "peer=\"1\",rank=\"0\"}",
                    "ttpipe_rank_device_memory_bytes{" + rank0 + "rank=\"0\"}", "ttpipe_rank_straggler{" + rank1 + "rank=\"1\"} 0",
                    "ttpipe_loss ", "ttpipe_tokens_per_second ",
                    "ttpipe_learning_rate ", "ttpipe_grad_norm ", "# TYPE ttpipe_rank_actions_total counter",
                    "# HELP ttpipe_val_loss Validation loss at the last evaluation", "ttpipe_val_loss_step ")) {
                assertTrue(metrics.contains(name), name + " not in\n" + metrics);
            }
            HttpResponse<String> status = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/status")).build(),
                    HttpResponse.BodyHandlers.ofString());
            Map<?, ?> s = (Map<?, ?>) MiniJson.parse(status.body());
            assertTrue(s.get("val_loss") instanceof Number && ((Number) s.get("val_step")).intValue() % 20 == 0, status.body());
            List<?> ranks = (List<?>) s.get("ranks");
            assertEquals(2, ranks.size(), status.body());
            for (Object o : ranks) {
                Map<?, ?> r = (Map<?, ?>) o;
                assertEquals(Boolean.TRUE, r.get("up"), status.body());
                assertTrue(r.containsKey("running") && r.containsKey("waiting_for") && r.containsKey("row_position"), status.body());
            }
            // ttpipe top --once: one snapshot with every rank's current action, at 80 columns
            CliTest.Result once = CliTest.run("top", "--url", "127.0.0.1:" + port, "--once");
            String top = once.out();
            assertEquals(0, once.code(), top + once.err());
            String[] lines = top.split("\n");
            assertEquals("ttpipe top http://127.0.0.1:" + port, lines[0], top);
            assertTrue(lines[1].startsWith("step ") && lines[1].contains(" tok/s | bubble "), top);
            assertTrue(lines[1].matches(".* \\| val \\d+\\.\\d{4} @\\d+0 \\|.*"), "the validation loss in top: " + top);
            for (String line : lines) assertTrue(line.length() <= 80, "wider than 80 columns: " + line);
            for (int r = 0; r < 2; r++) {
                Pattern row = Pattern.compile("(?m)^" + r + " +(\\d[A-Z_]+\\d* (running|waiting) |idle).*");
                assertTrue(row.matcher(top).find(), "rank " + r + " without its action:\n" + top);
            }
            // ttpipe top --once --json: the /status object itself, one line that parses, every rank in it
            CliTest.Result asJson = CliTest.run("top", "--url", "127.0.0.1:" + port, "--once", "--json");
            String json = asJson.out();
            assertEquals(0, asJson.code(), json + asJson.err());
            assertEquals(1, json.strip().lines().count(), json);
            Map<?, ?> snapshot = (Map<?, ?>) MiniJson.parse(json.strip());
            assertEquals(2, ((List<?>) snapshot.get("ranks")).size(), json);
            assertEquals(s.keySet(), snapshot.keySet(), json);
            run.get(120, TimeUnit.SECONDS);
        }
        String record = Files.readString(dir.resolve("run/run.json"));
        assertTrue(record.contains("\"telemetry_url\": \"http://127.0.0.1:" + port + "\""), record);
    }

    /**
     * Bytes that are no ttpipe frame, published on rank 1's Aeron stream by a stranger, are dropped and
     * counted: /metrics has ttpipe_rank_frames_dropped_total for every rank and reason, rank 1's corrupt
     * count is 1 and the others 0; /status has the counts and top names them.
     */
    @Test
    void framesDroppedByTheTransportAreCountedPerRankAndReason(@TempDir Path dir) throws Exception {
        Path cfgFile = Files.writeString(dir.resolve("job.yaml"), String.join("\n",
                "training_config: {batch_size: 8, max_steps: 4}",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 2, max_sequence_length: 16}",
                "multihost_config:",
                "  socket_type: aeron",
                "  pipeline_parallel_config: {num_blocks: 2, blocks_per_rank: {0: 1, 1: 1}, num_microbatches: 2}",
                ""));
        TrainingJob job = TrainingJob.fromConfig(ConfigLoader.load(cfgFile));
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan());
             MetricsServer server = MetricsServer.start(runtime, "127.0.0.1", 0);
             Aeron stranger = Aeron.connect(new Aeron.Context().aeronDirectoryName(
                     ((AeronTransport) runtime.transport()).aeronDirectory().toString()));
             ExclusivePublication pub = stranger.addExclusivePublication("aeron:ipc?session-id=1", 10_001)) {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (!pub.isConnected() && System.nanoTime() < deadline) Thread.sleep(10);
            assertTrue(pub.isConnected(), "no subscription for rank 1");
            UnsafeBuffer garbage = new UnsafeBuffer(new byte[300]);
            while (pub.offer(garbage, 0, 300) < 0) Thread.sleep(1);
            String host = HostName.get();
            String line = "ttpipe_rank_frames_dropped_total{device=\"1\",host=\"" + host + "\",rank=\"1\",reason=\"corrupt\"} 1.0";
            String metrics = "";
            while (!metrics.contains(line) && System.nanoTime() < deadline + TimeUnit.SECONDS.toNanos(10)) {
                metrics = http.send(HttpRequest.newBuilder(URI.create(server.url() + "/metrics")).build(),
                        HttpResponse.BodyHandlers.ofString()).body();
                Thread.sleep(50);
            }
            assertTrue(metrics.contains(line), line + " not in\n" + metrics);
            assertTrue(metrics.contains("# TYPE ttpipe_rank_frames_dropped_total counter"), metrics);
            for (String rank : List.of("0", "1")) {
                for (String reason : List.of("foreign_job", "wrong_peer", "corrupt", "no_room")) {
                    if (rank.equals("1") && reason.equals("corrupt")) continue;
                    String zero = "ttpipe_rank_frames_dropped_total{device=\"" + rank + "\",host=\"" + host + "\",rank=\"" + rank
                            + "\",reason=\"" + reason + "\"} 0.0";
                    assertTrue(metrics.contains(zero), zero + " not in\n" + metrics);
                }
            }
            String status = http.send(HttpRequest.newBuilder(URI.create(server.url() + "/status")).build(),
                    HttpResponse.BodyHandlers.ofString()).body();
            Map<?, ?> rank1 = (Map<?, ?>) ((List<?>) ((Map<?, ?>) MiniJson.parse(status)).get("ranks")).get(1);
            assertEquals(Map.of("foreign_job", 0L, "wrong_peer", 0L, "corrupt", 1L, "no_room", 0L),
                    normalize((Map<?, ?>) rank1.get("frames_dropped")), status);
            String top = new TopView().render(server.url(), (Map<?, ?>) MiniJson.parse(status), 80);
            assertTrue(top.contains("\nframes dropped: rank 1: 1 corrupt\n"), top);
        }
    }

    private static Map<String, Long> normalize(Map<?, ?> m) {
        Map<String, Long> out = new HashMap<>();
        m.forEach((k, v) -> out.put((String) k, ((Number) v).longValue()));
        return out;
    }
}

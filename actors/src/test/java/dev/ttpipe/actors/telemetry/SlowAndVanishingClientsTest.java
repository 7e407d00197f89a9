package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.runtime.HostName;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.TrainingJob;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The telemetry endpoint under hostile local clients: clients that send one byte and stall do not block /metrics or
 * /status for the others, and clients that go away early print nothing into the job's console.
 */
class SlowAndVanishingClientsTest {
    private static final String JOB = String.join("\n",
            "training_config: {batch_size: 8, max_steps: 2, learning_rate: 0.003}",
            "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 2, max_sequence_length: 16}",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 2, blocks_per_rank: {0: 1, 1: 1}, num_microbatches: 2, schedule: 1f1b}",
            "");

    @Test
    void clientsThatSendOneByteAndStallDoNotBlockMetricsOrStatus(@TempDir Path dir) throws Exception {
        TrainingJob job = TrainingJob.fromConfig(ConfigLoader.load(Files.writeString(dir.resolve("job.yaml"), JOB)));
        HttpClient http = HttpClient.newHttpClient();
        List<Socket> stalled = new ArrayList<>();
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan());
             MetricsServer server = MetricsServer.start(runtime, "127.0.0.1", 0)) {
            for (int i = 0; i < HttpEndpoint.THREADS - 1; i++) {    // all the pool's threads but one, each held by a stalled client
                Socket s = new Socket("127.0.0.1", URI.create(server.url()).getPort());
                s.getOutputStream().write('G');
                s.getOutputStream().flush();
                stalled.add(s);
            }
            // answered while the stalled clients still hold their connections (well before the server's read timeout)
            for (String path : List.of("/metrics", "/status", "/metrics")) {
                HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(server.url() + path))
                        .timeout(HttpEndpoint.READ_TIMEOUT.dividedBy(2)).build(), HttpResponse.BodyHandlers.ofString());
                assertEquals(200, r.statusCode(), path);
                assertTrue(r.body().contains(path.equals("/metrics") ? "ttpipe_rank_up{device=\"1\",host=\"" + HostName.get() + "\",rank=\"1\"} 1" : "\"rank\":1,\"up\":true"),
                        r.body());
            }
        } finally {
            for (Socket s : stalled) s.close();
        }
    }

    @Test
    void clientsThatGoAwayEarlyPrintNothing() throws Exception {
        byte[] big = new byte[8 << 20];      // larger than any socket buffer: writing it to a vanished client fails
        PrintStream oldOut = System.out, oldErr = System.err;
        ByteArrayOutputStream console = new ByteArrayOutputStream();
        try (HttpEndpoint endpoint = HttpEndpoint.start("127.0.0.1", 0,
                Map.of("/big", ex -> ex.send(200, "application/octet-stream", big)))) {
            System.setOut(new PrintStream(console, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(console, true, StandardCharsets.UTF_8));
            InetSocketAddress at = endpoint.address();
            List<String> requests = List.of("", "GET /bi", "GET /big HTTP/1.1\r\nHost: x\r\n\r\n", "GET /big HTTP/1.1\r\n\r\n");
            for (int i = 0; i < requests.size(); i++) {
                try (Socket s = new Socket(at.getAddress(), at.getPort())) {
                    OutputStream o = s.getOutputStream();
                    o.write(requests.get(i).getBytes(StandardCharsets.US_ASCII));
                    o.flush();
                    if (i == 2) s.getInputStream().read(new byte[100]);     // reads the start of the answer, then goes
                    if (i == 3) s.setSoLinger(true, 0);                     // closes with a reset
                }
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (endpoint.finished() < requests.size() && System.nanoTime() < deadline) Thread.sleep(10);
            assertEquals(requests.size(), endpoint.finished(), "exchanges over");
        } finally {
            System.setOut(oldOut);
            System.setErr(oldErr);
        }
        assertEquals("", console.toString(StandardCharsets.UTF_8));
    }
}

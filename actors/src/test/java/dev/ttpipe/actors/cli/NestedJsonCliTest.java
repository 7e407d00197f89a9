package dev.ttpipe.actors.cli;

import com.sun.net.httpserver.HttpServer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

import static dev.ttpipe.actors.cli.CliTest.HF_GPT2;
import static dev.ttpipe.actors.cli.CliTest.assertOneLineBadInput;
import static dev.ttpipe.actors.cli.CliTest.evalData;
import static dev.ttpipe.actors.cli.CliTest.hfModel;
import static dev.ttpipe.actors.cli.CliTest.run;

/**
 * Every JSON the commands read, nested 100,000 deep, is one line naming the file (or address) and the limit, exit 2:
 * an HF config.json and tokenizer.json (eval), trainer_state.json (export, eval), a run's metrics.jsonl, run.json
 * and trace.json (report, simulate, tune) and a /status reply (top). No StackOverflowError reaches the user.
 */
class NestedJsonCliTest {
    static final String NESTED = "[".repeat(100_000) + "]".repeat(100_000);
    static final String LIMIT = "nested deeper than the limit of 512 levels at offset";

    @TempDir
    Path dir;

    @Test
    void evalOfAModelWhoseConfigJsonIsNested() throws Exception {
        Path model = hfModel(dir, NESTED);
        assertOneLineBadInput(run("eval", model.toString(), "--data", evalData(dir)),
                model.resolve("config.json") + ": cannot be read (" + LIMIT + " 512)");
    }

    @Test
    void evalOfAModelWhoseTokenizerJsonIsNested() throws Exception {
        Path model = hfModel(dir, HF_GPT2);
        Files.writeString(model.resolve("tokenizer.json"), "{\"model\":" + NESTED + "}");
        assertOneLineBadInput(run("eval", model.toString(), "--data", evalData(dir)),
                model.resolve("tokenizer.json") + ": cannot be read (" + LIMIT);
    }

    @Test
    void exportAndEvalOfACheckpointWhoseTrainerStateIsNested() throws Exception {
        Path ckpt = Files.createDirectories(dir.resolve("step-000002"));
        Files.writeString(ckpt.resolve("trainer_state.json"), "{\"step\":" + NESTED + "}");
        String expected = ckpt.resolve("trainer_state.json") + ": cannot be read (" + LIMIT;
        assertOneLineBadInput(run("export", ckpt.toString(), "--out", dir.resolve("out").toString()), expected);
        assertOneLineBadInput(run("eval", ckpt.toString(), "--data", evalData(dir)), expected);
    }

    @Test
    void reportOfARunWhoseFilesAreNested() throws Exception {
        Path runDir = Files.createDirectories(dir.resolve("run"));
        Files.writeString(runDir.resolve("metrics.jsonl"), "{\"step\":1,\"loss\":4.0}\n" + NESTED + "\n");
        assertOneLineBadInput(run("report", runDir.toString()), runDir.resolve("metrics.jsonl") + ":2: not valid JSON (" + LIMIT);
        Files.writeString(runDir.resolve("metrics.jsonl"), "{\"step\":1,\"loss\":4.0}\n");
        Files.writeString(runDir.resolve("run.json"), NESTED);
        assertOneLineBadInput(run("report", runDir.toString()), runDir.resolve("run.json") + ": not valid JSON (" + LIMIT);
        Files.delete(runDir.resolve("run.json"));
        Files.writeString(runDir.resolve("trace.json"), "{\"traceEvents\":" + NESTED + "}");
        assertOneLineBadInput(run("report", runDir.toString()), runDir.resolve("trace.json") + ": not valid JSON (" + LIMIT);
    }

    @Test
    void simulateAndTuneFromARunWhoseMetricsAreNested() throws Exception {
        Path runDir = Files.createDirectories(dir.resolve("run"));
        Files.writeString(runDir.resolve("metrics.jsonl"), NESTED + "\n");
        Path cfg = Files.writeString(runDir.resolve("config.yaml"), CliTest.SMALL.replace("RUNS", dir.resolve("runs").toString()));
        assertOneLineBadInput(run("simulate", "--costs-from", runDir.toString()), runDir.resolve("metrics.jsonl") + ":1: not JSON (" + LIMIT);
        assertOneLineBadInput(run("tune", cfg.toString(), "--costs-from", runDir.toString()),
                "--costs-from: " + runDir.resolve("metrics.jsonl") + " cannot be read (" + LIMIT);
    }

    @Test
    void topOfAnEndpointWhoseStatusIsNested() throws Exception {
        HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        server.createContext("/status", ex -> {
            byte[] body = NESTED.getBytes(StandardCharsets.US_ASCII);
            ex.sendResponseHeaders(200, body.length);
            ex.getResponseBody().write(body);
            ex.close();
        });
        server.start();
        try {
            String url = "127.0.0.1:" + server.getAddress().getPort();
            assertOneLineBadInput(run("top", "--url", url, "--once"), "http://" + url + "/status: the reply is not valid JSON (" + LIMIT);
        } finally {
            server.stop(0);
        }
    }
}

package dev.ttpipe.actors.cli;

import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A worker process slowed for real, from outside, as {@code cpulimit} would: once the job is past its
 * warm-up, rank 1's JVM is stopped (SIGSTOP) for most of every few milliseconds and let go on
 * (SIGCONT) for the rest, so its actions take several times as long as its peers' while nothing in
 * ttpipe knows. Rank 0 names it: a line in its log with the suggested split,
 * {@code ttpipe_rank_straggler{rank="1"} 1} on its /metrics, and its /status. Let go again, the job
 * ends with exit 0. On a machine that other jobs load, other ranks may be named for a few steps too
 * (the default margin, 1.5x, is well within such noise at times); what is asserted is rank 1.
 */
class SlowedWorkerProcessTest {
    private static final int SLOW = 1;
    private static final int BASE_PORT = 26800, TELEMETRY_PORT = 26890;
    /** Of every period, stopped for this long and running for the rest: at most a fifth of the CPU. */
    private static final double STOPPED_S = 0.008, RUNNING_S = 0.002;

    @Test
    void aWorkerProcessHeldToAFifthOfTheCpuIsNamedAStraggler(@TempDir Path dir) throws Exception {
        Assumptions.assumeTrue(Files.isExecutable(Path.of("/usr/bin/perl")), "no /usr/bin/perl to stop and continue the worker");
        Path cfg = MultiProcessTest.write(dir, "pp3.yaml", MultiProcessTest.config(3, BASE_PORT, "{0: 2, 1: 2, 2: 2}")
                .replace("embedding_dim: 16, num_blocks: 4, max_sequence_length: 16", "embedding_dim: 192, num_blocks: 6,"
                        + " max_sequence_length: 64")
                .replace("num_blocks: 4, blocks_per_rank", "num_blocks: 6, blocks_per_rank")
                .replace("max_steps: 400", "max_steps: 40")
                .replace("  socket_type: aeron", "  socket_type: aeron\n  link_check_bytes: 256KiB\n  link_check_timeout_s: 20")
                + "telemetry: {port: " + TELEMETRY_PORT + ", straggler_warmup_steps: 3}\n");
        Path run = dir.resolve("run");
        CompletableFuture<CliTest.Result> job = CompletableFuture.supplyAsync(() -> CliTest.run("launch", cfg.toString(),
                "--run-dir", run.toString()));
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
        String metrics = "", status = "", top = "";
        Pattern named = Pattern.compile("(?m)^ttpipe_rank_straggler\\{[^}]*rank=\"" + SLOW + "\"[^}]*} 1\\.0$");
        long t0 = System.nanoTime();
        long slowedAt = 0, namedAt = 0;
        ProcessHandle worker = awaitWorkerPastWarmUp(run.resolve("metrics.jsonl"), job);
        Process dutyCycle = stopAndContinue(worker.pid());
        try {
            slowedAt = System.nanoTime();
            long deadline = slowedAt + TimeUnit.SECONDS.toNanos(60);
            while (!named.matcher(metrics).find() && !job.isDone() && System.nanoTime() < deadline) {
                try {
                    metrics = get(http, "http://127.0.0.1:" + TELEMETRY_PORT + "/metrics");
                } catch (IOException notYet) {
                    // a scrape that failed: the next one
                }
                Thread.sleep(200);
            }
            namedAt = System.nanoTime();
            if (named.matcher(metrics).find()) {
                status = get(http, "http://127.0.0.1:" + TELEMETRY_PORT + "/status");
                // ttpipe top in a process of its own (CliTest.run is busy with the launch), while rank 1 is still held; a
                // snapshot between two namings (noise can clear it for a few steps) is taken again
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                do {
                    Process once = TtpipeProcesses.start(dir, "top", Map.of(), List.of("top", "--url",
                            "127.0.0.1:" + TELEMETRY_PORT, "--once"));
                    assertTrue(once.waitFor(60, TimeUnit.SECONDS), "top --once did not end within 60 s");
                    top = TtpipeProcesses.log(dir, "top") + top;
                } while (!CliTest.joined(top).contains("straggler: rank " + SLOW + " runs ") && !job.isDone()
                        && System.nanoTime() < until);
            }
        } finally {
            letGo(dutyCycle, worker.pid());
        }
        CliTest.Result r = job.get(120, TimeUnit.SECONDS);
        String log = Files.readString(run.resolve("stdout.log"));
        String timing = String.format("slowed %.1f s after the start, named %.1f s later; ", (slowedAt - t0) / 1e9,
                (namedAt - slowedAt) / 1e9);
        assertTrue(named.matcher(metrics).find(), timing + "rank " + SLOW + " never named on /metrics; last scrape:\n" + metrics
                + "\nlog:\n" + log);
        assertEquals(0, r.code(), r.out() + r.err());
        Map<?, ?> stragglers = (Map<?, ?>) ((Map<?, ?>) MiniJson.parse(status)).get("stragglers");
        assertTrue(((List<?>) stragglers.get("ranks")).stream().anyMatch(m -> ((Number) ((Map<?, ?>) m).get("rank")).intValue()
                == SLOW), "/status names rank " + SLOW + ": " + stragglers);
        assertTrue(CliTest.joined(top).contains("straggler: rank " + SLOW + " runs "), "top names rank " + SLOW + ":\n" + top
                + "\nthe job's straggler lines:\n" + String.join("\n", log.lines().filter(l -> l.contains("slower")
                || l.contains("keeps up") || l.startsWith("step ")).toList()));
        for (String line : top.split("\n")) assertTrue(line.length() <= 80, "top wider than 80 columns: " + line);
        // the first time it is named (on a machine that other jobs load, a rank can be named for a while later too)
        List<String> lines = log.lines().filter(l -> l.matches("step \\d+: rank " + SLOW + " runs .*")).toList();
        assertTrue(!lines.isEmpty(), "rank " + SLOW + " named in the log:\n" + log);
        assertTrue(lines.get(0).matches("step \\d+: rank " + SLOW + " runs [FBIW] \\d+\\.\\dx slower than planned: \\S+ [mu]s vs \\S+ [mu]s"),
                lines.get(0));
        String after = log.substring(log.indexOf(lines.get(0)) + lines.get(0).length());
        assertTrue(after.matches("(?s)\n  suggested blocks_per_rank: \\{0: \\d, 1: 1, 2: \\d}\n.*"),
                "the suggested split below, rank 1 at its pace with one block:\n" + log);
        assertTrue(r.out().contains("[rank 0] " + lines.get(0)), "rank 0's output names it:\n" + r.out());
        MultiProcessTest.assertNoLeftovers();
    }

    /** Rank {@link #SLOW}'s worker process, once rank 0 has written its 4th step (past the 3 warm-up steps). */
    private static ProcessHandle awaitWorkerPastWarmUp(Path metrics, CompletableFuture<CliTest.Result> job) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
        while (System.nanoTime() < deadline && !job.isDone()) {
            if (Files.isRegularFile(metrics) && Files.readAllLines(metrics).size() >= 4) {
                var worker = ProcessHandle.current().descendants()
                        .filter(p -> MultiProcessTest.cmdline(p).contains("--rank " + SLOW + " ")).findFirst();
                if (worker.isPresent()) return worker.get();
            }
            Thread.sleep(50);
        }
        ProcessHandle.current().descendants().forEach(ProcessHandle::destroyForcibly);
        CliTest.Result r = job.get(30, TimeUnit.SECONDS);
        throw new AssertionError("the job never got past 4 steps with rank " + SLOW + "'s worker running:\n" + r.out() + r.err());
    }

    /**
     * A process that stops {@code pid} for {@link #STOPPED_S} and lets it run for {@link #RUNNING_S}, over
     * and over, until it is sent SIGTERM (it then lets the process run) or the process is gone.
     */
    private static Process stopAndContinue(long pid) throws IOException {
        String script = "my ($p, $stop, $run) = @ARGV;"
                + " $SIG{TERM} = $SIG{INT} = sub { kill 'CONT', $p; exit 0 };"
                + " while (kill 0, $p) { kill 'STOP', $p; select(undef, undef, undef, $stop);"
                + " kill 'CONT', $p; select(undef, undef, undef, $run); }";
        return new ProcessBuilder("/usr/bin/perl", "-e", script, Long.toString(pid), Double.toString(STOPPED_S),
                Double.toString(RUNNING_S)).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
    }

    /** Ends the duty cycle and makes sure the worker runs again (a cycle killed between STOP and CONT left it stopped). */
    private static void letGo(Process dutyCycle, long pid) throws Exception {
        dutyCycle.destroy();
        if (!dutyCycle.waitFor(10, TimeUnit.SECONDS)) dutyCycle.destroyForcibly().waitFor();
        new ProcessBuilder("kill", "-CONT", Long.toString(pid)).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.DISCARD).start().waitFor();
    }

    private static String get(HttpClient http, String url) throws IOException, InterruptedException {
        return http.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(5)).build(),
                HttpResponse.BodyHandlers.ofString()).body();
    }
}

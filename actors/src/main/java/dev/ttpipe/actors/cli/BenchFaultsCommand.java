package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.multihost.Launcher;
import dev.ttpipe.actors.runtime.PipelineFailure;
import dev.ttpipe.actors.runtime.Faults;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.transport.TensorKind;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

/**
 * {@code ttpipe bench faults}: how long a fault takes to stop a job. A corrupt frame: a bit flipped in
 * one activation on the Aeron ipc link between two in-process ranks, timed from its send to the failed
 * step (the receiver's CRC32C check). A killed worker: rank 1 of a two-process {@code ttpipe launch}
 * (loopback, max_restarts 0) killed with SIGKILL after a few steps, timed from the kill until the
 * launch returns. Medians over {@code --rounds}; figures only, never pass/fail (the tests check that a
 * fault stops the job and what it says, not how fast).
 */
@Command(name = "faults",
        mixinStandardHelpOptions = true,
        description = {"Measure how long a fault takes to stop a job: a corrupt frame between two in-process ranks (from its"
                + " send to the failed step), a worker process killed with SIGKILL (from the kill to the launch's exit);"
                + " medians over the rounds."},
        footer = {"", "Examples:",
                "  ttpipe bench faults",
                "  ttpipe bench faults --faults corrupt-frame --rounds 5 --json"})
public final class BenchFaultsCommand implements Callable<Integer> {
    static final List<String> FAULTS = List.of("corrupt-frame", "killed-worker");
    /** Steps rank 0 finishes before rank 1 is killed. */
    static final int STEPS_BEFORE_KILL = 3;

    @Option(names = "--faults", paramLabel = "LIST", split = ",", defaultValue = "corrupt-frame,killed-worker",
            description = "Which faults: corrupt-frame, killed-worker (default ${DEFAULT-VALUE}).")
    List<String> faults;

    @Option(names = "--rounds", paramLabel = "R", defaultValue = "3", description = "Rounds of each fault, 1 or more (default ${DEFAULT-VALUE}).")
    int rounds;

    @Option(names = "--base-port", paramLabel = "PORT", defaultValue = "27900",
            description = "The killed-worker job's first control port; it uses PORT, PORT+1, PORT+100 and PORT+102 on 127.0.0.1"
                    + " (default ${DEFAULT-VALUE}).")
    int basePort;

    @Option(names = "--json", description = "Print one JSON object instead of text.")
    boolean json;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        Set<String> which = new LinkedHashSet<>();
        for (String f : faults) {
            String k = f.strip().toLowerCase(Locale.ROOT);
            if (!FAULTS.contains(k)) throw new UserInputException("--faults: '" + f + "' given, expected some of " + String.join(", ", FAULTS));
            which.add(k);
        }
        if (rounds < 1) throw new UserInputException("--rounds: " + rounds + " given, expected 1 or more");
        if (basePort < 1024 || basePort > 65535 - 102) {
            throw new UserInputException("--base-port: " + basePort + " given, expected 1024.." + (65535 - 102));
        }
        PrintWriter out = spec.commandLine().getOut();
        PrintWriter err = spec.commandLine().getErr();
        List<Double> corrupt = new ArrayList<>(), killed = new ArrayList<>();
        Path dir = Files.createTempDirectory("ttpipe-bench-faults-");
        try {
            for (int round = 0; round < rounds; round++) {
                if (which.contains("corrupt-frame")) {
                    progress(err, "round %d of %d: a corrupt frame between two in-process ranks...", round + 1, rounds);
                    corrupt.add(corruptFrame(Files.createDirectories(dir.resolve("corrupt-" + round))));
                }
                if (which.contains("killed-worker")) {
                    progress(err, "round %d of %d: a worker process killed mid-run...", round + 1, rounds);
                    killed.add(killedWorker(Files.createDirectories(dir.resolve("killed-" + round))));
                }
            }
        } finally {
            deleteTree(dir);
        }
        double c = BenchTelemetryCommand.median(corrupt), k = BenchTelemetryCommand.median(killed);
        if (json) {
            StringBuilder j = new StringBuilder("{\"rounds\":").append(rounds);
            if (!corrupt.isEmpty()) {
                j.append(",\"corrupt_frame_seconds\":").append(Json.nums(toArray(corrupt)))
                        .append(",\"corrupt_frame_median_seconds\":").append(Json.num(c));
            }
            if (!killed.isEmpty()) {
                j.append(",\"killed_worker_seconds\":").append(Json.nums(toArray(killed)))
                        .append(",\"killed_worker_median_seconds\":").append(Json.num(k));
            }
            out.println(j.append('}'));
        } else {
            out.printf(Locale.ROOT, "bench faults: how long a fault takes to stop a job, %d round%s each, medians (min..max)%n", rounds,
                    rounds == 1 ? "" : "s");
            if (!corrupt.isEmpty()) {
                out.printf(Locale.ROOT, "  corrupt frame, 2 ranks in process over aeron:ipc: the step fails %.1f ms after the frame is sent"
                        + " (%.1f..%.1f ms)%n", 1e3 * c, 1e3 * min(corrupt), 1e3 * max(corrupt));
            }
            if (!killed.isEmpty()) {
                out.printf(Locale.ROOT, "  worker killed (SIGKILL), 2 worker processes on loopback, max_restarts 0: the launch exits %.2f s"
                        + " after the kill (%.2f..%.2f s)%n", k, min(killed), max(killed));
            }
        }
        out.flush();
        return Main.EXIT_OK;
    }

    private void progress(PrintWriter err, String format, Object... args) {
        if (json) return;
        err.printf(Locale.ROOT, format + "%n", args);
        err.flush();
    }

    /** Seconds from the send of a corrupted activation frame (step 3, microbatch 1, rank 0 to 1) to the step's failure. */
    static double corruptFrame(Path dir) throws IOException {
        Path yaml = Files.writeString(dir.resolve("in-process.yaml"), String.join("\n",
                "training_config: {batch_size: 8, max_steps: 6, learning_rate: 0.003}",
                "transformer_config: {num_heads: 4, embedding_dim: 32, num_blocks: 4, max_sequence_length: 16}",
                "multihost_config:",
                "  socket_type: aeron",
                "  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: {0: 2, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
                ""));
        TrainingJob job = TrainingJob.fromConfig(ConfigLoader.load(yaml));
        AtomicLong corruptedAt = new AtomicLong();
        Faults corrupt = Faults.corruptOneFrame(h -> {
            if (h.pass() != 2 || h.microbatch() != 1 || h.kind() != TensorKind.ACTIVATION) return false;
            corruptedAt.set(System.nanoTime());
            return true;
        });
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan(), corrupt)) {
            job.run(runtime, null, null);
        } catch (PipelineFailure e) {
            long failed = System.nanoTime();
            if (corruptedAt.get() == 0 || !e.getMessage().contains("checksum mismatch")) {
                throw new IOException("the corrupt-frame run failed otherwise: " + e.getMessage(), e);
            }
            return (failed - corruptedAt.get()) / 1e9;
        }
        throw new IOException("the corrupt-frame run ended without a failure" + (corruptedAt.get() == 0 ? " (no frame was corrupted)" : ""));
    }

    /** Seconds from SIGKILL to rank 1 of a two-process launch until the launch returns. */
    double killedWorker(Path dir) throws Exception {
        StringBuilder b = new StringBuilder(String.join("\n",
                "training_config: {batch_size: 8, max_steps: 400, max_restarts: 0, learning_rate: 0.003, runs_dir: " + dir.resolve("runs") + "}",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 4, max_sequence_length: 16}",
                "multihost_config:",
                "  enabled: true",
                "  socket_type: aeron",
                "  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: {0: 2, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
                "rank_bindings:", ""));
        for (int r = 0; r < 2; r++) {
            b.append("  - {rank: ").append(r).append(", mesh_id: ").append(r).append(", host: \"127.0.0.1\", control_port: ")
                    .append(basePort + r).append(", data_port: ").append(basePort + 100 + 2 * r).append("}\n");
        }
        Path yaml = Files.writeString(dir.resolve("launch.yaml"), b.toString());
        TtpipeConfig cfg = ConfigLoader.load(yaml);
        Path runDir = dir.resolve("run");
        Path logFile = dir.resolve("launch.log");
        try (OutputStream logBytes = Files.newOutputStream(logFile);
             PrintStream log = new PrintStream(logBytes, true, StandardCharsets.UTF_8)) {
            Launcher launcher = new Launcher(yaml, List.of("--run-dir", runDir.toString()), Deployment.of(cfg), log, log);
            CompletableFuture<Integer> job = CompletableFuture.supplyAsync(() -> {
                try {
                    return launcher.runWithRestarts(2, 0, runDir);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new CompletionException(e);
                }
            });
            try {
                ProcessHandle victim = rankOnceStepped(runDir.resolve("metrics.jsonl"), 1, job, logFile);
                long kill = System.nanoTime();
                victim.destroyForcibly();
                int code = job.get(120, TimeUnit.SECONDS);
                double seconds = (System.nanoTime() - kill) / 1e9;
                if (code == Main.EXIT_OK) throw new IOException("the launch exited 0 after rank 1 was killed:\n" + tail(logFile));
                return seconds;
            } finally {
                launcher.close();
            }
        }
    }

    /** The worker process of {@code rank} once rank 0 has finished {@link #STEPS_BEFORE_KILL} steps (at most 120 s). */
    private static ProcessHandle rankOnceStepped(Path metrics, int rank, CompletableFuture<Integer> job, Path log) throws Exception {
        String marker = " worker --rank " + rank + " ";
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (System.nanoTime() < deadline) {
            if (job.isDone()) throw new IOException("the launch ended before rank " + rank + " was killed:\n" + tail(log));
            if (Files.isRegularFile(metrics) && Files.readAllLines(metrics).size() >= STEPS_BEFORE_KILL) {
                List<ProcessHandle> found = ProcessHandle.current().descendants().filter(p -> cmdline(p).contains(marker)).toList();
                if (!found.isEmpty()) return found.get(0);
            }
            Thread.sleep(20);
        }
        throw new IOException("no " + STEPS_BEFORE_KILL + " steps within 120 s:\n" + tail(log));
    }

    /** A process's command line from /proc (ProcessHandle.Info gives up on very long class paths). */
    private static String cmdline(ProcessHandle p) {
        try {
            return new String(Files.readAllBytes(Path.of("/proc", Long.toString(p.pid()), "cmdline")), StandardCharsets.UTF_8)
                    .replace('\0', ' ');
        } catch (IOException | RuntimeException e) {
            return p.info().commandLine().orElse("");
        }
    }

    private static String tail(Path log) throws IOException {
        List<String> lines = Files.readAllLines(log);
        return String.join("\n", lines.subList(Math.max(0, lines.size() - 20), lines.size()));
    }

    private static double[] toArray(List<Double> v) {
        return v.stream().mapToDouble(Double::doubleValue).toArray();
    }

    private static double min(List<Double> v) {
        return v.stream().mapToDouble(Double::doubleValue).min().orElse(Double.NaN);
    }

    private static double max(List<Double> v) {
        return v.stream().mapToDouble(Double::doubleValue).max().orElse(Double.NaN);
    }

    private static void deleteTree(Path dir) throws IOException {
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
        }
    }
}

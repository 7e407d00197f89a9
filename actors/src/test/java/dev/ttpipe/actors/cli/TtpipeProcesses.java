package dev.ttpipe.actors.cli;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** Real ttpipe processes for the tests that signal or start them as a launcher would: this JVM's java and class path. */
final class TtpipeProcesses {
    /** The variables of every launcher ttpipe reads: the test's own environment must not leak one into a child. */
    static final List<String> LAUNCHER_PREFIXES = List.of("SLURM", "OMPI_", "PMIX_", "RANK", "WORLD_SIZE", "LOCAL_RANK",
            "LOCAL_WORLD_SIZE", "MASTER_", "JOB_COMPLETION_INDEX", "JOBSET_NAME", "TTPIPE_LAUNCHED", "TTPIPE_MAX_RESTARTS",
            "TTPIPE_WORLD_SIZE", "TTPIPE_K8S_");

    private TtpipeProcesses() {
    }

    /** The command line of {@code ttpipe ARGS} in a process of its own: this JVM's java, flags and class path. */
    static List<String> command(List<String> args) {
        List<String> cmd = new ArrayList<>();
        cmd.add(ProcessHandle.current().info().command().orElse("java"));
        cmd.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments().stream()
                .filter(a -> !a.startsWith("-agentlib:jdwp") && !a.startsWith("-javaagent")).toList());
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), Main.class.getName()));
        cmd.addAll(args);
        return cmd;
    }

    /** {@code ttpipe ARGS} with {@code env} as its only launcher variables, its output in {@code dir/name.log}. */
    static Process start(Path dir, String name, Map<String, String> env, List<String> args) throws IOException {
        ProcessBuilder pb = new ProcessBuilder(command(args)).redirectErrorStream(true)
                .redirectOutput(dir.resolve(name + ".log").toFile());
        pb.environment().keySet().removeIf(k -> LAUNCHER_PREFIXES.stream().anyMatch(k::startsWith));
        pb.environment().putAll(env);
        return pb.start();
    }

    static String log(Path dir, String name) throws IOException {
        return Files.readString(dir.resolve(name + ".log"));
    }

    /** Waits until {@code metrics} holds {@code n} steps (a hang fails after {@code seconds}, naming the process's log). */
    static void awaitSteps(Path metrics, int n, Process p, Path log, int seconds) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (System.nanoTime() < deadline) {
            if (Files.isRegularFile(metrics) && Files.readAllLines(metrics).size() >= n) return;
            if (!p.isAlive()) throw new AssertionError("the process ended before step " + n + ":\n" + Files.readString(log));
            Thread.sleep(50);
        }
        throw new AssertionError("no " + n + " steps within " + seconds + " s:\n" + Files.readString(log));
    }

    /**
     * The worker process of rank {@code rank} that a launch in this JVM started, once {@code metrics} holds {@code steps}
     * steps (a hang, or a launch that ended first, fails after 90 s).
     */
    static ProcessHandle workerOnceStepped(Path metrics, int steps, int rank, Future<?> launch) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
        while (System.nanoTime() < deadline && !launch.isDone()) {
            if (Files.isRegularFile(metrics) && Files.readAllLines(metrics).size() >= steps) {
                ProcessHandle worker = ProcessHandle.current().descendants()
                        .filter(p -> MultiProcessTest.cmdline(p).contains("--rank " + rank + " ")).findFirst().orElse(null);
                if (worker != null) return worker;
            }
            Thread.sleep(20);
        }
        throw new AssertionError("rank " + rank + " never trained " + steps + " steps" + (launch.isDone() ? " (the launch ended)" : ""));
    }

    /**
     * {@code ttpipe ARGS} (its output in {@code dir/name.log}) sent {@code signal} once {@code metrics} holds
     * {@code steps} steps, as a scheduler or a terminal would; returns it ended (a hang fails after a minute or two).
     */
    static Process signalledAfter(Path dir, String name, List<String> args, Path metrics, int steps, String signal) throws Exception {
        Process p = start(dir, name, Map.of(), args);
        try {
            awaitSteps(metrics, steps, p, dir.resolve(name + ".log"), 120);
            signal(p, signal);
            assertTrue(p.waitFor(120, TimeUnit.SECONDS), "the process did not end after SIG" + signal);
            return p;
        } finally {
            p.destroyForcibly();
        }
    }

    /** Sends {@code signal} (TERM, INT) to {@code p} as a scheduler or a terminal would. */
    static void signal(Process p, String signal) throws Exception {
        signal(p.toHandle(), signal);
    }

    /** Sends {@code signal} (TERM, INT, STOP, CONT) to {@code p} with kill(1). */
    static void signal(ProcessHandle p, String signal) throws Exception {
        int code = new ProcessBuilder("kill", "-" + signal, Long.toString(p.pid())).start().waitFor();
        assertTrue(code == 0 || !p.isAlive(), "kill -" + signal + " " + p.pid() + " failed (exit code " + code + ")");
    }
}

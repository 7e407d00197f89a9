package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.ExitCodes;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * Starts, watches and cleans up the worker processes of a job on this machine ({@code ttpipe launch},
 * and {@code ttpipe verify} of a multi-process config): one {@code ttpipe worker --rank R} child per
 * rank with its rank's env_overrides, output prefixed with the rank, all stopped on Ctrl-C or when
 * one fails, and no process or Aeron directory left behind.
 */
public final class Launcher {
    /** After a worker fails, how long the others get to notice and stop by themselves. */
    static final int GRACE_SECONDS = 10;
    /** The command-line entry point the workers run. */
    static final String MAIN_CLASS = "dev.ttpipe.actors.cli.Main";

    private final Path config;
    private final List<String> extraArgs;
    private final Deployment deployment;
    private final PrintStream out, err;
    private final List<Process> children = new ArrayList<>();

    public Launcher(Path config, List<String> extraArgs, Deployment deployment, PrintStream out, PrintStream err) {
        this.config = config;
        this.extraArgs = extraArgs;
        this.deployment = deployment;
        this.out = out;
        this.err = err;
    }

    private final List<Integer> childRanks = new ArrayList<>();
    private final List<Thread> pumps = new ArrayList<>();
    private Thread hook;

    public int run(int n) throws IOException, InterruptedException {
        try {
            start(0, n);
            int exit = waitForAll();
            for (Thread t : pumps) t.join(2000);
            return exit;
        } finally {
            close();
        }
    }

    /** Starts workers for ranks {@code from..to-1}. */
    public void start(int from, int to) throws IOException {
        if (hook == null) {
            hook = new Thread(this::stopAll, "ttpipe-launch-stop");
            Runtime.getRuntime().addShutdownHook(hook);
        }
        for (int r = from; r < to; r++) {
            ProcessBuilder pb = new ProcessBuilder(workerCommand(r));
            pb.environment().putAll(deployment.rank(r).env());
            pb.environment().put("TT_MESH_ID", Integer.toString(deployment.rank(r).meshId()));
            pb.environment().put("TT_MESH_HOST_RANK", Integer.toString(deployment.rank(r).meshHostRank()));
            Process p = pb.start();
            children.add(p);
            childRanks.add(r);
            pumps.add(pump(p.getInputStream(), "[rank " + r + "] ", out));
            pumps.add(pump(p.getErrorStream(), "[rank " + r + "] ", err));
        }
    }

    /** Waits up to {@code seconds} for the workers to exit by themselves, then stops the rest and cleans up. */
    public void finish(int seconds) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        for (Process p : children) {
            long left = deadline - System.nanoTime();
            if (left > 0) p.waitFor(left, TimeUnit.NANOSECONDS);
        }
        close();
    }

    public void close() {
        stopAll();
        cleanAeronDirectories();
        if (hook != null) {
            try {
                Runtime.getRuntime().removeShutdownHook(hook);
            } catch (IllegalStateException shuttingDown) {
                // the hook is running
            }
            hook = null;
        }
    }

    /** Waits for every child; on the first failure stops the rest and returns its exit code. */
    private int waitForAll() throws InterruptedException {
        while (true) {
            boolean allDone = true;
            for (int i = 0; i < children.size(); i++) {
                Process p = children.get(i);
                int r = childRanks.get(i);
                if (p.isAlive()) {
                    allDone = false;
                    continue;
                }
                if (p.exitValue() != 0) {
                    err.println("ttpipe launch: rank " + r + " (" + deployment.rank(r).controlAddress() + ") exited with code "
                            + p.exitValue() + "; giving the other workers " + GRACE_SECONDS + " s to stop, then stopping them");
                    int code = p.exitValue() == ExitCodes.BAD_INPUT ? ExitCodes.BAD_INPUT : ExitCodes.FAILURE;
                    finish(GRACE_SECONDS);   // rank 0 notices through the cluster and ends the job with its error
                    return code;
                }
            }
            if (allDone) return ExitCodes.OK;
            Thread.sleep(100);
        }
    }

    List<String> workerCommand(int rank) {
        List<String> cmd = new ArrayList<>();
        cmd.add(ProcessHandle.current().info().command().orElse("java"));
        cmd.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments().stream()
                .filter(a -> !a.startsWith("-agentlib:jdwp")).toList());
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(MAIN_CLASS);
        cmd.add("worker");
        cmd.add("--rank");
        cmd.add(Integer.toString(rank));
        cmd.add(config.toString());
        cmd.addAll(extraArgs);
        return cmd;
    }

    private static Thread pump(InputStream in, String prefix, PrintStream to) {
        Thread t = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    synchronized (to) {
                        to.println(prefix + line.replace("\r", ""));
                    }
                }
            } catch (IOException ignored) {
                // the child went away
            }
        }, "ttpipe-launch-output");
        t.setDaemon(true);
        t.start();
        return t;
    }

    synchronized void stopAll() {
        for (Process p : children) if (p.isAlive()) p.destroy();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        for (Process p : children) {
            try {
                long left = deadline - System.nanoTime();
                if (left <= 0 || !p.waitFor(left, TimeUnit.NANOSECONDS)) p.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                p.destroyForcibly();
                Thread.currentThread().interrupt();
            }
        }
    }

    /** A worker killed with SIGKILL cannot remove its Aeron directory: do it for it. */
    private void cleanAeronDirectories() {
        for (Process p : children) {
            String prefix = "ttpipe-aeron-" + p.pid() + "-";
            for (Path base : List.of(Path.of("/dev/shm"), Path.of(System.getProperty("java.io.tmpdir")))) {
                if (!Files.isDirectory(base)) continue;
                try (Stream<Path> s = Files.list(base)) {
                    s.filter(d -> d.getFileName().toString().startsWith(prefix)).forEach(Launcher::deleteTree);
                } catch (IOException ignored) {
                    // nothing to clean
                }
            }
        }
    }

    private static void deleteTree(Path dir) {
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        } catch (IOException ignored) {
            // best effort
        }
    }
}

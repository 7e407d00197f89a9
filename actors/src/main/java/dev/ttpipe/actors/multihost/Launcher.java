package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.ExitCodes;
import dev.ttpipe.actors.telemetry.Terminal;

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
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * Starts, watches and cleans up the worker processes of a job on this machine ({@code ttpipe launch},
 * and {@code ttpipe verify} of a multi-process config): one {@code ttpipe worker --rank R} child per
 * rank with its rank's environment (global_env, then its env_overrides over it, see {@link Deployment}),
 * output prefixed with the rank, all stopped on Ctrl-C or when one fails, and no process or Aeron
 * directory left behind.
 */
public final class Launcher {
    /** After a worker fails, how long the others get to notice and stop by themselves. */
    static final int GRACE_SECONDS = 10;
    /** After a worker stopped for a preemption, how long rank 0 gets to finish its checkpoint and the others to exit. */
    static final int PREEMPTED_GRACE_SECONDS = 60;
    /** The command-line entry point the workers run. */
    static final String MAIN_CLASS = "dev.ttpipe.actors.cli.Main";
    /** Set in every worker the launcher starts: such a job can be restarted (training_config.max_restarts). */
    public static final String LAUNCHED_ENV = "TTPIPE_LAUNCHED";
    /** How many failed steps rank 0 recovers in place (the launcher restarts a dead worker meanwhile). */
    public static final String MAX_RESTARTS_ENV = "TTPIPE_MAX_RESTARTS";

    private final Path config;
    private List<String> extraArgs;
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
            children.add(spawn(r));
            childRanks.add(r);
        }
    }

    private int maxRestarts;

    private Process spawn(int r) throws IOException {
        Process p = processBuilder(r).start();
        pumps.add(pump(p.getInputStream(), prefix(r), out));
        pumps.add(pump(p.getErrorStream(), prefix(r), err));
        return p;
    }

    /** What goes in front of each line a worker prints. */
    private static String prefix(int rank) {
        return "[rank " + rank + "] ";
    }

    /**
     * The process of rank {@code r}: the worker command in the rank's environment over this process's, its text
     * laid out for this process's width less the {@code [rank N] } its lines get here ({@code TTPIPE_COLUMNS},
     * unless the rank's environment sets it).
     */
    ProcessBuilder processBuilder(int r) {
        ProcessBuilder pb = new ProcessBuilder(workerCommand(r));
        pb.environment().put(Terminal.COLUMNS_ENV, Integer.toString(Terminal.columns() - prefix(r).length()));
        pb.environment().putAll(deployment.rank(r).env());
        pb.environment().put("TT_MESH_ID", Integer.toString(deployment.rank(r).meshId()));
        pb.environment().put("TT_MESH_HOST_RANK", Integer.toString(deployment.rank(r).meshHostRank()));
        pb.environment().put(LAUNCHED_ENV, "1");
        pb.environment().put(MAX_RESTARTS_ENV, Integer.toString(maxRestarts));
        return pb;
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

    /**
     * Runs the job and recovers it when a worker dies, up to {@code maxRestarts} times. A worker other
     * than rank 0: only its process is started again; rank 0 (which recovers up to as many failed
     * steps in place) has every rank rejoin, the new process too, and roll back to the latest
     * checkpoint, while the other workers keep running. Rank 0 itself: every worker is stopped at once
     * and all are started again with {@code --resume RUN_DIR} (from the beginning when no checkpoint
     * exists yet). Prints the recovery time (from the death to the first step after it) and the steps redone.
     */
    public int runWithRestarts(int n, int maxRestarts, Path runDir) throws IOException, InterruptedException {
        List<String> base = new ArrayList<>(extraArgs);
        this.maxRestarts = maxRestarts;
        try {
            start(0, n);
            for (int restarts = 0; ; restarts++) {
                int exit = waitForAll(restarts < maxRestarts && !signalled);
                if (exit != RESTART) {
                    for (Thread t : pumps) t.join(2000);
                    return exit;
                }
                long diedNs = System.nanoTime();
                Recovery recovery = Recovery.at(runDir);
                int dead = childRanks.get(lastDead);
                if (dead != 0) {
                    cleanAeronDirectories(List.of(children.get(lastDead)));
                    children.set(lastDead, spawn(dead));
                    Terminal.printWrapped(err, "ttpipe launch: restarting rank " + dead + " alone (restart " + (restarts + 1) + " of "
                            + maxRestarts
                            + "); the other workers keep running and roll back to " + (recovery.checkpointStep() < 0
                            ? "the initial weights (no checkpoint yet)" : "the checkpoint of step " + recovery.checkpointStep()));
                    recovery.watch(diedNs, err).start();
                    continue;
                }
                stopAll();
                cleanAeronDirectories();
                children.clear();
                childRanks.clear();
                extraArgs = recovery.checkpointStep() < 0 ? base : withResume(base, runDir);
                Terminal.printWrapped(err, "ttpipe launch: restarting every worker " + (recovery.checkpointStep() < 0
                        ? "from the beginning (no checkpoint yet)" : "from the checkpoint of step " + recovery.checkpointStep())
                        + " (restart " + (restarts + 1) + " of " + maxRestarts + ")");
                Thread watcher = recovery.watch(diedNs, err);
                watcher.start();
                start(0, n);
            }
        } finally {
            close();
        }
    }

    /** {@code args} with {@code --resume runDir} in place of any --resume the user gave. */
    private static List<String> withResume(List<String> args, Path runDir) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < args.size(); i++) {
            String a = args.get(i);
            if (a.equals("--resume")) {
                i++;
                continue;
            }
            if (a.startsWith("--resume=")) continue;
            out.add(a);
        }
        out.add("--resume");
        out.add(runDir.toString());
        return out;
    }

    /** What a restart starts from, and the watch that reports how long it took. */
    record Recovery(Path metrics, int checkpointStep, int stepsDone, long linesBefore) {
        static Recovery at(Path runDir) {
            Path metrics = runDir.resolve("metrics.jsonl");
            int ck = -1;
            try {
                Path latest = runDir.resolve("checkpoints").resolve("latest");
                if (Files.isRegularFile(latest)) {
                    String name = Files.readString(latest).strip();
                    if (name.matches("step-\\d+")) ck = Integer.parseInt(name.substring(5));
                }
            } catch (IOException | NumberFormatException ignored) {
                // no checkpoint: start from the beginning
            }
            List<String> lines = readLines(metrics);
            int done = 0;
            if (!lines.isEmpty()) {
                Matcher m = Pattern.compile("\"step\":(\\d+)").matcher(lines.get(lines.size() - 1));
                if (m.find()) done = Integer.parseInt(m.group(1));          // steps count from 1
            }
            return new Recovery(metrics, ck, done, lines.size());
        }

        /** A daemon thread that prints the recovery time once the first step after the restart is in metrics.jsonl. */
        Thread watch(long diedNs, PrintStream err) {
            Thread t = new Thread(() -> {
                long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(30);
                while (System.nanoTime() < deadline) {
                    if (readLines(metrics).size() > linesBefore) {
                        double seconds = (System.nanoTime() - diedNs) / 1e9;
                        int from = Math.max(0, checkpointStep);
                        Terminal.printWrapped(err, String.format(Locale.ROOT, "ttpipe launch: recovered in %.1f s (from the death"
                                + " to the first step after the restart); %d step%s redone (steps %d..%d, back to the checkpoint of"
                                + " step %d)", seconds, Math.max(0, stepsDone - from), stepsDone - from == 1 ? "" : "s", from + 1,
                                stepsDone, from));
                        return;
                    }
                    try {
                        Thread.sleep(50);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }, "ttpipe-launch-recovery");
            t.setDaemon(true);
            return t;
        }

        private static List<String> readLines(Path f) {
            try {
                return Files.isRegularFile(f) ? Files.readAllLines(f) : List.of();
            } catch (IOException e) {
                return List.of();
            }
        }
    }

    private static final int RESTART = -1;
    /** The index in {@link #children} of the worker whose death {@link #waitForAll(boolean)} last returned {@link #RESTART} for. */
    private int lastDead;

    /** Waits for every child; on the first failure stops the rest and returns its exit code. */
    private int waitForAll() throws InterruptedException {
        return waitForAll(false);
    }

    /**
     * Waits for every child. On the first failure: returns {@link #RESTART} at once when
     * {@code restart} (a worker died of something other than bad input), else stops the rest and
     * returns its exit code.
     */
    private int waitForAll(boolean restart) throws InterruptedException {
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
                    if (preempted(p.exitValue())) {
                        Terminal.printWrapped(err, "ttpipe launch: rank " + r + " stopped for a preemption (exit code " + p.exitValue()
                                + "); waiting up to " + PREEMPTED_GRACE_SECONDS + " s for the others");
                        finish(PREEMPTED_GRACE_SECONDS);
                        return p.exitValue();
                    }
                    if (restart && !signalled && died(p.exitValue())) {
                        Terminal.printWrapped(err, "ttpipe launch: rank " + r + " (" + deployment.rank(r).controlAddress()
                                + ") died (exit code "
                                + p.exitValue() + (p.exitValue() > 128 ? ", signal " + (p.exitValue() - 128) : "") + ")");
                        lastDead = i;
                        return RESTART;
                    }
                    Terminal.printWrapped(err, "ttpipe launch: rank " + r + " (" + deployment.rank(r).controlAddress() + ") exited with code "
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

    /**
     * Whether an exit code means the worker died (a signal, a crash of the JVM) rather than stopped with
     * ttpipe's own diagnosis (1: a failure rank 0 gave up on, or that a worker was told of; 2: bad input),
     * which a restart would only repeat.
     */
    static boolean died(int exitCode) {
        if (preempted(exitCode)) return false;
        return exitCode > 128 || (exitCode != ExitCodes.FAILURE && exitCode != ExitCodes.BAD_INPUT && exitCode != ExitCodes.OK);
    }

    /** 143 or 130: a worker stopped at a step boundary for SIGTERM or SIGINT, rank 0 saved a checkpoint (see {@code Preemption}). */
    static boolean preempted(int exitCode) {
        return exitCode == ExitCodes.SIGTERM || exitCode == ExitCodes.SIGINT;
    }

    private volatile boolean signalled;

    /**
     * Passes a SIGTERM or Ctrl-C that this process got on to every worker (as SIGTERM): rank 0 finishes its step,
     * saves a checkpoint and ends the job, every worker exits with 143 or 130, and no worker is restarted.
     */
    public synchronized void signalAll() {
        signalled = true;
        // through the handle: Process.destroy() would also close our ends of its pipes, and lose what it prints next
        for (Process p : children) if (p.isAlive()) p.toHandle().destroy();
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
        cleanAeronDirectories(children);
    }

    private static void cleanAeronDirectories(List<Process> processes) {
        for (Process p : processes) {
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
            s.sorted(Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        } catch (IOException ignored) {
            // best effort
        }
    }
}

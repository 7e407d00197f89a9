package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.Deployment;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Unmatched;

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
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * {@code ttpipe launch CONFIG}: single-host emulation of a multi-host job. Starts one
 * {@code ttpipe worker} child process per rank on this machine (with its rank's env_overrides),
 * prefixes their output with the rank, stops all of them on Ctrl-C or as soon as one fails, and
 * leaves no process or Aeron directory behind.
 */
@Command(name = "launch",
        mixinStandardHelpOptions = true,
        description = {"Run a multi-process job on this machine, one `ttpipe worker` process per rank.",
                "Tensors go over Aeron UDP on loopback, control over a Pekko Cluster, as on real hosts. Output lines carry their rank."},
        footer = {"", "Examples:",
                "  ttpipe launch configs/multihost-pp2.yaml",
                "  ttpipe launch configs/multihost-pp4.yaml --hosts 4 --max-steps 10",
                "",
                "Flags after CONFIG other than --hosts are passed to every worker (e.g. --max-steps, --schedule)."})
public final class LaunchCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "CONFIG", description = "The job's config YAML.")
    Path config;

    @Option(names = "--hosts", paramLabel = "N", description = "Worker processes (default: one per pipeline rank).")
    Integer hosts;

    @Unmatched
    List<String> passThrough = new ArrayList<>();

    @Override
    public Integer call() throws Exception {
        JobOptions check = new JobOptions();
        new picocli.CommandLine(new Object() {
            @picocli.CommandLine.Mixin
            JobOptions opts = check;
        }).setUnmatchedArgumentsAllowed(true).parseArgs(passThrough.toArray(new String[0]));
        TtpipeConfig cfg = check.resolve(config, null);      // bad input fails here, once, with exit code 2
        int ranks = cfg.pipeline().ranks();
        int n = hosts != null ? hosts : ranks;
        if (n != ranks) {
            throw new UserInputException("--hosts: " + n + " given, expected " + ranks + " (one worker per pipeline rank of "
                    + config + ")");
        }
        if (!"aeron".equals(cfg.multihost.socketType)) {
            throw new UserInputException(cfg.origins.where("multihost_config.socket_type") + ": '" + cfg.multihost.socketType
                    + "' given, expected aeron for workers in separate processes");
        }
        Deployment deployment = Deployment.of(cfg);
        return new Launcher(config, passThrough, deployment, System.out, System.err).run(n);
    }

    /** Starts, watches and cleans up the worker processes. */
    static final class Launcher {
        /** After a worker fails, how long the others get to notice and stop by themselves. */
        static final int GRACE_SECONDS = 10;

        private final Path config;
        private final List<String> extraArgs;
        private final Deployment deployment;
        private final PrintStream out, err;
        private final List<Process> children = new ArrayList<>();

        Launcher(Path config, List<String> extraArgs, Deployment deployment, PrintStream out, PrintStream err) {
            this.config = config;
            this.extraArgs = extraArgs;
            this.deployment = deployment;
            this.out = out;
            this.err = err;
        }

        private final List<Integer> childRanks = new ArrayList<>();
        private final List<Thread> pumps = new ArrayList<>();
        private Thread hook;

        int run(int n) throws IOException, InterruptedException {
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
        void start(int from, int to) throws IOException {
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
        void finish(int seconds) throws InterruptedException {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
            for (Process p : children) {
                long left = deadline - System.nanoTime();
                if (left > 0) p.waitFor(left, TimeUnit.NANOSECONDS);
            }
            close();
        }

        void close() {
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
                        int code = p.exitValue() == Main.EXIT_BAD_INPUT ? Main.EXIT_BAD_INPUT : Main.EXIT_FAILURE;
                        finish(GRACE_SECONDS);   // rank 0 notices through the cluster and ends the job with its error
                        return code;
                    }
                }
                if (allDone) return Main.EXIT_OK;
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
            cmd.add(Main.class.getName());
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
}

package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.config.ConfigLoader;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Two network namespaces on this machine joined by a veth pair, for running two ttpipe workers over a
 * real (if short) network and dropping their packets with nftables: random loss on the data ports
 * ({@code numgen random mod 100 < N drop}), a rate limit on one data port ({@code limit rate over N
 * kbytes/second drop}), a blocked data port (every packet to it dropped) or a partition (every
 * packet from the other side dropped).
 * This kernel has no {@code netem}; nftables inside each namespace does the dropping.
 *
 * <p>Needs root, iproute2 and nftables. {@link #open} answers why not (null when it can); the
 * namespaces, and the veth pair with them, are removed by {@link #close}. Names carry this process's
 * id ({@code ttpipe-n<pid>a}, {@code ttpipe-n<pid>b}), addresses are {@code 10.201.<pid % 250>.1} and
 * {@code .2}: nothing outside the two namespaces is touched.
 *
 * <pre>
 * try (NetworkLab lab = NetworkLab.open(out)) {
 *     lab.writeConfig(cfg, 40, runsDir);          // two ranks, one per namespace
 *     lab.dropRandomly(2);                         // 2% of the data ports' packets
 *     NetworkLab.Job job = lab.start(cfg, runDir, logs, "lossy");
 * }
 * </pre>
 */
public final class NetworkLab implements AutoCloseable {
    public static final int CONTROL = 27510, DATA = 27610;
    private final String ns0, ns1, host0, host1;
    private final PrintStream log;

    private NetworkLab(String tag, PrintStream log) {
        long pid = ProcessHandle.current().pid();
        this.ns0 = "ttpipe-" + tag + pid + "a";
        this.ns1 = "ttpipe-" + tag + pid + "b";
        String net = "10.201." + (pid % 250) + ".";
        this.host0 = net + "1";
        this.host1 = net + "2";
        this.log = log;
    }

    /** Why two namespaces cannot be made here (not root, no nftables, namespaces refused), or null. */
    public static String unavailable() {
        if (!"root".equals(System.getProperty("user.name"))) return "not root: network namespaces cannot be made";
        if (run(null, "nft", "--version") != 0) return "nftables is not installed (apt-get install nftables; .ci/run does)";
        if (run(null, "ip", "-V") != 0) return "iproute2 is not installed (apt-get install iproute2; .ci/run does)";
        return null;
    }

    /**
     * Makes the namespaces, the veth pair between them and an nftables input chain in each.
     *
     * @param tag a short word in the namespaces' names (which tool made them)
     * @param log where failed set-up commands are written
     * @throws IOException naming the step that failed (the half-made namespaces removed)
     */
    public static NetworkLab open(String tag, PrintStream log) throws IOException {
        String why = unavailable();
        if (why != null) throw new IOException(why);
        NetworkLab lab = new NetworkLab(tag, log);
        long pid = ProcessHandle.current().pid() % 100000;
        String v0 = "v" + tag + pid + "a", v1 = "v" + tag + pid + "b";
        boolean ok = lab.sh("ip", "netns", "add", lab.ns0) == 0
                && lab.sh("ip", "netns", "add", lab.ns1) == 0
                && lab.sh("ip", "link", "add", v0, "type", "veth", "peer", "name", v1) == 0
                && lab.sh("ip", "link", "set", v0, "netns", lab.ns0) == 0
                && lab.sh("ip", "link", "set", v1, "netns", lab.ns1) == 0
                && lab.in(lab.ns0, "ip", "addr", "add", lab.host0 + "/24", "dev", v0) == 0
                && lab.in(lab.ns1, "ip", "addr", "add", lab.host1 + "/24", "dev", v1) == 0
                && lab.in(lab.ns0, "ip", "link", "set", v0, "up") == 0 && lab.in(lab.ns1, "ip", "link", "set", v1, "up") == 0
                && lab.in(lab.ns0, "ip", "link", "set", "lo", "up") == 0 && lab.in(lab.ns1, "ip", "link", "set", "lo", "up") == 0;
        for (String ns : List.of(lab.ns0, lab.ns1)) {
            ok = ok && lab.in(ns, "nft", "add", "table", "inet", "ttpipe") == 0
                    && lab.in(ns, "nft", "add", "chain", "inet", "ttpipe", "input", "{", "type", "filter", "hook", "input", "priority",
                    "0", ";", "}") == 0;
        }
        if (!ok) {
            lab.close();
            throw new IOException("could not make two network namespaces joined by a veth pair (`ip netns add` and `ip link add"
                    + " type veth` as root); see the commands above");
        }
        return lab;
    }

    public String host(int rank) {
        return rank == 0 ? host0 : host1;
    }

    public String namespace(int rank) {
        return rank == 0 ? ns0 : ns1;
    }

    /** The lab's multihost_config.liveness_grace_s: how long a partition lasts before it ends a job. */
    public static final int LIVENESS_GRACE_S = 5;

    /**
     * A two-rank config (the multihost test model: 4 blocks of width 64, 4 microbatches, 1F1B) with rank 0
     * in the first namespace and rank 1 in the second, checkpointing at its last step into the run dir. A
     * partition is waited out for {@link #LIVENESS_GRACE_S} before it ends the job.
     */
    public String config(int steps, Path runsDir) {
        return String.join("\n",
                "training_config: {seed: 5489, batch_size: 16, max_steps: " + steps + ", learning_rate: 0.003, runs_dir: \""
                        + runsDir + "\"}",
                "transformer_config: {num_heads: 4, embedding_dim: 64, num_blocks: 4, max_sequence_length: 32}",
                "telemetry: {port: 0}",
                "multihost_config:",
                "  enabled: true",
                "  socket_type: aeron",
                "  liveness_grace_s: " + LIVENESS_GRACE_S,
                "  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: {0: 2, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
                "rank_bindings:",
                "  - {rank: 0, mesh_id: 0, host: \"" + host0 + "\", control_port: " + CONTROL + ", data_port: " + DATA + "}",
                "  - {rank: 1, mesh_id: 1, host: \"" + host1 + "\", control_port: " + (CONTROL + 1) + ", data_port: " + (DATA + 2) + "}",
                "");
    }

    /** Two workers of {@code config}, each in its namespace, writing the run to {@code runDir} and their output to {@code logs}. */
    public record Job(Process rank0, Process rank1, Path out0, Path out1) {
        public void destroy() {
            rank0.destroyForcibly();
            rank1.destroyForcibly();
        }

        /** Waits for both to end (rank 0 within {@code seconds}, rank 1 30 s after), and answers rank 0's exit code. */
        public int finish(int seconds) throws IOException, InterruptedException {
            boolean done = rank0.waitFor(seconds, TimeUnit.SECONDS) && rank1.waitFor(30, TimeUnit.SECONDS);
            if (!done) {
                destroy();
                throw new IOException("the workers did not finish within " + seconds + " s:\n" + Files.readString(out0) + "\n"
                        + Files.readString(out1));
            }
            return rank0.exitValue();
        }
    }

    public Job start(Path config, Path runDir, Path logs, String name) throws IOException {
        Launcher l = new Launcher(config, List.of("--run-dir", runDir.toString()), Deployment.of(ConfigLoader.load(config)),
                new PrintStream(PrintStream.nullOutputStream()), new PrintStream(PrintStream.nullOutputStream()));
        Files.createDirectories(logs);
        Path out0 = logs.resolve(name + "-rank0.log"), out1 = logs.resolve(name + "-rank1.log");
        Process p0 = new ProcessBuilder(inNamespace(ns0, l.workerCommand(0))).redirectErrorStream(true).redirectOutput(out0.toFile()).start();
        Process p1 = new ProcessBuilder(inNamespace(ns1, l.workerCommand(1))).redirectErrorStream(true).redirectOutput(out1.toFile()).start();
        return new Job(p0, p1, out0, out1);
    }

    /** Drops {@code percent}% of the packets arriving at either rank's data port, at random, counted. */
    public void dropRandomly(int percent) throws IOException {
        for (int rank = 0; rank < 2; rank++) {
            int port = rank == 0 ? DATA : DATA + 2;
            require(in(namespace(rank), "nft", "add", "rule", "inet", "ttpipe", "input", "udp", "dport", Integer.toString(port),
                    "numgen", "random", "mod", "100", "<", Integer.toString(percent), "counter", "drop"), "the loss rule");
        }
    }

    /** Drops every packet that arrives at rank {@code rank}'s data port (UDP), counted: a firewall that blocks it. */
    public void blockDataPort(int rank) throws IOException {
        int port = rank == 0 ? DATA : DATA + 2;
        require(in(namespace(rank), "nft", "add", "rule", "inet", "ttpipe", "input", "udp", "dport", Integer.toString(port),
                "counter", "drop"), "the blocking rule");
    }

    /**
     * Drops what arrives at rank {@code rank}'s data port (UDP) beyond {@code kbytesPerSecond}, counted:
     * a slow link into that rank (Aeron retransmits what was dropped, so the tensors arrive, late).
     */
    public void limitRate(int rank, int kbytesPerSecond) throws IOException {
        int port = rank == 0 ? DATA : DATA + 2;
        require(in(namespace(rank), "nft", "add", "rule", "inet", "ttpipe", "input", "udp", "dport", Integer.toString(port),
                "limit", "rate", "over", kbytesPerSecond + "", "kbytes/second", "counter", "drop"), "the rate limit");
    }

    /** Drops every packet between the two namespaces, both ways. */
    public void partition() throws IOException {
        require(in(ns0, "nft", "add", "rule", "inet", "ttpipe", "input", "ip", "saddr", host1, "drop"), "the partition rule");
        require(in(ns1, "nft", "add", "rule", "inet", "ttpipe", "input", "ip", "saddr", host0, "drop"), "the partition rule");
    }

    /** Packets the counted rules dropped since they were added. */
    public long dropped() throws IOException {
        long n = 0;
        for (String ns : List.of(ns0, ns1)) {
            Matcher m = Pattern.compile("counter packets (\\d+)").matcher(output("ip", "netns", "exec", ns, "nft", "list", "chain",
                    "inet", "ttpipe", "input"));
            while (m.find()) n += Long.parseLong(m.group(1));
        }
        return n;
    }

    /** Removes every rule: the link is clean again. */
    public void heal() {
        in(ns0, "nft", "flush", "chain", "inet", "ttpipe", "input");
        in(ns1, "nft", "flush", "chain", "inet", "ttpipe", "input");
    }

    /** Removes both namespaces (and the veth pair with them). */
    @Override
    public void close() {
        run(null, "ip", "netns", "del", ns0);
        run(null, "ip", "netns", "del", ns1);
    }

    private void require(int code, String what) throws IOException {
        if (code != 0) throw new IOException("nft could not add " + what + " (exit " + code + ")");
    }

    static List<String> inNamespace(String ns, List<String> cmd) {
        List<String> out = new ArrayList<>(List.of("ip", "netns", "exec", ns));
        out.addAll(cmd);
        return out;
    }

    private int in(String ns, String... cmd) {
        return sh(inNamespace(ns, List.of(cmd)).toArray(new String[0]));
    }

    private int sh(String... cmd) {
        return run(log, cmd);
    }

    /** Runs {@code cmd}; its exit code (-1 when it could not run or took over 30 s), its output to {@code log} when it failed. */
    private static int run(PrintStream log, String... cmd) {
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            int code = p.waitFor(30, TimeUnit.SECONDS) ? p.exitValue() : -1;
            if (code != 0 && log != null) log.println("  " + String.join(" ", cmd) + " -> exit " + code + ": " + out.strip());
            return code;
        } catch (IOException e) {
            return -1;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return -1;
        }
    }

    private static String output(String... cmd) throws IOException {
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        try {
            p.waitFor(30, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return out;
    }
}

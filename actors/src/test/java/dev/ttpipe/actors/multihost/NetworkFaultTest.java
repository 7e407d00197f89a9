package dev.ttpipe.actors.multihost;

import dev.ttpipe.stages.checkpoint.SafeTensors;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Two worker processes in two network namespaces joined by a veth pair, made and removed by the test
 * (root, iproute2 and nftables needed; skipped with a message otherwise). Faults are real packet
 * drops by nftables inside the namespaces: 2% random loss on both data ports leaves the training
 * bit-identical to the clean run (Aeron retransmits what was lost, after a NAK), and a partition
 * longer than the failure detector's pause ends the job with the unreachable rank named, no process
 * or Aeron directory left behind.
 */
class NetworkFaultTest {
    static final String NS0 = "ttpipe-t" + ProcessHandle.current().pid() + "a";
    static final String NS1 = "ttpipe-t" + ProcessHandle.current().pid() + "b";
    static final String NET = "10.201." + (ProcessHandle.current().pid() % 250) + ".";
    static final String HOST0 = NET + "1", HOST1 = NET + "2";
    static final int CONTROL = 27510, DATA = 27610;
    static String skip;

    @BeforeAll
    static void makeNamespaces() {
        if (!"root".equals(System.getProperty("user.name"))) {
            skip = "not root: network namespaces cannot be made";
        } else if (sh("nft", "--version") != 0) {
            skip = "nftables is not installed (apt-get install nftables; .ci/run does)";
        } else if (sh("ip", "netns", "add", NS0) != 0) {
            skip = "`ip netns add` failed: this machine does not allow network namespaces";
        } else {
            String v0 = "vt" + ProcessHandle.current().pid() % 100000 + "a", v1 = "vt" + ProcessHandle.current().pid() % 100000 + "b";
            boolean ok = sh("ip", "netns", "add", NS1) == 0
                    && sh("ip", "link", "add", v0, "type", "veth", "peer", "name", v1) == 0
                    && sh("ip", "link", "set", v0, "netns", NS0) == 0
                    && sh("ip", "link", "set", v1, "netns", NS1) == 0
                    && inNs(NS0, "ip", "addr", "add", HOST0 + "/24", "dev", v0) == 0
                    && inNs(NS1, "ip", "addr", "add", HOST1 + "/24", "dev", v1) == 0
                    && inNs(NS0, "ip", "link", "set", v0, "up") == 0 && inNs(NS1, "ip", "link", "set", v1, "up") == 0
                    && inNs(NS0, "ip", "link", "set", "lo", "up") == 0 && inNs(NS1, "ip", "link", "set", "lo", "up") == 0
                    && inNs(NS0, "nft", "add", "table", "inet", "ttpipe") == 0 && inNs(NS1, "nft", "add", "table", "inet", "ttpipe") == 0
                    && inNs(NS0, "nft", "add chain inet ttpipe input { type filter hook input priority 0 ; }") == 0
                    && inNs(NS1, "nft", "add chain inet ttpipe input { type filter hook input priority 0 ; }") == 0;
            if (!ok) skip = "could not set up the namespaces and their veth link (see the test output)";
        }
        if (skip != null) System.out.println("NetworkFaultTest skipped: " + skip);
    }

    @AfterAll
    static void removeNamespaces() {
        sh("ip", "netns", "del", NS0);   // removes the veth pair with it
        sh("ip", "netns", "del", NS1);
    }

    static String config(int steps) {
        return String.join("\n",
                "training_config: {seed: 5489, batch_size: 16, max_steps: " + steps + ", learning_rate: 0.003, runs_dir: RUNS}",
                "transformer_config: {num_heads: 4, embedding_dim: 64, num_blocks: 4, max_sequence_length: 32}",
                "telemetry: {port: 0}",
                "multihost_config:",
                "  enabled: true",
                "  socket_type: aeron",
                "  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: {0: 2, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
                "rank_bindings:",
                "  - {rank: 0, mesh_id: 0, host: \"" + HOST0 + "\", control_port: " + CONTROL + ", data_port: " + DATA + "}",
                "  - {rank: 1, mesh_id: 1, host: \"" + HOST1 + "\", control_port: " + (CONTROL + 1) + ", data_port: " + (DATA + 2) + "}",
                "");
    }

    /** A running pair of workers, each in its namespace. */
    record Job(Process rank0, Process rank1, Path out0, Path out1) {
        void destroy() {
            rank0.destroyForcibly();
            rank1.destroyForcibly();
        }
    }

    static Job start(Path dir, String name, int steps) throws IOException {
        Path cfg = dir.resolve(name + ".yaml");
        Files.writeString(cfg, config(steps).replace("RUNS", dir.resolve("runs").toString()));
        Launcher l = new Launcher(cfg, List.of("--run-dir", dir.resolve(name).toString()), Deployment.of(
                dev.ttpipe.actors.config.ConfigLoader.load(cfg)), new PrintStream(PrintStream.nullOutputStream()),
                new PrintStream(PrintStream.nullOutputStream()));
        Path out0 = dir.resolve(name + "-rank0.log"), out1 = dir.resolve(name + "-rank1.log");
        Process p0 = new ProcessBuilder(withNs(NS0, l.workerCommand(0))).redirectErrorStream(true).redirectOutput(out0.toFile()).start();
        Process p1 = new ProcessBuilder(withNs(NS1, l.workerCommand(1))).redirectErrorStream(true).redirectOutput(out1.toFile()).start();
        return new Job(p0, p1, out0, out1);
    }

    static List<String> withNs(String ns, List<String> cmd) {
        List<String> out = new ArrayList<>(List.of("ip", "netns", "exec", ns));
        out.addAll(cmd);
        return out;
    }

    static int finish(Job j, int seconds) throws Exception {
        boolean done = j.rank0().waitFor(seconds, TimeUnit.SECONDS) && j.rank1().waitFor(30, TimeUnit.SECONDS);
        if (!done) {
            j.destroy();
            throw new AssertionError("the workers did not finish within " + seconds + " s:\n" + Files.readString(j.out0()) + "\n"
                    + Files.readString(j.out1()));
        }
        return j.rank0().exitValue();
    }

    @Test
    void underTwoPercentLossTheTrainingIsBitIdenticalAndAPartitionEndsTheJobNamingTheRank(@TempDir Path dir) throws Exception {
        assumeTrue(skip == null, skip);
        int steps = 40;
        Job clean = start(dir, "clean", steps);
        assertEquals(0, finish(clean, 240), Files.readString(clean.out0()));
        for (String ns : List.of(NS0, NS1)) {
            int port = ns.equals(NS0) ? DATA : DATA + 2;
            assertEquals(0, inNs(ns, "nft", "add rule inet ttpipe input udp dport " + port + " numgen random mod 100 < 2 counter drop"));
        }
        Job lossy = start(dir, "lossy", steps);
        long dropped = 0;
        try {
            assertEquals(0, finish(lossy, 240), Files.readString(lossy.out0()));
            for (String ns : List.of(NS0, NS1)) {
                Matcher m = Pattern.compile("counter packets (\\d+)").matcher(output("ip", "netns", "exec", ns, "nft", "list", "chain",
                        "inet", "ttpipe", "input"));
                while (m.find()) dropped += Long.parseLong(m.group(1));
            }
        } finally {
            inNs(NS0, "nft", "flush chain inet ttpipe input");
            inNs(NS1, "nft", "flush chain inet ttpipe input");
        }
        String name = String.format("step-%06d", steps);
        assertSameTensors(dir.resolve("clean/checkpoints").resolve(name), dir.resolve("lossy/checkpoints").resolve(name));
        double clean50 = medianStepSeconds(dir.resolve("clean/metrics.jsonl"));
        double lossy50 = medianStepSeconds(dir.resolve("lossy/metrics.jsonl"));
        System.out.printf(Locale.ROOT, "NetworkFaultTest: median step %.1f ms clean, %.1f ms under 2%% loss on both data ports (%.2fx),"
                + " steps 2..%d; %d packets dropped; weights bit-identical%n", 1e3 * clean50, 1e3 * lossy50, lossy50 / clean50, steps,
                dropped);
        assertTrue(dropped > 0, "nftables dropped no packet: the loss rule did not apply");

        // A partition: every packet between the namespaces dropped, both ways, from step 5 on.
        Job cut = start(dir, "partition", 400);
        try {
            waitForSteps(dir.resolve("partition/metrics.jsonl"), 5, cut);
            long t0 = System.nanoTime();
            assertEquals(0, inNs(NS0, "nft", "add rule inet ttpipe input ip saddr " + HOST1 + " drop"));
            assertEquals(0, inNs(NS1, "nft", "add rule inet ttpipe input ip saddr " + HOST0 + " drop"));
            int code = finish(cut, 60);
            double seconds = (System.nanoTime() - t0) / 1e9;
            String log0 = Files.readString(cut.out0()), log1 = Files.readString(cut.out1());
            assertEquals(1, code, log0);
            assertTrue(log0.contains("rank 1 (" + HOST1 + ":" + (CONTROL + 1) + ") became unreachable"), log0);
            assertTrue(log1.contains("rank 0 (" + HOST0 + ":" + CONTROL + ")"), log1);
            System.out.printf(Locale.ROOT, "NetworkFaultTest: the partition ended the job in %.1f s%n", seconds);
            assertTrue(seconds < 20, "took " + seconds + " s");
        } finally {
            cut.destroy();
            inNs(NS0, "nft", "flush chain inet ttpipe input");
            inNs(NS1, "nft", "flush chain inet ttpipe input");
        }
        for (Process p : List.of(cut.rank0(), cut.rank1(), lossy.rank0(), lossy.rank1(), clean.rank0(), clean.rank1())) {
            try (Stream<Path> s = Files.list(Path.of("/dev/shm"))) {
                List<Path> left = s.filter(f -> f.getFileName().toString().startsWith("ttpipe-aeron-" + p.pid() + "-")).toList();
                assertTrue(left.isEmpty(), "Aeron directories left: " + left);
            }
        }
    }

    static void waitForSteps(Path metrics, int n, Job j) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (System.nanoTime() < deadline) {
            if (Files.isRegularFile(metrics) && Files.readAllLines(metrics).size() >= n) return;
            if (!j.rank0().isAlive()) throw new AssertionError("rank 0 ended early:\n" + Files.readString(j.out0()));
            Thread.sleep(100);
        }
        throw new AssertionError("no " + n + " steps within 120 s:\n" + Files.readString(j.out0()));
    }

    static double medianStepSeconds(Path metrics) throws IOException {
        Pattern p = Pattern.compile("\"seconds\":([0-9.eE+-]+)");
        List<Double> s = new ArrayList<>();
        List<String> lines = Files.readAllLines(metrics);
        for (String line : lines.subList(1, lines.size())) {          // the first step includes warm-up
            Matcher m = p.matcher(line);
            if (m.find()) s.add(Double.parseDouble(m.group(1)));
        }
        s.sort(null);
        return s.get(s.size() / 2);
    }

    static void assertSameTensors(Path x, Path y) throws IOException {
        try (Stream<Path> files = Files.list(x)) {
            for (Path f : files.filter(p -> p.toString().endsWith(".safetensors")).toList()) {
                try (SafeTensors.Reader a = new SafeTensors.Reader(f); SafeTensors.Reader b = new SafeTensors.Reader(y.resolve(f.getFileName()))) {
                    assertEquals(a.tensors().keySet(), b.tensors().keySet());
                    for (String n : a.tensors().keySet()) assertArrayEquals(a.read(n), b.read(n), f.getFileName() + " " + n);
                }
            }
        }
    }

    static int inNs(String ns, String... cmd) {
        List<String> c = new ArrayList<>(List.of("ip", "netns", "exec", ns));
        if (cmd.length == 2 && cmd[1].contains(" ")) {
            c.add(cmd[0]);
            c.addAll(List.of(cmd[1].split(" ")));
        } else {
            c.addAll(List.of(cmd));
        }
        return sh(c.toArray(new String[0]));
    }

    static String output(String... cmd) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        p.waitFor(30, TimeUnit.SECONDS);
        return out;
    }

    static int sh(String... cmd) {
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            int code = p.waitFor(30, TimeUnit.SECONDS) ? p.exitValue() : -1;
            if (code != 0 && !cmd[0].equals("nft")) System.out.println("NetworkFaultTest: " + String.join(" ", cmd) + " -> " + code + ": " + out.strip());
            return code;
        } catch (IOException | InterruptedException e) {
            return -1;
        }
    }
}

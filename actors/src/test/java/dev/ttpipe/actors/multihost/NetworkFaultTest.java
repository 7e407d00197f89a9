package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.cli.BenchNetworkCommand;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Two worker processes in two network namespaces joined by a veth pair ({@link NetworkLab}, made and
 * removed by the test; root, iproute2 and nftables needed, skipped with a message otherwise). Faults
 * are real packet drops by nftables inside the namespaces: 2% random loss on both data ports leaves the
 * training bit-identical to the clean run (Aeron retransmits what was lost, after a NAK), and a
 * partition longer than the failure detector's pause ends the job with the unreachable rank named, no
 * process or Aeron directory left behind. {@code ttpipe bench network} measures the step time under loss
 * and how long the partition takes to end the job. A firewall that blocks rank 1's data port (every UDP
 * packet to it dropped) leaves the control plane to form the cluster, and the link check before step 1
 * fails the start within 10 s of the job's first line, naming the link from rank 0 to rank 1.
 */
class NetworkFaultTest {
    static NetworkLab lab;
    static String skip;

    @BeforeAll
    static void makeNamespaces() {
        skip = NetworkLab.unavailable();
        if (skip == null) {
            try {
                lab = NetworkLab.open("t", System.out);
            } catch (IOException e) {
                skip = e.getMessage();
            }
        }
        if (skip != null) System.out.println("NetworkFaultTest skipped: " + skip);
    }

    @AfterAll
    static void removeNamespaces() {
        if (lab != null) lab.close();
    }

    static NetworkLab.Job start(Path dir, String name, int steps) throws IOException {
        Path cfg = dir.resolve(name + ".yaml");
        Files.writeString(cfg, lab.config(steps, dir.resolve("runs")));
        return lab.start(cfg, dir.resolve(name), dir, name);
    }

    @Test
    void underTwoPercentLossTheTrainingIsBitIdenticalAndAPartitionEndsTheJobNamingTheRank(@TempDir Path dir) throws Exception {
        assumeTrue(skip == null, skip);
        int steps = 40;
        NetworkLab.Job clean = start(dir, "clean", steps);
        assertEquals(0, clean.finish(240), Files.readString(clean.out0()));
        lab.dropRandomly(2);
        NetworkLab.Job lossy = start(dir, "lossy", steps);
        long dropped;
        try {
            assertEquals(0, lossy.finish(240), Files.readString(lossy.out0()));
            dropped = lab.dropped();
        } finally {
            lab.heal();
        }
        String name = String.format("step-%06d", steps);
        assertTrue(BenchNetworkCommand.sameTensors(dir.resolve("clean/checkpoints").resolve(name), dir.resolve("lossy/checkpoints").resolve(name)),
                "the final weights differ under 2% loss");
        assertTrue(Files.list(dir.resolve("clean/checkpoints").resolve(name)).anyMatch(p -> p.toString().endsWith(".safetensors")),
                "no tensors compared");
        System.out.printf(Locale.ROOT, "NetworkFaultTest: %d packets dropped under 2%% loss on both data ports; weights bit-identical"
                + " (ttpipe bench network measures the step time)%n", dropped);
        assertTrue(dropped > 0, "nftables dropped no packet: the loss rule did not apply");

        // A partition: every packet between the namespaces dropped, both ways, from step 5 on.
        NetworkLab.Job cut = start(dir, "partition", 400);
        try {
            waitForSteps(dir.resolve("partition/metrics.jsonl"), 5, cut);
            lab.partition();
            int code = cut.finish(60);                 // a cap against a hang; the time is `ttpipe bench network`'s figure
            String log0 = Files.readString(cut.out0()), log1 = Files.readString(cut.out1());
            assertEquals(1, code, log0);
            assertTrue(log0.contains("rank 1 (" + lab.host(1) + ":" + (NetworkLab.CONTROL + 1) + ") became unreachable"), log0);
            assertTrue(log1.contains("rank 0 (" + lab.host(0) + ":" + NetworkLab.CONTROL + ")"), log1);
        } finally {
            cut.destroy();
            lab.heal();
        }
        for (Process p : List.of(cut.rank0(), cut.rank1(), lossy.rank0(), lossy.rank1(), clean.rank0(), clean.rank1())) {
            try (Stream<Path> s = Files.list(Path.of("/dev/shm"))) {
                List<Path> left = s.filter(f -> f.getFileName().toString().startsWith("ttpipe-aeron-" + p.pid() + "-")).toList();
                assertTrue(left.isEmpty(), "Aeron directories left: " + left);
            }
        }
    }

    @Test
    void aBlockedDataPortFailsTheStartWithinTenSecondsNamingTheLink(@TempDir Path dir) throws Exception {
        assumeTrue(skip == null, skip);
        lab.blockDataPort(1);
        NetworkLab.Job job = start(dir, "blocked", 10);
        try {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (!Files.readString(job.out0()).contains("ttpipe train: ")) {
                if (!job.rank0().isAlive() || System.nanoTime() > deadline) {
                    throw new AssertionError("the job did not start:\n" + Files.readString(job.out0()));
                }
                Thread.sleep(10);
            }
            long started = System.nanoTime();
            int code = job.finish(60);                                      // a cap against a hang
            double seconds = (System.nanoTime() - started) / 1e9;
            String log0 = Files.readString(job.out0()), log1 = Files.readString(job.out1());
            System.out.printf(Locale.ROOT, "NetworkFaultTest: a blocked data port failed the start %.1f s after the job's first"
                    + " line; nftables dropped %d packets%n", seconds, lab.dropped());
            String line = "link check: data link rank 0 (" + lab.host(0) + ":" + NetworkLab.DATA + ") -> rank 1 (" + lab.host(1) + ":"
                    + (NetworkLab.DATA + 2) + ") carried nothing in 2 s (small frame 1 of 3 not received); check that udp port "
                    + (NetworkLab.DATA + 2) + " is open from " + lab.host(0) + " to " + lab.host(1);
            assertEquals(1, code, log0);
            assertTrue(seconds < 10, "the start failed " + seconds + " s after the job's first line, expected within 10 s:\n" + log0);
            assertTrue(log0.contains("ttpipe: " + line + "\n"), log0);
            assertFalse(log0.contains("\tat "), "a stack trace without --verbose:\n" + log0);
            assertEquals(1, job.rank1().exitValue(), log1);
            assertTrue(log1.contains("the job ended: " + line), log1);
            assertTrue(Files.readString(dir.resolve("blocked/run.json")).contains("\"status\": \"failed: " + line + "\""),
                    Files.readString(dir.resolve("blocked/run.json")));
            assertTrue(lab.dropped() > 0, "nftables dropped no packet: the rule did not apply");
        } finally {
            job.destroy();
            lab.heal();
        }
    }

    static void waitForSteps(Path metrics, int n, NetworkLab.Job j) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (System.nanoTime() < deadline) {
            if (Files.isRegularFile(metrics) && Files.readAllLines(metrics).size() >= n) return;
            if (!j.rank0().isAlive()) throw new AssertionError("rank 0 ended early:\n" + Files.readString(j.out0()));
            Thread.sleep(100);
        }
        throw new AssertionError("no " + n + " steps within 120 s:\n" + Files.readString(j.out0()));
    }
}

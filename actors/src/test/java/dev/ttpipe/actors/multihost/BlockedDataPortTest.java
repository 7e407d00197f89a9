package dev.ttpipe.actors.multihost;

import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A firewall that blocks a data port: two worker processes in two network namespaces joined by a veth pair
 * ({@link NetworkLab}; root, iproute2 and nftables, skipped with a message otherwise), with nftables in rank 1's
 * namespace dropping every UDP packet to its data port. The control plane joins the cluster as usual; the link
 * check before step 1 fails the start within 10 s of the job's first line, in one line naming the link from rank 0
 * to rank 1 with both hosts and ports, exit code 1 on both workers, run.json failed, no process left.
 */
class BlockedDataPortTest {
    static NetworkLab lab;
    static String skip;

    @BeforeAll
    static void makeNamespaces() {
        skip = NetworkLab.unavailable();
        if (skip == null) {
            try {
                lab = NetworkLab.open("l", System.out);
            } catch (IOException e) {
                skip = e.getMessage();
            }
        }
        if (skip != null) System.out.println("BlockedDataPortTest skipped: " + skip);
    }

    @AfterAll
    static void removeNamespaces() {
        if (lab != null) lab.close();
    }

    @Test
    void aBlockedDataPortFailsTheStartWithinTenSecondsNamingTheLink(@TempDir Path dir) throws Exception {
        assumeTrue(skip == null, skip);
        lab.blockDataPort(1);
        Path cfg = dir.resolve("blocked.yaml");
        Files.writeString(cfg, lab.config(10, dir.resolve("runs")));
        NetworkLab.Job job = lab.start(cfg, dir.resolve("run"), dir, "blocked");
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
            System.out.printf(Locale.ROOT, "BlockedDataPortTest: the start failed %.1f s after the job's first line; nftables"
                    + " dropped %d packets%n", seconds, lab.dropped());
            String line = "link check: data link rank 0 (" + lab.host(0) + ":" + NetworkLab.DATA + ") -> rank 1 (" + lab.host(1) + ":"
                    + (NetworkLab.DATA + 2) + ") carried nothing in 2 s (small frame 1 of 3 not received); check that udp port "
                    + (NetworkLab.DATA + 2) + " is open from " + lab.host(0) + " to " + lab.host(1);
            assertEquals(1, code, log0);
            assertTrue(seconds < 10, "the start failed " + seconds + " s after the job's first line, expected within 10 s:\n" + log0);
            assertTrue(log0.contains("ttpipe: " + line + "\n"), log0);
            assertFalse(log0.contains("\tat "), "a stack trace without --verbose:\n" + log0);
            assertEquals(1, job.rank1().exitValue(), log1);
            assertTrue(log1.contains("the job ended: " + line), log1);
            Map<?, ?> record = (Map<?, ?>) MiniJson.read(dir.resolve("run/run.json"));
            assertEquals("failed: " + line, record.get("status"));
            assertTrue(lab.dropped() > 0, "nftables dropped no packet: the rule did not apply");
        } finally {
            job.destroy();
            lab.heal();
        }
    }
}

package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.LinkCheck;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The link check before step 1 of a multi-process job, with real worker processes over Aeron UDP on loopback: a
 * healthy job prints every link's latency and bandwidth (within 80 columns), keeps them in run.json, and
 * {@code simulate --costs-from} charges each hop its link's figure; a data link that carries nothing fails the
 * start within 10 s of the job's first line, in one line naming both ranks, hosts and ports and which way failed,
 * exit code 1 on every worker and run.json failed. Here the frames go nowhere because rank 0 (or rank 1) was given
 * the other's data port wrong, so they reach a port where nothing listens; {@code NetworkFaultTest} drops them with
 * nftables between two network namespaces.
 */
class LinkCheckTest {
    /** Two ranks on loopback, control ports {@code base} + r, data ports {@code base} + 100 + 2 r, two steps. */
    static String config(int base) {
        return MultiProcessTest.config(2, base, "{0: 2, 1: 2}").replace("max_steps: 400", "max_steps: 2") + "telemetry: {port: 0}\n";
    }

    @Test
    void aHealthyJobPrintsEveryLinksFiguresKeepsThemInRunJsonAndSimulateChargesEachHopItsLink(@TempDir Path dir) throws Exception {
        Path cfg = MultiProcessTest.write(dir, "pp2.yaml", config(28100));
        Path run = dir.resolve("run");
        CliTest.Result r = CliTest.run("launch", cfg.toString(), "--run-dir", run.toString());
        assertEquals(0, r.code(), r.out() + r.err());
        List<String> table = CliTest.joined(r.out()).lines().dropWhile(l -> !l.startsWith("link check: ")).limit(5).toList();
        System.out.println(String.join("\n", table));
        assertTrue(table.get(0).startsWith("link check: 3 links in "), r.out());
        assertTrue(table.get(0).endsWith(", each way a 1.0 KiB and a 4.0 MiB frame, 2 s each"), table.get(0));
        assertTrue(table.get(2).startsWith("control  0 <> 1  127.0.0.1:28101  "), table.toString());
        assertTrue(table.get(3).startsWith("data     0 -> 1  127.0.0.1:28202  "), table.toString());
        assertTrue(table.get(4).startsWith("data     1 -> 0  127.0.0.1:28200  "), table.toString());
        assertEquals(List.of(), EightyColumnsTest.wider(r.out()), "lines wider than 80 columns, [rank N] included");
        assertTrue(r.out().indexOf("link check: ") < r.out().indexOf("step 1/2"), "the check runs before step 1:\n" + r.out());

        Map<?, ?> record = (Map<?, ?>) MiniJson.read(run.resolve("run.json"));
        assertEquals("finished", record.get("status"));
        List<?> links = (List<?>) record.get("links");
        assertEquals(3, links.size(), links.toString());
        Map<?, ?> control = (Map<?, ?>) links.get(0), there = (Map<?, ?>) links.get(1), back = (Map<?, ?>) links.get(2);
        assertEquals(List.of("control", 0, 1, "127.0.0.1:28100", "127.0.0.1:28101", 1048576),
                List.of(control.get("kind"), n(control, "from"), n(control, "to"), control.get("from_address"), control.get("to_address"),
                        n(control, "bytes")));
        assertEquals(List.of("data", 0, 1, "127.0.0.1:28200", "127.0.0.1:28202", 4194304),
                List.of(there.get("kind"), n(there, "from"), n(there, "to"), there.get("from_address"), there.get("to_address"),
                        n(there, "bytes")));
        assertEquals(List.of(1, 0), List.of(n(back, "from"), n(back, "to")));
        for (Object o : links) {
            Map<?, ?> l = (Map<?, ?>) o;
            assertTrue(d(l, "latency_us") > 0 && d(l, "bandwidth_gbps") > 0, l.toString());
        }
        Map<?, ?> check = (Map<?, ?>) record.get("link_check");
        assertEquals(2048, n(check, "activation_frame_bytes"), check.toString());   // 2 x 16 tokens x 16 wide, fp32

        // simulate charges the hop between ranks 0 and 1 one activation frame over that link, both directions' mean
        double hopMs = ((d(there, "latency_us") / 1e6 + 2048 / (d(there, "bandwidth_gbps") * 1e9))
                + (d(back, "latency_us") / 1e6 + 2048 / (d(back, "bandwidth_gbps") * 1e9))) / 2 * 1e3;
        CliTest.Result sim = CliTest.run("simulate", "--costs-from", run.toString(), "--json");
        assertEquals(0, sim.code(), sim.out() + sim.err());
        Map<?, ?> costs = (Map<?, ?>) ((Map<?, ?>) MiniJson.parse(sim.out().strip())).get("costs");
        List<?> perStage = (List<?>) costs.get("comm_per_stage");
        assertEquals(hopMs, ((Number) perStage.get(0)).doubleValue(), 1e-9 * hopMs, costs.toString());
        CliTest.Result text = CliTest.run("simulate", "--costs-from", run.toString());
        assertTrue(text.joined().contains("comm per hop from the links " + run.resolve("run.json") + " measured before step 1"), text.out());
        MultiProcessTest.assertNoLeftovers();
    }

    @Test
    void aDataLinkThatCarriesNothingFailsTheStartWithinTenSecondsNamingItsRanksHostsAndPorts(@TempDir Path dir) throws Exception {
        // rank 0 sends to 28520, where nothing listens: rank 1 receives on 28502
        String job = config(28400);
        Failed f = startWithWrongDataPort(dir, "forward", job.replace("data_port: 28502", "data_port: 28520"), job);
        f.assertNamed("link check: data link rank 0 (127.0.0.1:28500) -> rank 1 (127.0.0.1:28520) carried nothing in 2 s"
                + " (small frame 1 of 3 not received); check that udp port 28520 is open on 127.0.0.1");

        // rank 1 sends its echoes to 28720, where nothing listens: the link from rank 1 to rank 0 is the one named
        job = config(28600);
        f = startWithWrongDataPort(dir, "back", job, job.replace("data_port: 28700", "data_port: 28720"));
        f.assertNamed("link check: data link rank 1 (127.0.0.1:28702) -> rank 0 (127.0.0.1:28700) carried nothing in 2 s"
                + " (rank 1 got rank 0's small frame, its echo did not arrive); check that udp port 28700 is open on 127.0.0.1");
        MultiProcessTest.assertNoLeftovers();
    }

    /** What the two workers of a job that failed its link check left: rank 0's log and run directory, rank 1's log. */
    record Failed(String log0, String log1, Path run, double seconds) {
        void assertNamed(String line) throws Exception {
            assertTrue(seconds < 10, "the start failed " + seconds + " s after the job's first line, expected within 10 s:\n" + log0);
            assertTrue(log0.contains("ttpipe: " + line + "\n"), log0);
            assertFalse(log0.contains("\tat "), "a stack trace without --verbose:\n" + log0);
            assertTrue(log1.contains("ttpipe: rank 1: the job ended: " + line), log1);
            Map<?, ?> record = (Map<?, ?>) MiniJson.read(run.resolve("run.json"));
            assertEquals("failed: " + line, record.get("status"));
            assertEquals(0, n(record, "steps_done"));
        }
    }

    /**
     * Rank 1 from {@code config1} and rank 0 from {@code config0}, which differ in a data port only, as hand-started
     * workers; the time from rank 0's first line of the job (printed once every rank joined) to its exit.
     */
    private static Failed startWithWrongDataPort(Path dir, String name, String config0, String config1) throws Exception {
        Path cfg0 = MultiProcessTest.write(dir, name + "-0.yaml", config0), cfg1 = MultiProcessTest.write(dir, name + "-1.yaml", config1);
        Path run = dir.resolve(name);
        Process rank1 = TtpipeProcesses.start(dir, name + "-rank1", Map.of(), List.of("worker", "--rank", "1", cfg1.toString()));
        Process rank0 = TtpipeProcesses.start(dir, name + "-rank0", Map.of(), List.of("worker", "--rank", "0", cfg0.toString(),
                "--run-dir", run.toString()));
        try {
            Path log0 = dir.resolve(name + "-rank0.log");
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (!Files.readString(log0).contains("ttpipe train: ")) {
                if (!rank0.isAlive() || System.nanoTime() > deadline) throw new AssertionError("the job did not start:\n" + Files.readString(log0));
                Thread.sleep(10);
            }
            long started = System.nanoTime();
            assertTrue(rank0.waitFor(60, TimeUnit.SECONDS), "rank 0 still running a minute after the job started:\n" + Files.readString(log0));
            double seconds = (System.nanoTime() - started) / 1e9;
            assertEquals(Main.EXIT_FAILURE, rank0.exitValue(), Files.readString(log0));
            assertTrue(rank1.waitFor(30, TimeUnit.SECONDS), TtpipeProcesses.log(dir, name + "-rank1"));
            assertEquals(Main.EXIT_FAILURE, rank1.exitValue(), TtpipeProcesses.log(dir, name + "-rank1"));
            System.out.printf("LinkCheckTest: %s: the start failed %.1f s after the job's first line%n", name, seconds);
            return new Failed(Files.readString(log0), TtpipeProcesses.log(dir, name + "-rank1"), run, seconds);
        } finally {
            rank0.destroyForcibly();
            rank1.destroyForcibly();
        }
    }

    /** The links checked: both directions between ranks of neighbouring stages, the wrap of interleaved and dualpipev's V too. */
    @Test
    void theDataLinksAreBothDirectionsBetweenTheRanksOfNeighbouringStages() {
        assertEquals(List.of(link(0, 1), link(1, 0), link(1, 2), link(2, 1)), links("1f1b", 3, 1));
        // interleaved, 3 ranks x 2: stages 0..5 on ranks 0 1 2 0 1 2, so rank 2 hands stage 2's output to rank 0
        assertEquals(List.of(link(0, 1), link(1, 0), link(1, 2), link(2, 1), link(0, 2), link(2, 0)), links("interleaved", 3, 2));
        // dualpipev: stages 0..5 on ranks 0 1 2 2 1 0: the V's two arms use the same links
        assertEquals(List.of(link(0, 1), link(1, 0), link(1, 2), link(2, 1)), links("dualpipev", 3, 2));
        assertEquals(List.of(1, 2), LinkCheck.plan(plan("1f1b", 3, 1), null, 1 << 20, Duration.ofSeconds(3)).controlRanks());
    }

    private static List<LinkCheck.Link> links(String schedule, int ranks, int v) {
        return LinkCheck.plan(plan(schedule, ranks, v), null, 1 << 20, Duration.ofSeconds(3)).dataLinks();
    }

    private static JobPlan plan(String schedule, int ranks, int v) {
        return JobPlan.builder(ModelSpec.gpt2(32, 16, 2, 6, 8)).ranks(ranks).schedule(schedule).virtualStages(v).microbatches(6)
                .microbatchSize(1).seqLen(8).backend(Backend.CPU).build();
    }

    private static LinkCheck.Link link(int from, int to) {
        return new LinkCheck.Link(from, to);
    }

    private static int n(Map<?, ?> m, String key) {
        return ((Number) m.get(key)).intValue();
    }

    private static double d(Map<?, ?> m, String key) {
        return ((Number) m.get(key)).doubleValue();
    }
}

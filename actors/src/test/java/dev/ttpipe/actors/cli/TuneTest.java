package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.tune.Candidate;
import dev.ttpipe.actors.tune.LayerCosts;
import dev.ttpipe.actors.tune.Prediction;
import dev.ttpipe.actors.tune.Search;
import dev.ttpipe.device.SimProfile;
import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code ttpipe tune} (dev.ttpipe.actors.tune through its command): the search finds a known optimum, bad input is one line, real configs tune and train. */
class TuneTest {
    private static final long MIB = 1L << 20;

    /**
     * Eight blocks over four ranks, every block costing 1 per F, I and W except block 3 (4x), one MiB of
     * activations per block per microbatch, 13 MiB per device: GPipe holds all 8 microbatches and never fits;
     * the even split puts the heavy block with another one. The best is a non-GPipe schedule with block 3
     * alone on its rank.
     */
    @Test
    void findsTheKnownOptimumWhenMemoryRulesOutGPipeAndOneBlockIsHeavy() {
        int n = 8;
        LayerCosts.Curve[] f = new LayerCosts.Curve[n];
        for (int b = 0; b < n; b++) f[b] = LayerCosts.Curve.affine(0, b == 3 ? 4 : 1);
        LayerCosts.Curve zero = LayerCosts.Curve.affine(0, 0);
        LayerCosts.Curve[] none = {zero, zero, zero};
        LayerCosts costs = new LayerCosts(f, f, f, none, none, MIB, 0, 0, new long[n], 0, 0, 16,
                LayerCosts.Hop.latency(0), 0, Double.NaN, 0, LayerCosts.Curve.constant(0), List.of());
        Search search = new Search(costs, new Search.Job(8, 1, 13 * MIB, 1, 1));
        Search.Space space = new Search.Space(List.of("gpipe", "1f1b"), List.of(8), null, List.of(false), 4, 1);

        Search.Outcome r = search.run(space, 30, 5);

        Prediction best = r.best();
        assertNotNull(best);
        assertEquals("1f1b", best.candidate().schedule(), "GPipe holds 8 microbatches: over 13 MiB on every split");
        int[] split = best.candidate().blocksPerRank();
        int first = 0, rankOfHeavy = -1;
        for (int rank = 0; rank < split.length; rank++) {
            if (first <= 3 && 3 < first + split[rank]) rankOfHeavy = rank;
            first += split[rank];
        }
        assertEquals(1, split[rankOfHeavy], "block 3 alone on its rank, got " + Arrays.toString(split));
        Prediction even = search.predict(new Candidate("1f1b", 1, 8, new int[]{2, 2, 2, 2}, false));
        assertTrue(best.stepSeconds() < even.stepSeconds() * 0.9, best.stepSeconds() + " vs even " + even.stepSeconds());
        assertTrue(r.ranked().stream().noneMatch(p -> p.candidate().schedule().equals("gpipe")));
        Prediction gpipe = search.predict(new Candidate("gpipe", 1, 8, split, false));
        assertFalse(gpipe.fits());
        assertEquals(8 * (long) split[gpipe.overflowRank()] * MIB - 13 * MIB, gpipe.overflowBytes(),
                "the rank that overflows and by how much: all 8 microbatches of its blocks, less 13 MiB");
        assertEquals(2 * 35, r.considered(), "2 schedules x the 35 splits of 8 blocks over 4 ranks");
    }

    /**
     * Eight equal blocks of 1 MiB of parameters state each, no activations, a hop of 20 (slow links): on
     * 2 ranks a step is fastest (fewest hops), but 4 MiB per rank does not fit in 3.5 MiB; searching
     * P in {2, 4, 8} finds 4 ranks, and with memory to spare, 2.
     */
    @Test
    void searchesTheNumberOfRanksUnderMemory() {
        int n = 8;
        LayerCosts.Curve[] f = new LayerCosts.Curve[n];
        Arrays.fill(f, LayerCosts.Curve.affine(0, 1));
        LayerCosts.Curve zero = LayerCosts.Curve.affine(0, 0);
        LayerCosts.Curve[] none = {zero, zero, zero};
        long[] params = new long[n];
        Arrays.fill(params, MIB / 16);
        LayerCosts costs = new LayerCosts(f, f, f, none, none, 0, 0, 0, params, 0, 0, 16,
                LayerCosts.Hop.latency(20), 0, Double.NaN, 0, LayerCosts.Curve.constant(0), List.of());
        Search.Space space = new Search.Space(List.of("1f1b"), List.of(8), null, List.of(false), List.of(2, 4, 8), 1);

        Search.Outcome tight = new Search(costs, new Search.Job(8, 1, 7 * MIB / 2, 1, 1)).run(space, 30, 5);
        Search.Outcome ample = new Search(costs, new Search.Job(8, 1, 64 * MIB, 1, 1)).run(space, 30, 5);

        assertEquals(4, tight.best().candidate().ranks(), "2 ranks overflow, 8 pay twice the hops: " + tight.best().candidate());
        assertTrue(tight.ranked().stream().noneMatch(p -> p.candidate().ranks() == 2), "every split over 2 ranks holds 4 MiB or more");
        assertEquals(7, tight.overflowing().stream().filter(p -> p.candidate().ranks() == 2).count());
        assertEquals(2, ample.best().candidate().ranks(), ample.best().candidate().toString());
        assertEquals(7 + 35 + 1, tight.considered(), "the splits of 8 blocks over 2, 4 and 8 ranks");
    }

    @Test
    void refusesBadRankRangesInOneLine() {
        CliTest.assertOneLineBadInput(CliTest.run("tune", config("nanogpt-pp4-1f1b.yaml"), "--ranks", "0..4"),
                "--ranks", "'0..4'", "expected rank counts from 1 to the 6 blocks");
        CliTest.assertOneLineBadInput(CliTest.run("tune", config("nanogpt-pp4-1f1b.yaml"), "--ranks", "2,x"), "--ranks", "'2,x'");
        CliTest.assertOneLineBadInput(CliTest.run("tune", config("nanogpt-pp4-1f1b.yaml"), "--ranks", "2..2000000000"),
                "--ranks", "'2..2000000000'", "expected rank counts");
        CliTest.assertOneLineBadInput(CliTest.run("tune", config("nanogpt-pp4-1f1b.yaml"), "--ranks", "2..4", "--fix", "split"),
                "--ranks with --fix split");
        CliTest.assertOneLineBadInput(CliTest.run("tune", config("multihost-pp2.yaml"), "--ranks", "2..4"),
                "multihost config", "rank_bindings");
    }

    @Test
    void refusesABudgetOfZero() {
        CliTest.Result r = CliTest.run("tune", config("nanogpt-pp4-1f1b.yaml"), "--budget", "0");
        CliTest.assertOneLineBadInput(r, "--budget", "0", "expected");
    }

    @Test
    void refusesAMemoryBelowTheParametersShare() {
        CliTest.Result r = CliTest.run("tune", config("nanogpt-pp4-1f1b.yaml"), "--memory-per-device", "64KiB");
        CliTest.assertOneLineBadInput(r, "--memory-per-device 64KiB", "parameters", "expected at least");
    }

    @Test
    void refusesAConfigWithNothingToTune() {
        CliTest.Result r = CliTest.run("tune", config("nanogpt-pp4-1f1b.yaml"), "--fix", "schedule,microbatches,split,recompute");
        CliTest.assertOneLineBadInput(r, "nothing to tune", "schedule fixed by --fix");
    }

    @Test
    void refusesAnUnknownProfileNamingIt() {
        CliTest.Result r = CliTest.run("tune", config("sim-pp16.yaml"), "--profile", "galaxi");
        CliTest.assertOneLineBadInput(r, "--profile", "galaxi", "galaxy");
    }

    /** The search's speed is a figure tune prints (searched N candidates in S s), not a threshold here. */
    @Test
    void tunesSimPp16OnAGalaxy() {
        CliTest.Result r = CliTest.run("tune", config("sim-pp16.yaml"), "--profile", "galaxy", "--budget", "20", "--json");
        assertEquals(0, r.code(), r.err());
        Map<?, ?> j = (Map<?, ?>) MiniJson.parse(r.out().strip());
        assertTrue(((Number) j.get("candidates")).intValue() > 100, r.out());
        assertTrue(j.get("seconds") instanceof Number && j.get("stopped_at_budget") instanceof Boolean, r.out());
        assertFalse(((List<?>) j.get("ranking")).isEmpty(), r.out());
    }

    /** The budget is a timeout: a search with none left stops before its candidates are done, and says so. */
    @Test
    void aSearchStopsAtItsBudgetAndSaysSo() {
        int n = 8;
        LayerCosts.Curve[] f = new LayerCosts.Curve[n];
        Arrays.fill(f, LayerCosts.Curve.affine(0, 1));
        LayerCosts.Curve zero = LayerCosts.Curve.affine(0, 0);
        LayerCosts.Curve[] none = {zero, zero, zero};
        LayerCosts costs = new LayerCosts(f, f, f, none, none, MIB, 0, 0, new long[n], 0, 0, 16,
                LayerCosts.Hop.latency(0), 0, Double.NaN, 0, LayerCosts.Curve.constant(0), List.of());
        Search search = new Search(costs, new Search.Job(8, 1, 64 * MIB, 1, 1));
        Search.Space space = new Search.Space(List.of("gpipe", "1f1b"), List.of(8), null, List.of(false), 4, 1);

        Search.Outcome spent = search.run(space, 0, 5);
        Search.Outcome ample = search.run(space, 600, 5);

        assertTrue(spent.stoppedAtBudget(), "a budget of 0 s did not stop the search");
        assertTrue(spent.considered() < 2 * 35, spent.considered() + " of the 70 candidates considered");
        assertFalse(ample.stoppedAtBudget());
        assertEquals(2 * 35, ample.considered(), "every candidate within an ample budget");
    }

    @Test
    void aProfileInTheConfigSetsTheSimCostsAndMemory(@TempDir Path dir) throws Exception {
        Path p = dir.resolve("g.yaml");
        Files.writeString(p, Files.readString(Path.of(config("sim-pp16.yaml")))
                .replace("  sim:\n    gflops: 100.0\n", "  sim:\n    profile: wormhole_n300\n")
                .replace("    memory_gbps: 50.0\n", ""));
        TtpipeConfig cfg = ConfigLoader.load(p);
        assertEquals(65.5e3, cfg.device.sim.gflops, 1e-6);
        assertEquals(288, cfg.device.sim.memoryGbps, 1e-9);
        assertEquals(5.0, cfg.device.sim.opLatencyUs, 1e-9, "a key beside the profile overrides it");
        assertEquals(12L << 30, cfg.device.memoryPerDevice);
    }

    @Test
    void aGalaxyPlacesRanksInSnakeOrderAndPaysTheHostLinkBetweenGalaxies() {
        SimProfile g = SimProfile.named("galaxy");
        assertEquals(List.of(0, 7), Arrays.stream(g.meshPosition(7)).boxed().toList());
        assertEquals(List.of(1, 7), Arrays.stream(g.meshPosition(8)).boxed().toList(), "row 1 runs back");
        assertEquals(List.of(1, 0), Arrays.stream(g.meshPosition(15)).boxed().toList());
        for (int c = 0; c + 1 < 32; c++) {
            int[] a = g.meshPosition(c), b = g.meshPosition(c + 1);
            assertEquals(1, Math.abs(a[0] - b[0]) + Math.abs(a[1] - b[1]), "chips " + c + " and " + (c + 1) + " are mesh neighbours");
        }
        assertFalse(g.hopCrossesHost(6, 4), "ranks 6 and 7 of 4 chips each: chips 27 and 28, one Galaxy");
        assertTrue(g.hopCrossesHost(7, 4), "ranks 7 and 8: chips 31 and 32, two Galaxies");
        assertTrue(g.hopBytesPerSecond(7, 4) < g.hopBytesPerSecond(6, 4));
    }

    /** The whole loop on a tiny config: calibrate by real steps, write the best, and `ttpipe train` runs it as is. */
    @Test
    void theWrittenConfigLoadsAndTrains(@TempDir Path dir) throws Exception {
        Path cfg = dir.resolve("tiny.yaml");
        Files.writeString(cfg, String.join("\n",
                "training_config: {batch_size: 4, max_steps: 2, learning_rate: 0.003, runs_dir: " + dir.resolve("runs") + "}",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 3, max_sequence_length: 8}",
                "device_config: {threads: 1}",
                "multihost_config:",
                "  pipeline_parallel_config: {num_blocks: 3, blocks_per_rank: {0: 1, 1: 2}, num_microbatches: 2, schedule: 1f1b}",
                ""));
        Path out = dir.resolve("tuned.yaml");
        CliTest.Result r = CliTest.run("tune", cfg.toString(), "--calibration-steps", "3", "--out", out.toString());
        assertEquals(0, r.code(), r.err());
        assertTrue(r.out().contains("searched"), r.out());
        TtpipeConfig tuned = ConfigLoader.load(out);
        assertFalse(tuned.pipeline().autoSplit);
        CliTest.Result train = CliTest.run("train", out.toString(), "--max-steps", "2", "--run-dir", dir.resolve("run").toString());
        assertEquals(0, train.code(), train.err());
        assertTrue(Files.exists(dir.resolve("run").resolve("metrics.jsonl")));
    }

    // ---- helpers ----------------------------------------------------------------------------

    static String config(String name) {
        return Path.of("..", "configs", name).toString();
    }
}

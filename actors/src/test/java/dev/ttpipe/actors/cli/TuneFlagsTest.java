package dev.ttpipe.actors.cli;

import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code ttpipe tune}'s {@code --costs-from}, {@code --verify-top} and {@code --measure}, each end to end on a
 * tiny config (4 blocks of width 16 on 2 ranks, 4 microbatches of 1), with a bad input of each.
 */
class TuneFlagsTest {
    static String tiny(Path dir, String device) {
        return String.join("\n",
                "training_config: {batch_size: 4, max_steps: 5, learning_rate: 0.003, runs_dir: " + dir.resolve("runs") + "}",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 4, max_sequence_length: 8}",
                "device_config: {" + device + "}",
                "multihost_config:",
                "  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: {0: 2, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
                "");
    }

    /** A real `ttpipe train` run of the tiny config (5 steps), its run directory. */
    static Path trainedRun(Path dir) throws Exception {
        Path cfg = Files.writeString(dir.resolve("tiny.yaml"), tiny(dir, "threads: 1"));
        Path run = dir.resolve("run");
        CliTest.Result r = CliTest.run("train", cfg.toString(), "--run-dir", run.toString());
        assertEquals(0, r.code(), r.err());
        return run;
    }

    /** A copy of {@code run} whose every step's per-stage costs are replaced: F = I = {@code ms}, W half of it. */
    static Path withStageCosts(Path run, Path copy, double ms0, double ms1) throws Exception {
        Files.createDirectories(copy);
        Files.copy(run.resolve("config.yaml"), copy.resolve("config.yaml"));
        String costs = String.format(Locale.ROOT, "\"stage_ms\":{\"f\":[%s,%s],\"b\":[0,0],\"i\":[%s,%s],\"w\":[%s,%s],\"comm\":0.01}",
                ms0, ms1, ms0, ms1, ms0 / 2, ms1 / 2);
        List<String> lines = new ArrayList<>();
        for (String line : Files.readAllLines(run.resolve("metrics.jsonl"))) {
            String replaced = line.replaceFirst("\"stage_ms\":\\{[^}]*\\}", Matcher.quoteReplacement(costs));
            assertFalse(replaced.equals(line), "no stage_ms in " + line);
            lines.add(replaced);
        }
        Files.write(copy.resolve("metrics.jsonl"), lines);
        return copy;
    }

    static Map<?, ?> json(CliTest.Result r) {
        assertEquals(0, r.code(), r.out() + r.err());
        return (Map<?, ?>) MiniJson.parse(r.out().strip());
    }

    static List<Integer> split(Map<?, ?> candidate) {
        return ((List<?>) candidate.get("blocks_per_rank")).stream().map(o -> ((Number) o).intValue()).toList();
    }

    @Test
    void costsFromReadsEarlierRunsAndThePickFollowsTheirCosts(@TempDir Path dir) throws Exception {
        Path run = trainedRun(dir);
        Path cfg = run.resolve("config.yaml");
        // The same run's costs, rewritten: stage 1 (blocks 2, 3 and the head) four times stage 0's, then both alike. With
        // two stages the fit weighs the embedding against a block by FLOPs and gives the last stage's excess to the head.
        Path heavyLast = withStageCosts(run, dir.resolve("heavy-last"), 2.0, 8.0);
        Path even = withStageCosts(run, dir.resolve("even"), 4.0, 4.0);
        Map<?, ?> a = json(CliTest.run("tune", cfg.toString(), "--costs-from", heavyLast.toString(), "--fix",
                "schedule,microbatches,recompute", "--json"));
        Map<?, ?> b = json(CliTest.run("tune", cfg.toString(), "--costs-from", even.toString(), "--fix",
                "schedule,microbatches,recompute", "--json"));
        assertEquals("fitted from 1 run(s)", a.get("costs"), a.toString());
        assertEquals(List.of(3, 1), split((Map<?, ?>) a.get("best")), "a heavy head: its stage gets fewer blocks: " + a.get("best"));
        assertEquals(List.of(2, 2), split((Map<?, ?>) b.get("best")), "stages alike: blocks alike: " + b.get("best"));
        // the step predicted from those costs: the shipped even split pays for its heavy stage, the pick less
        double shipped = ((Number) ((Map<?, ?>) a.get("shipped")).get("predicted_step_seconds")).doubleValue();
        double best = ((Number) ((Map<?, ?>) a.get("best")).get("predicted_step_seconds")).doubleValue();
        assertTrue(best < shipped, best + " s vs the shipped " + shipped + " s");
    }

    @Test
    void costsFromRefusesADirectoryThatIsNoRunInOneLine(@TempDir Path dir) throws Exception {
        Path cfg = Files.writeString(dir.resolve("tiny.yaml"), tiny(dir, "threads: 1"));
        Path empty = Files.createDirectories(dir.resolve("not-a-run"));
        CliTest.assertOneLineBadInput(CliTest.run("tune", cfg.toString(), "--costs-from", empty.toString()),
                "--costs-from: " + empty, "expected the run directory of a `ttpipe train` run");
        Files.copy(cfg, empty.resolve("config.yaml"));
        CliTest.assertOneLineBadInput(CliTest.run("tune", cfg.toString(), "--costs-from", empty.toString()),
                "--costs-from: " + empty.resolve("metrics.jsonl"), "expected the run directory of a `ttpipe train` run");
    }

    @Test
    void verifyTopRunsTheBestCandidatesAndTheShippedConfigAndPicksTheFastestMeasured(@TempDir Path dir) throws Exception {
        Path run = trainedRun(dir);
        Path cfg = run.resolve("config.yaml");
        CliTest.Result r = CliTest.run("tune", cfg.toString(), "--costs-from", run.toString(), "--fix", "schedule,recompute",
                "--verify-top", "2", "--verify-steps", "3", "--json");
        Map<?, ?> j = json(r);
        List<?> ranking = (List<?>) j.get("ranking");
        assertTrue(ranking.size() >= 2, j.toString());
        List<Map<?, ?>> verified = new ArrayList<>();
        for (int i = 0; i < 2; i++) verified.add((Map<?, ?>) ranking.get(i));
        verified.add((Map<?, ?>) j.get("shipped"));
        for (Map<?, ?> v : verified) {
            assertTrue(v.get("measured_step_seconds") instanceof Number n && n.doubleValue() > 0, "not run: " + v);
            assertTrue(v.containsKey("error"), v.toString());
        }
        for (int i = 2; i < ranking.size(); i++) {
            assertFalse(((Map<?, ?>) ranking.get(i)).containsKey("measured_step_seconds"), "only the top 2 run: " + ranking.get(i));
        }
        // the pick is the fastest measured of the three
        Map<?, ?> fastest = verified.stream().min(Comparator.comparingDouble(
                v -> ((Number) v.get("measured_step_seconds")).doubleValue())).orElseThrow();
        Map<?, ?> best = (Map<?, ?>) j.get("best");
        assertEquals(List.of(fastest.get("schedule"), fastest.get("microbatches"), split(fastest)),
                List.of(best.get("schedule"), best.get("microbatches"), split(best)), j.toString());

        CliTest.Result text = CliTest.run("tune", cfg.toString(), "--costs-from", run.toString(), "--fix", "schedule,recompute",
                "--verify-top", "1", "--verify-steps", "3");
        assertEquals(0, text.code(), text.err());
        assertTrue(text.out().contains("verifying the top 1"), text.out());
        assertTrue(text.out().contains("measured ms") && text.out().contains("the fastest of those verified"), text.out());
    }

    @Test
    void verifyTopAndVerifyStepsRefuseBadCountsInOneLine(@TempDir Path dir) throws Exception {
        Path cfg = Files.writeString(dir.resolve("tiny.yaml"), tiny(dir, "threads: 1"));
        CliTest.assertOneLineBadInput(CliTest.run("tune", cfg.toString(), "--verify-top", "-1"),
                "--verify-top: -1 given, expected 0 or more");
        CliTest.assertOneLineBadInput(CliTest.run("tune", cfg.toString(), "--verify-top", "2", "--verify-steps", "2"),
                "--verify-steps: 2 given, expected more than the 2 warm-up steps");
    }

    @Test
    void measureCalibratesTheSimBackendByRealStepsInsteadOfItsModel(@TempDir Path dir) throws Exception {
        Path cfg = Files.writeString(dir.resolve("sim.yaml"), tiny(dir, "backend: sim"));
        CliTest.Result modelled = CliTest.run("tune", cfg.toString());
        assertEquals(0, modelled.code(), modelled.err());
        assertTrue(modelled.out().contains("costs (modelled, device_config.sim"), modelled.out());
        assertFalse(modelled.out().contains("calibrating:"), modelled.out());

        CliTest.Result measured = CliTest.run("tune", cfg.toString(), "--measure", "--calibration-steps", "3");
        assertEquals(0, measured.code(), measured.err());
        assertTrue(measured.out().contains("calibrating: zb-h1 at microbatch sizes [1, 2, 4], 3 steps each"), measured.out());
        assertTrue(measured.out().contains("costs (measured on the sim backend"), measured.out());
        for (String run : List.of("4 microbatches of 1", "2 microbatches of 2", "1 microbatches of 4")) {
            assertTrue(measured.out().contains("calibration run, " + run + ": measured "), run + " not run:\n" + measured.out());
            assertFalse(modelled.out().contains("calibration run, " + run), modelled.out());
        }
        assertTrue(measured.out().contains("best: "), measured.out());
    }

    @Test
    void measureRefusesWhatItCannotMeasureInOneLine(@TempDir Path dir) throws Exception {
        Path cpu = Files.writeString(dir.resolve("tiny.yaml"), tiny(dir, "threads: 1"));
        CliTest.assertOneLineBadInput(CliTest.run("tune", cpu.toString(), "--measure", "--profile", "galaxy"),
                "--measure with --profile galaxy on the cpu backend", "expected device_config.backend: sim");
        CliTest.assertOneLineBadInput(CliTest.run("tune", cpu.toString(), "--measure", "--costs-from", dir.toString()),
                "--measure and --costs-from " + dir + " given", "expected one of them");
    }
}

package dev.ttpipe.actors.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code ttpipe simulate} as a user runs it. */
class SimulateCommandTest {

    private static CliTest.Result simulate(String... args) {
        String[] all = new String[args.length + 1];
        all[0] = "simulate";
        System.arraycopy(args, 0, all, 1, args.length);
        return CliTest.run(all);
    }

    @Test
    void withoutArgumentsSimulatesOneFOneBOnFourRanksAndEightMicrobatches() {
        CliTest.Result r = simulate();
        assertEquals(0, r.code(), r.err());
        assertTrue(r.out().startsWith("1f1b: 4 ranks, 4 stages, 8 microbatches"), r.out());
        assertTrue(r.out().contains("rank 3 |.  .  .  F0 B0"), r.out());
        assertTrue(r.out().contains("makespan 33, bubble 27.3% overall"), r.out());
        assertTrue(r.out().contains("peak activations"), r.out());
    }

    @Test
    void jsonCarriesTheFigures() {
        CliTest.Result r = simulate("--json", "--stages", "4", "--microbatches", "8", "--schedule", "1F1B");
        assertEquals(0, r.code(), r.err());
        String json = r.out().strip();
        assertTrue(json.startsWith("{\"schedule\":\"1f1b\",\"stages\":4,\"virtual_stages\":1,\"microbatches\":8"), json);
        assertTrue(json.contains("\"makespan\":33,"), json);
        assertTrue(json.contains("\"bubble_fraction\":" + 9.0 / 33), json);
        assertTrue(json.contains("\"peak_activations\":[4,3,2,1]"), json);
        assertEquals(1, json.lines().count());
    }

    @Test
    void costsSplitTheBackwardAndScaleWithVirtualStages() {
        CliTest.Result r = simulate("--json", "-p", "2", "-m", "2", "-s", "zb-h1", "--costs", "f=1,b=3");
        assertTrue(r.out().contains("\"costs\":{\"f\":1,\"b\":3,\"i\":1.5,\"w\":1.5,\"comm\":0}"), r.out());
        CliTest.Result halves = simulate("--json", "-s", "interleaved", "--costs", "f=1,i=0.5,w=1.5");
        assertTrue(halves.out().contains("\"b\":2,"), halves.out());
        // a rank's share costs F+B = 3 per microbatch however many stages it holds: 8 microbatches = 24 busy
        assertTrue(halves.out().contains("\"virtual_stages\":2"), halves.out());
        assertTrue(halves.out().contains("\"makespan\":28.5"), halves.out());
    }

    @Test
    void compareGivesOneRowPerSchedule() {
        CliTest.Result table = simulate("-p", "4", "-m", "8", "--compare", "gpipe,1f1b,zb-h1");
        assertEquals(0, table.code(), table.err());
        assertTrue(table.out().contains("schedule  V  makespan  bubble  peak activations per rank"), table.out());
        assertTrue(table.out().contains("1f1b      1        33   27.3%  4 3 2 1"), table.out());
        assertTrue(table.out().contains("zb-h1     1        27   11.1%  4 4 4 4"), table.out());
        CliTest.Result json = simulate("--compare", "gpipe,1f1b", "--json");
        assertTrue(json.out().startsWith("[{\"schedule\":\"gpipe\""), json.out());
        assertTrue(json.out().contains("{\"schedule\":\"1f1b\""), json.out());
        CliTest.Result all = simulate("-p", "4", "-m", "6", "--compare");
        assertEquals(0, all.code(), all.err());
        assertTrue(all.out().contains("zb-greedy") && !all.out().contains("interleaved"), all.out());
    }

    @Test
    void writesSvgTraceAndCsvThatLoadsBack(@TempDir Path dir) throws Exception {
        Path svg = dir.resolve("t.svg");
        Path trace = dir.resolve("t.json");
        Path csv = dir.resolve("s.csv");
        CliTest.Result r = simulate("-s", "zb-h1", "--lower", "--svg", svg.toString(), "--trace", trace.toString(), "--csv", csv.toString());
        assertEquals(0, r.code(), r.err());
        assertTrue(Files.readString(svg).startsWith("<svg"));
        assertTrue(Files.readString(trace).contains("\"traceEvents\""));
        assertTrue(Files.readString(csv).startsWith("0F0,0SEND_F0,0F1,0SEND_F1"), Files.readString(csv));
        assertTrue(r.out().contains("rank 0 |F0  sF0"), r.out());
        CliTest.Result loaded = simulate("--load-csv", csv.toString(), "--json");
        assertEquals(0, loaded.code(), loaded.err());
        assertTrue(loaded.out().contains("\"lowered\":true") && loaded.out().contains("\"makespan\":27"), loaded.out());
    }

    @Test
    void aCsvThatDeadlocksIsRejectedWithItsGrid(@TempDir Path dir) throws Exception {
        Path csv = Files.writeString(dir.resolve("cyclic.csv"), "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
        CliTest.Result r = simulate("--load-csv", csv.toString());
        assertEquals(Main.EXIT_BAD_INPUT, r.code(), r.err());
        assertTrue(r.err().contains("deadlock, a cyclic wait"), r.err());
        assertTrue(r.err().contains("[1F1]"), r.err());
        CliTest.Result syntax = simulate("--load-csv", Files.writeString(dir.resolve("bad.csv"), "0F0,0Z0\n").toString());
        CliTest.assertOneLineBadInput(syntax, "bad.csv:1:5: bad action \"0Z0\"");
    }

    @Test
    void badInputIsOneLineWithExitCodeTwo() {
        CliTest.assertOneLineBadInput(simulate("--schedule", "nope"), "unknown schedule \"nope\"", "gpipe, 1f1b, interleaved");
        CliTest.assertOneLineBadInput(simulate("--costs", "x=1"), "--costs: unknown key \"x\"", "f, b, i, w or comm");
        CliTest.assertOneLineBadInput(simulate("--costs", "b=abc"), "--costs: b=abc is not a number");
        CliTest.assertOneLineBadInput(simulate("--costs", "b=1,i=2"), "expected b >= i");
        CliTest.assertOneLineBadInput(simulate("-s", "interleaved", "-m", "6"), "multiple of the 4 pipeline ranks", "try 4 or 8");
        CliTest.assertOneLineBadInput(simulate("-s", "dualpipev", "-m", "6"), "at least 2P = 8 microbatches");
        CliTest.assertOneLineBadInput(simulate("--stages", "0"), "--stages: 0 given, expected a positive integer");
        CliTest.assertOneLineBadInput(simulate("--compare", "1f1b,nope"), "--compare: nope: unknown schedule");
        CliTest.assertOneLineBadInput(simulate("--load-csv", "missing.csv"), "--load-csv: missing.csv does not exist");
        CliTest.assertOneLineBadInput(simulate("--load-csv", "x.csv", "--schedule", "gpipe"), "drop --schedule gpipe");
    }

    @Test
    void memoryLimitShapesZbGreedyAndFlagsOtherSchedules() {
        CliTest.Result greedy = simulate("--json", "-s", "zb-greedy", "-p", "4", "-m", "12", "--memory-limit", "2");
        assertTrue(greedy.out().contains("\"peak_activations\":[2,2,2,"), greedy.out());
        assertTrue(greedy.out().contains("\"memory_limit_violations\":[]"), greedy.out());
        CliTest.Result gpipe = simulate("-s", "gpipe", "--memory-limit", "3");
        assertEquals(0, gpipe.code(), gpipe.err());
        assertTrue(gpipe.out().contains("note: stage 0 holds 8 microbatches of activations at peak, over its limit of 3"), gpipe.out());
    }

    @Test
    void aTrainingConfigSuppliesThePipelineAndFlagsOverrideIt(@TempDir Path dir) throws Exception {
        Path config = CliTest.config(dir, CliTest.SMALL.replace("RUNS", dir.resolve("runs").toString()));
        CliTest.Result r = simulate(config.toString(), "--json");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.out().contains("\"schedule\":\"1f1b\",\"stages\":2,\"virtual_stages\":1,\"microbatches\":4"), r.out());
        CliTest.Result overridden = simulate(config.toString(), "--json", "-m", "6", "-s", "gpipe");
        assertTrue(overridden.out().contains("\"schedule\":\"gpipe\",\"stages\":2,\"virtual_stages\":1,\"microbatches\":6"), overridden.out());
    }

    @Test
    void helpShowsExamples() {
        CliTest.Result r = simulate("--help");
        assertEquals(0, r.code());
        assertTrue(r.out().contains("Examples:") && r.out().contains("--compare"), r.out());
    }

    @Test
    void costsFromARunUseItsMeasuredPerStageCosts(@TempDir Path dir) throws Exception {
        Path run = dir.resolve("run");
        CliTest.Result train = CliTest.run("train", CliTest.config(dir, CliTest.SMALL.replace("RUNS", dir.toString())).toString(),
                "--run-dir", run.toString(), "--max-steps", "3");
        assertEquals(0, train.code(), train.err());
        CliTest.Result r = CliTest.run("simulate", "--costs-from", run.toString());
        assertEquals(0, r.code(), r.err());
        String out = r.out().replace("\n  ", " ");                  // the lines as one, where they wrap
        assertTrue(out.contains("costs mean per stage: F=") && out.contains("costs measured in " + run + " (ms, mean of 2 steps"),
                r.out());
        // the measured costs differ per stage (2 stages: 1 block + embedding, 2 blocks + head), so the ranks' busy times differ
        Matcher m = Pattern.compile("F per stage \\[([0-9.]+), ([0-9.]+)\\]").matcher(out);
        assertTrue(m.find(), r.out());
        assertTrue(!m.group(1).equals(m.group(2)), r.out());
        // measured costs make the slot the shortest action: a grid hundreds of columns wide, folded to 80
        CliTest.Result folded = CliTest.run("simulate", "--costs-from", run.toString(), "--width", "80");
        assertEquals(0, folded.code(), folded.err());
        assertFitsAndHoldsEveryAction(folded.out(), 80, 2, 4);
        CliTest.assertOneLineBadInput(CliTest.run("simulate", "--costs-from", run.toString(), "--stages", "3"),
                "--costs-from:", "measured 2 stages, this simulation has 3");
        CliTest.assertOneLineBadInput(CliTest.run("simulate", "--costs-from", dir.resolve("nope").toString()),
                "--costs-from:", "metrics.jsonl cannot be read");
    }

    @Test
    void widthFoldsTheGridOfEightRanksAndThirtyTwoMicrobatchesIntoBands() {
        CliTest.Result r = simulate("-p", "8", "-m", "32", "--width", "80");
        assertEquals(0, r.code(), r.err());
        assertFitsAndHoldsEveryAction(r.out(), 80, 8, 32);
        assertTrue(r.out().lines().filter(l -> l.startsWith("time   |")).count() >= 5, r.out());
        CliTest.Result wide = simulate("-p", "8", "-m", "32", "--width", "1000");
        assertEquals(1, wide.out().lines().filter(l -> l.startsWith("time   |")).count(), "one band where it fits: " + wide.out());
        assertFitsAndHoldsEveryAction(wide.out(), 1000, 8, 32);
        CliTest.Result lowered = simulate("-p", "8", "-m", "32", "--lower", "--width", "60");
        assertEquals(0, lowered.code(), lowered.err());
        for (String line : lowered.out().lines().toList()) assertTrue(line.length() <= 60, line.length() + ": " + line);
        assertTrue(lowered.out().contains("rank 7 |rF0  F0   B0   sB0"), lowered.out());
        CliTest.assertOneLineBadInput(simulate("--width", "59"), "--width: 59 given, expected at least 60 columns");
        CliTest.assertOneLineBadInput(simulate("--width", "wide"), "--width", "'wide' is not an int");
    }

    /** Every line within {@code width}; each rank's rows, band after band, hold F and B of every microbatch once. */
    private static void assertFitsAndHoldsEveryAction(String out, int width, int ranks, int microbatches) {
        for (String line : out.lines().toList()) assertTrue(line.length() <= width, line.length() + ": " + line);
        for (int rank = 0; rank < ranks; rank++) {
            String prefix = "rank " + rank + " |";
            List<String> cells = out.lines().filter(l -> l.startsWith(prefix))
                    .flatMap(l -> Arrays.stream(l.substring(prefix.length()).trim().split(" +"))).toList();
            for (int mb = 0; mb < microbatches; mb++) {
                assertEquals(1, Collections.frequency(cells, "F" + mb), "rank " + rank + ", F" + mb + ": " + out);
                assertEquals(1, Collections.frequency(cells, "B" + mb), "rank " + rank + ", B" + mb + ": " + out);
            }
        }
    }
}

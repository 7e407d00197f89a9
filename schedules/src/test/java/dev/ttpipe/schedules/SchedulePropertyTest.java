package dev.ttpipe.schedules;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Properties over random pipeline shapes and costs, with a fixed seed so failures reproduce. */
class SchedulePropertyTest {
    private static final long SEED = 20240117L;

    @Test
    void everyGeneratedScheduleValidatesSimulatesAndRoundTrips() {
        Random random = new Random(SEED);
        for (int trial = 0; trial < 120; trial++) {
            int p = 1 + random.nextInt(8);
            CostModel costs = randomCosts(random, p, 1);
            for (String name : Schedules.names()) {
                int v = name.equals("interleaved") ? 2 + random.nextInt(3) : Schedules.defaultVirtualStages(name);
                int m = switch (name) {
                    case "interleaved" -> p * (1 + random.nextInt(4));
                    case "dualpipev" -> 2 * p + random.nextInt(2 * p + 3);
                    default -> 1 + random.nextInt(3 * p + 4);
                };
                CostModel stageCosts = v == 1 ? costs : randomCosts(random, p * v, 1);
                String where = name + " P=" + p + " V=" + v + " M=" + m + " (trial " + trial + ")";
                Schedule s = Schedules.generate(name, p, m, v, stageCosts);
                assertEquals(p, s.ranks(), where);
                assertEquals(p * v, s.stages(), where);
                assertEquals(m, s.microbatches(), where);
                Validator.validate(s);
                Schedule lowered = Lowering.lower(s);
                Validator.validate(lowered);
                assertEquals(lowered, Lowering.lower(lowered), where);
                assertEquals(s, ScheduleCsv.read(ScheduleCsv.write(s), "x.csv"), where);
                assertEquals(lowered, ScheduleCsv.read(ScheduleCsv.write(lowered), "x.csv"), where);

                SimResult computeOnly = Simulator.simulate(s, stageCosts);
                SimResult withComm = Simulator.simulate(lowered, stageCosts);
                assertEquals(computeOnly.makespan(), withComm.makespan(), 1e-9, where);
                double totalWork = 0;
                for (int r = 0; r < p; r++) {
                    assertTrue(computeOnly.busy(r) <= computeOnly.makespan() + 1e-9, where);
                    totalWork += computeOnly.busy(r);
                }
                assertEquals(expectedWork(s, stageCosts), totalWork, 1e-6, where);
                assertTrue(computeOnly.bubbleFraction() >= -1e-12 && computeOnly.bubbleFraction() < 1, where);
            }
        }
    }

    @Test
    void greedyZeroBubbleRespectsTheMemoryLimit() {
        Random random = new Random(SEED + 1);
        for (int trial = 0; trial < 60; trial++) {
            int p = 1 + random.nextInt(8);
            int m = 1 + random.nextInt(4 * p);
            int limit = 1 + random.nextInt(2 * p);
            CostModel costs = randomCosts(random, p, limit);
            Schedule s = Schedules.generate("zb-greedy", p, m, 1, costs);
            SimResult r = Simulator.simulate(s, costs);
            assertEquals(List.of(), r.memoryLimitViolations(), "P=" + p + " M=" + m + " limit " + limit);
            for (int rank = 0; rank < p; rank++) assertTrue(r.peakActivations(rank) <= limit);
        }
    }

    @Test
    void theValidatorAgreesWithANaiveExecutionOnShuffledRows() {
        Random random = new Random(SEED + 2);
        int accepted = 0;
        int rejected = 0;
        for (int trial = 0; trial < 400; trial++) {
            String name = List.of("gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved").get(random.nextInt(5));
            int p = 2 + random.nextInt(4);
            int v = name.equals("interleaved") ? 2 : 1;
            int m = name.equals("interleaved") ? p * (1 + random.nextInt(2)) : 1 + random.nextInt(6);
            Schedule s = Schedules.generate(name, p, m, v, null);
            List<List<Action>> rows = new ArrayList<>();
            for (List<Action> row : s.rows()) rows.add(new ArrayList<>(row));
            for (int swaps = 1 + random.nextInt(3); swaps > 0; swaps--) {
                List<Action> row = rows.get(random.nextInt(p));
                int i = random.nextInt(row.size());
                int j = Math.min(row.size() - 1, i + 1 + random.nextInt(3));
                Action tmp = row.get(i);
                row.set(i, row.get(j));
                row.set(j, tmp);
            }
            Schedule mutated = Schedule.of("mutated", rows);
            boolean naive = NaiveExecution.completes(mutated);
            boolean ok = Validator.check(mutated).ok();
            assertEquals(naive, ok, () -> "validator and naive execution disagree on\n" + ScheduleCsv.write(mutated)
                    + Validator.check(mutated).reason());
            if (ok) {
                accepted++;
                Validator.validate(Lowering.lower(mutated));
            } else {
                rejected++;
            }
        }
        assertTrue(accepted > 20 && rejected > 20, "both outcomes exercised: " + accepted + " / " + rejected);
    }

    static CostModel randomCosts(Random random, int stages, int memoryLimit) {
        double[] f = new double[stages];
        double[] i = new double[stages];
        double[] w = new double[stages];
        double[] comm = new double[stages];
        for (int s = 0; s < stages; s++) {
            f[s] = 0.5 + 1.5 * random.nextDouble();
            i[s] = 0.3 + 1.7 * random.nextDouble();
            w[s] = 0.1 + 1.4 * random.nextDouble();
            comm[s] = random.nextBoolean() ? 0 : 0.5 * random.nextDouble();
        }
        return CostModel.builder().forward(f).backwardInput(i).backwardWeight(w).comm(comm)
                .memoryLimitMicrobatches(memoryLimit).build();
    }

    private static double expectedWork(Schedule s, CostModel costs) {
        double work = 0;
        for (List<Action> row : s.rows()) for (Action a : row) work += costs.duration(a);
        return work;
    }

    /** Executes compute-only rows by repeated passes, straight from the dependency rules. */
    static final class NaiveExecution {
        static boolean completes(Schedule s) {
            Set<Action> done = new HashSet<>();
            int[] next = new int[s.ranks()];
            boolean progress = true;
            while (progress) {
                progress = false;
                for (int r = 0; r < s.ranks(); r++) {
                    while (next[r] < s.row(r).size() && ready(s.row(r).get(next[r]), done, s.stages())) {
                        done.add(s.row(r).get(next[r]++));
                        progress = true;
                    }
                }
            }
            for (int r = 0; r < s.ranks(); r++) if (next[r] < s.row(r).size()) return false;
            return true;
        }

        private static boolean ready(Action a, Set<Action> done, int stages) {
            int s = a.stage();
            int m = a.microbatch();
            return switch (a.kind()) {
                case F -> s == 0 || done.contains(new Action(s - 1, ActionKind.F, m));
                case B, I -> done.contains(new Action(s, ActionKind.F, m)) && (s == stages - 1
                        || done.contains(new Action(s + 1, ActionKind.B, m)) || done.contains(new Action(s + 1, ActionKind.I, m)));
                case W -> done.contains(new Action(s, ActionKind.I, m));
                default -> throw new IllegalArgumentException(a.toString());
            };
        }
    }
}

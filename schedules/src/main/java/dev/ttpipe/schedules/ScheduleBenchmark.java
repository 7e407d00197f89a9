package dev.ttpipe.schedules;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * Prints how long generating, lowering, validating and simulating a schedule takes: the median
 * of several runs after warm-up, in milliseconds.
 *
 * <pre>java -cp schedules/target/classes dev.ttpipe.schedules.ScheduleBenchmark [schedule [P [M [V]]]]</pre>
 * Defaults: 1f1b, P=64, M=512.
 */
public final class ScheduleBenchmark {
    private static final int WARMUP = 5;
    private static final int RUNS = 11;

    private ScheduleBenchmark() {
    }

    /** The phases timed, in order. */
    public static final List<String> PHASES = List.of("generate", "lower", "validate (lowered)",
            "simulate (lowered)", "simulate (compute-only)");

    /**
     * What one benchmark measured: per phase of {@link #PHASES} the median milliseconds of {@code runs}
     * runs after {@code warmup}, the schedule's size and what the simulator made of it.
     */
    public record Result(String schedule, int ranks, int virtualStages, int microbatches, int computeActions,
                         int loweredActions, int runs, int warmup, double[] medianMs, double makespan, double bubble) {
        /** generate + lower + validate + simulate (lowered). */
        public double totalMs() {
            return medianMs[0] + medianMs[1] + medianMs[2] + medianMs[3];
        }
    }

    public static void main(String[] args) {
        String name = args.length > 0 ? args[0] : "1f1b";
        int ranks = args.length > 1 ? Integer.parseInt(args[1]) : 64;
        int microbatches = args.length > 2 ? Integer.parseInt(args[2]) : 512;
        int virtualStages = args.length > 3 ? Integer.parseInt(args[3]) : Schedules.defaultVirtualStages(name);
        print(run(name, ranks, microbatches, virtualStages));
    }

    public static Result run(String name, int ranks, int microbatches, int virtualStages) {
        CostModel costs = CostModel.uniform(1, 2, 1, 1, 0.05);
        double[][] times = new double[PHASES.size()][RUNS];
        Schedule schedule = null;
        SimResult result = null;
        for (int run = -WARMUP; run < RUNS; run++) {
            long t0 = System.nanoTime();
            schedule = Schedules.generate(name, ranks, microbatches, virtualStages, costs);
            long t1 = System.nanoTime();
            Schedule lowered = Lowering.lower(schedule);
            long t2 = System.nanoTime();
            Validator.validate(lowered);
            long t3 = System.nanoTime();
            result = Simulator.simulate(lowered, costs);
            long t4 = System.nanoTime();
            Simulator.simulate(schedule, costs);
            long t5 = System.nanoTime();
            if (run >= 0) {
                times[0][run] = (t1 - t0) / 1e6;
                times[1][run] = (t2 - t1) / 1e6;
                times[2][run] = (t3 - t2) / 1e6;
                times[3][run] = (t4 - t3) / 1e6;
                times[4][run] = (t5 - t4) / 1e6;
            }
        }
        double[] medians = new double[PHASES.size()];
        for (int k = 0; k < medians.length; k++) medians[k] = median(times[k]);
        return new Result(name, ranks, virtualStages, microbatches, schedule.size(), Lowering.lower(schedule).size(), RUNS,
                WARMUP, medians, result.makespan(), result.bubbleFraction());
    }

    public static void print(Result r) {
        System.out.printf(Locale.ROOT, "%s P=%d V=%d M=%d: %d compute actions, %d lowered; median of %d runs after %d warm-up%n",
                r.schedule(), r.ranks(), r.virtualStages(), r.microbatches(), r.computeActions(), r.loweredActions(), r.runs(),
                r.warmup());
        for (int k = 0; k < PHASES.size(); k++) System.out.printf(Locale.ROOT, "  %-24s %9.2f ms%n", PHASES.get(k), r.medianMs()[k]);
        System.out.printf(Locale.ROOT, "  %-24s %9.2f ms%n", "generate..simulate", r.totalMs());
        System.out.printf(Locale.ROOT, "  (makespan %.2f, bubble %.2f%%)%n", r.makespan(), 100 * r.bubble());
    }

    private static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        return sorted[sorted.length / 2];
    }
}

package dev.ttpipe.schedules;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * The schedule generators, by name: {@code gpipe}, {@code 1f1b}, {@code interleaved} (alias
 * {@code interleaved-1f1b}), {@code zb-h1}, {@code zb-h2}, {@code zb-greedy} and {@code dualpipev}.
 * Names are case-insensitive. Every generated schedule is compute-only and validates; {@link
 * Lowering} adds the communication.
 */
public final class Schedules {
    private static final List<String> NAMES = List.of("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-greedy", "dualpipev");

    private Schedules() {
    }

    /** The known schedule names, in the order above (aliases not included). */
    public static List<String> names() {
        return NAMES;
    }

    /**
     * The canonical name for {@code name} (case-insensitive, aliases resolved).
     *
     * @throws ScheduleException listing the known names when {@code name} is not one
     */
    public static String canonicalName(String name) {
        String key = name == null ? "" : name.strip().toLowerCase(Locale.ROOT);
        if (key.equals("interleaved-1f1b")) return "interleaved";
        if (NAMES.contains(key)) return key;
        throw new ScheduleException("unknown schedule \"" + name + "\"; known schedules: "
                + String.join(", ", NAMES) + " (and interleaved-1f1b for interleaved)");
    }

    /** Stages per rank that {@code name} uses unless told otherwise: 2 for interleaved and dualpipev, else 1. */
    public static int defaultVirtualStages(String name) {
        String key = canonicalName(name);
        return key.equals("interleaved") || key.equals("dualpipev") ? 2 : 1;
    }

    /**
     * The most (stage, microbatch) pairs a generated schedule may have: about 3 actions each, so at most
     * ~6 M actions and well under a GiB. Config validation generates the schedule, so without a bound
     * a config of 4096 ranks and 2^20 microbatches asked for 8.6 G actions (found by ConfigLoaderFuzzTest:
     * 4 ranks and 2^20 microbatches took half a minute to validate).
     */
    public static final long MAX_STAGE_MICROBATCHES = 1L << 21;

    /**
     * Generates schedule {@code name} for {@code ranks} pipeline ranks (P), {@code microbatches}
     * (M) and {@code virtualStages} stages per rank (V): 1 for all but interleaved (V >= 2) and
     * dualpipev (V = 2).
     *
     * @param costs per-stage costs and memory limit for {@code zb-greedy}; null means F=1, B=2,
     *              I=W=1, no comm. Other schedules ignore it.
     * @throws ScheduleException for an unknown name, P or M below 1, a V the schedule does not
     *                           take, or an M the schedule cannot use (interleaved: a multiple of
     *                           P; dualpipev: at least 2P), or more than {@link #MAX_STAGE_MICROBATCHES}
     *                           (stage, microbatch) pairs
     */
    public static Schedule generate(String name, int ranks, int microbatches, int virtualStages, CostModel costs) {
        String key = canonicalName(name);
        checkSize(key, ranks, microbatches, (long) ranks * Math.max(1, virtualStages));
        switch (key) {
            case "interleaved" -> {
                if (virtualStages < 2) {
                    throw new ScheduleException("interleaved needs at least 2 virtual stages per rank, got " + virtualStages
                            + "; with one stage per rank use 1f1b");
                }
                return Interleaved1F1B.generate(ranks, microbatches, virtualStages);
            }
            case "dualpipev" -> {
                if (virtualStages != 2) {
                    throw new ScheduleException("dualpipev holds exactly 2 stages per rank (a V shape), got " + virtualStages
                            + " virtual stages");
                }
                return DualPipeV.generate(ranks, microbatches);
            }
            default -> {
                if (virtualStages != 1) {
                    throw new ScheduleException("schedule " + key + " holds one stage per rank, got " + virtualStages
                            + " virtual stages; for more use interleaved");
                }
            }
        }
        return switch (key) {
            case "gpipe" -> GPipe.generate(ranks, microbatches);
            case "1f1b" -> OneFOneB.generate(ranks, microbatches);
            case "zb-h1" -> ZeroBubbleH1.generate(ranks, microbatches);
            case "zb-h2" -> ZeroBubbleH2.generate(ranks, microbatches);
            case "zb-greedy" -> GreedyZeroBubble.generate(ranks, microbatches,
                    costs != null ? costs : CostModel.uniform(1, 2, 1, 1, 0));
            default -> throw new IllegalStateException("no generator for " + key);
        };
    }

    /**
     * The forward-only schedule of inference (evaluation, generation), named {@code forward}: stage r on
     * rank r runs F of every microbatch in order, and nothing else (no backward, no weight update), so
     * rank r works on microbatch m while rank r - 1 works on m + 1. Not among {@link #names()}: no
     * training step can run it.
     */
    public static Schedule forwardOnly(int ranks, int microbatches) {
        checkSize("forward", ranks, microbatches, ranks);
        int[][] stagesOfRank = new int[ranks][];
        for (int r = 0; r < ranks; r++) stagesOfRank[r] = new int[]{r};
        return forwardRows(stagesOfRank, microbatches);
    }

    /**
     * The forward-only schedule over {@code placement}'s stages, each on the rank that holds it there (a
     * training schedule's, interleaved and V-shaped ones included): every rank runs F of its stages in
     * stage order, each stage's microbatches in order, and nothing else. A training job evaluates with it
     * between steps on the ranks it trains on. With one stage per rank it is {@link #forwardOnly(int, int)}.
     */
    public static Schedule forwardOnly(Schedule placement, int microbatches) {
        checkSize("forward", placement.ranks(), microbatches, placement.stages());
        int[][] stagesOfRank = new int[placement.ranks()][];
        for (int r = 0; r < stagesOfRank.length; r++) stagesOfRank[r] = placement.stagesOfRank(r);
        return forwardRows(stagesOfRank, microbatches);
    }

    /** Rank r runs F of each of {@code stagesOfRank[r]} (ascending) for microbatches 0..M-1. */
    private static Schedule forwardRows(int[][] stagesOfRank, int microbatches) {
        List<List<Action>> rows = new ArrayList<>(stagesOfRank.length);
        for (int[] stages : stagesOfRank) {
            List<Action> row = new ArrayList<>(stages.length * microbatches);
            for (int s : stages) for (int m = 0; m < microbatches; m++) row.add(new Action(s, ActionKind.F, m));
            rows.add(row);
        }
        return Schedule.of("forward", rows);
    }

    /** P and M at least 1, and at most {@link #MAX_STAGE_MICROBATCHES} (stage, microbatch) pairs. */
    private static void checkSize(String key, int ranks, int microbatches, long stages) {
        if (ranks < 1) throw new ScheduleException("schedule " + key + " needs at least 1 pipeline rank, got " + ranks);
        if (microbatches < 1) throw new ScheduleException("schedule " + key + " needs at least 1 microbatch, got " + microbatches);
        if (stages * microbatches > MAX_STAGE_MICROBATCHES) {
            throw new ScheduleException("schedule " + key + " of " + stages + " stages x " + microbatches + " microbatches = "
                    + stages * microbatches + " (stage, microbatch) pairs, expected at most " + MAX_STAGE_MICROBATCHES
                    + ": fewer microbatches");
        }
    }
}

package dev.ttpipe.actors.tune;

import dev.ttpipe.schedules.CostModel;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.schedules.ScheduleException;
import dev.ttpipe.schedules.Schedules;
import dev.ttpipe.schedules.SimResult;
import dev.ttpipe.schedules.Simulator;
import dev.ttpipe.stages.Partitioner;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.StagesException;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The tuner's search: every schedule x microbatch count x stages per rank x split x recompute of a
 * {@link Space}, each predicted from {@link LayerCosts} by the discrete-event simulator under each
 * rank's memory. A candidate whose lower bound (its busiest rank's work) cannot beat the ones kept is
 * not simulated; among those simulated, one that another matches in step time (within {@link #TIE})
 * with no more peak memory is dominated and dropped from the ranking. Stops at the time budget.
 */
public final class Search {
    /** Compositions of the blocks over the ranks enumerated in full up to this many; beyond, the balanced split and its neighbours. */
    static final int EXHAUSTIVE_SPLITS = 5000;
    /** Step times within this fraction of each other are a tie, which the smaller peak memory wins. */
    static final double TIE = 0.01;

    /**
     * What to search.
     *
     * @param schedules      schedule names
     * @param microbatches   microbatch counts (divisors of the batch)
     * @param splits         blocks per rank to try; null: searched (all, or the balanced one and its neighbours)
     * @param recompute      runner types to try: false (default), true (memory_efficient)
     * @param ranks          pipeline rank counts P to try (one: the config's)
     * @param maxVirtualStages largest V tried for interleaved
     */
    public record Space(List<String> schedules, List<Integer> microbatches, List<int[]> splits, List<Boolean> recompute,
                        List<Integer> ranks, int maxVirtualStages) {
        public Space(List<String> schedules, List<Integer> microbatches, List<int[]> splits, List<Boolean> recompute,
                     int ranks, int maxVirtualStages) {
            this(schedules, microbatches, splits, recompute, List.of(ranks), maxVirtualStages);
        }
    }

    /**
     * The job's shape: batch size (sequences per step), tokens per sequence, bytes each device of a
     * rank holds, and how a rank's mesh divides parameters (TP) and activations (DDP x TP).
     */
    public record Job(int batchSize, int seqLen, long memoryPerDevice, int tpSize, int ddpSize) {
    }

    /** What a search found: the ranking (not dominated, fitting, fastest first), the rest, and counts. */
    public record Outcome(List<Prediction> ranked, List<Prediction> overflowing, int evaluated, int prunedByBound,
                          int dominated, int invalid, int considered, boolean stoppedAtBudget, double seconds) {
        public Prediction best() {
            return ranked.isEmpty() ? null : ranked.get(0);
        }
    }

    private final LayerCosts costs;
    private final Job job;
    private final Map<String, Schedule> schedules = new HashMap<>();

    public Search(LayerCosts costs, Job job) {
        this.costs = costs;
        this.job = job;
    }

    /** Runs the search for at most {@code budgetSeconds}, keeping at least {@code keep} candidates in the ranking. */
    public Outcome run(Space space, double budgetSeconds, int keep) {
        long t0 = System.nanoTime();
        long deadline = t0 + (long) (budgetSeconds * 1e9);
        List<Prediction> fitting = new ArrayList<>();
        List<Prediction> overflowing = new ArrayList<>();
        int evaluated = 0, pruned = 0, invalid = 0, considered = 0;
        boolean stopped = false;
        double[] kth = {Double.POSITIVE_INFINITY};
        outer:
        for (Candidate c : candidates(space)) {
            if (System.nanoTime() > deadline) {
                stopped = true;
                break outer;
            }
            considered++;
            Evaluation e = prepare(c);
            if (e == null) {
                invalid++;
                continue;
            }
            if (e.lowerBound > kth[0] && e.staticFits) {
                pruned++;
                continue;
            }
            Prediction p = e.simulate();
            evaluated++;
            if (p.fits()) {
                fitting.add(p);
                if (fitting.size() >= keep * 8) {        // tighten the bound now and then, not at every candidate
                    fitting.sort(Comparator.comparingDouble(Prediction::stepSeconds));
                    List<Prediction> kept = undominated(fitting);
                    if (kept.size() >= keep) {
                        kth[0] = kept.get(keep - 1).stepSeconds() * (1 + TIE);
                        fitting.removeIf(q -> q.stepSeconds() > kth[0]);
                    }
                }
            } else {
                overflowing.add(p);
            }
        }
        fitting.sort(Comparator.comparingDouble(Prediction::stepSeconds));
        List<Prediction> kept = undominated(fitting);
        int dominated = fitting.size() - kept.size();
        overflowing.sort(Comparator.comparingDouble(Prediction::stepSeconds));
        return new Outcome(kept, overflowing, evaluated, pruned, dominated, invalid, considered, stopped,
                (System.nanoTime() - t0) / 1e9);
    }

    /** Of {@code sorted} (fastest first), those that no faster one matches in time (within {@link #TIE}) with no more memory. */
    static List<Prediction> undominated(List<Prediction> sorted) {
        List<Prediction> kept = new ArrayList<>();
        for (Prediction p : sorted) {
            boolean beaten = false;
            for (int k = kept.size() - 1; k >= 0 && !beaten; k--) {
                Prediction q = kept.get(k);
                if (p.stepSeconds() > q.stepSeconds() * (1 + TIE)) break;
                beaten = q.peakBytes() <= p.peakBytes();
            }
            if (!beaten) kept.add(p);
        }
        return kept;
    }

    /** Predicts one candidate (null when the schedule or split cannot be built). */
    public Prediction predict(Candidate c) {
        Evaluation e = prepare(c);
        return e == null ? null : e.simulate();
    }

    /**
     * Every candidate of {@code space}, in a fixed order: the rank counts taken in turn (one candidate of each
     * at a time), so that a search stopped by its budget has looked at every rank count alike.
     */
    List<Candidate> candidates(Space space) {
        List<List<Candidate>> byRanks = new ArrayList<>();
        int most = 0;
        for (int p : space.ranks()) {
            Set<Candidate> some = new LinkedHashSet<>();
            candidates(space, p, some);
            byRanks.add(new ArrayList<>(some));
            most = Math.max(most, some.size());
        }
        List<Candidate> out = new ArrayList<>();
        for (int k = 0; k < most; k++) {
            for (List<Candidate> l : byRanks) if (k < l.size()) out.add(l.get(k));
        }
        return out;
    }

    /** The candidates of {@code space} with {@code p} ranks, added to {@code out}. */
    private void candidates(Space space, int p, Set<Candidate> out) {
        int blocks = costs.blocks();
        for (String name : space.schedules()) {
            List<Integer> vs = new ArrayList<>();
            String key = Schedules.canonicalName(name);
            if (key.equals("interleaved")) {
                for (int v = 2; v <= space.maxVirtualStages() && p * v <= blocks; v++) vs.add(v);
            } else {
                vs.add(Schedules.defaultVirtualStages(key));
            }
            for (int v : vs) {
                List<int[]> splits = space.splits() != null ? space.splits() : splits(p, v);
                for (int m : space.microbatches()) {
                    for (int[] split : splits) {
                        if (split.length != p) continue;
                        for (boolean rc : space.recompute()) out.add(new Candidate(key, v, m, split, rc));
                    }
                }
            }
        }
    }

    /** The splits searched for P ranks with V stages each: all when few, else the balanced one and its neighbours. */
    List<int[]> splits(int p, int v) {
        int n = costs.blocks();
        List<int[]> out = new ArrayList<>();
        if (binomial(n - 1, p - 1) <= EXHAUSTIVE_SPLITS) {
            compositions(n, p, v, new int[p], 0, out);
            return out;
        }
        int[] balanced = balanced(p);
        out.add(balanced);
        for (int r = 0; r + 1 < p; r++) {
            for (int d : new int[]{-1, 1}) {
                int[] s = balanced.clone();
                s[r] += d;
                s[r + 1] -= d;
                if (s[r] >= v && s[r + 1] >= v) out.add(s);
            }
        }
        int[] even = new int[p];
        for (int r = 0; r < p; r++) even[r] = n / p + (r < n % p ? 1 : 0);
        out.add(even);
        out.removeIf(s -> Arrays.stream(s).anyMatch(x -> x < v));
        return out;
    }

    /**
     * The contiguous split of the blocks over {@code p} ranks whose most expensive rank is cheapest,
     * each block weighing its F + I + W at the largest microbatch size searched, the embedding on the
     * first rank and the head on the last (exact, by dynamic programming).
     */
    int[] balanced(int p) {
        int n = costs.blocks();
        int mbs = Math.max(1, job.batchSize());
        double[] w = new double[n];
        for (int b = 0; b < n; b++) w[b] = costs.blockF()[b].at(mbs) + costs.blockI()[b].at(mbs) + costs.blockW()[b].at(mbs);
        double embed = costs.embed()[0].at(mbs) + costs.embed()[1].at(mbs) + costs.embed()[2].at(mbs);
        double head = costs.head()[0].at(mbs) + costs.head()[1].at(mbs) + costs.head()[2].at(mbs);
        double[] prefix = new double[n + 1];
        for (int b = 0; b < n; b++) prefix[b + 1] = prefix[b] + w[b];
        // best[r][j]: the smallest bottleneck placing blocks [0, j) on ranks [0, r)
        double[][] best = new double[p + 1][n + 1];
        int[][] cut = new int[p + 1][n + 1];
        for (double[] row : best) Arrays.fill(row, Double.POSITIVE_INFINITY);
        best[0][0] = 0;
        for (int r = 1; r <= p; r++) {
            for (int j = r; j <= n - (p - r); j++) {
                for (int i = r - 1; i < j; i++) {
                    double load = prefix[j] - prefix[i] + (r == 1 ? embed : 0) + (r == p ? head : 0);
                    double v = Math.max(best[r - 1][i], load);
                    if (v < best[r][j]) {
                        best[r][j] = v;
                        cut[r][j] = i;
                    }
                }
            }
        }
        int[] split = new int[p];
        int j = n;
        for (int r = p; r >= 1; r--) {
            int i = cut[r][j];
            split[r - 1] = j - i;
            j = i;
        }
        return split;
    }

    private static void compositions(int left, int parts, int min, int[] acc, int at, List<int[]> out) {
        if (at == parts - 1) {
            if (left >= min) {
                acc[at] = left;
                out.add(acc.clone());
            }
            return;
        }
        for (int k = min; k <= left - min * (parts - at - 1); k++) {
            acc[at] = k;
            compositions(left - k, parts, min, acc, at + 1, out);
        }
    }

    private static double binomial(int n, int k) {
        double r = 1;
        for (int i = 1; i <= k; i++) r = r * (n - k + i) / i;
        return r;
    }

    /** A candidate's schedule, stages, costs and memory, ready to simulate. */
    private final class Evaluation {
        Candidate c;
        Schedule schedule;
        CostModel model;
        long[] staticBytes;
        double lowerBound;
        boolean staticFits;
        long[] params;

        Prediction simulate() {
            SimResult r = Simulator.simulate(schedule, model);
            int p = c.ranks();
            long[] peak = new long[p];
            int worst = -1;
            long over = 0;
            for (int rank = 0; rank < p; rank++) {
                long act = r.peakActivationBytes(rank);
                peak[rank] = staticBytes[rank] + Math.max(0, act) / ((long) job.ddpSize() * job.tpSize());
                long excess = peak[rank] - job.memoryPerDevice();
                if (excess > over) {
                    over = excess;
                    worst = rank;
                }
            }
            double step = r.makespan() + costs.stepTail(params, c.microbatches());
            return new Prediction(c, step, r.bubbleFraction(), peak, worst, over,
                    (double) job.batchSize() * job.seqLen() / step);
        }
    }

    private Evaluation prepare(Candidate c) {
        int p = c.ranks(), v = c.virtualStages();
        if (job.batchSize() % c.microbatches() != 0) return null;
        int mbs = job.batchSize() / c.microbatches();
        if (mbs % job.ddpSize() != 0) return null;
        Schedule schedule;
        String key = c.schedule() + "/" + p + "/" + c.microbatches() + "/" + v;
        if (!schedules.containsKey(key)) {
            Schedule s;
            try {
                s = Schedules.generate(c.schedule(), p, c.microbatches(), v, null);   // as the runtime generates it
            } catch (ScheduleException e) {
                s = null;
            }
            schedules.put(key, s);
        }
        schedule = schedules.get(key);
        if (schedule == null) return null;
        List<StageSlice> slices;
        try {
            slices = Partitioner.fromBlocksPerRank(Arrays.stream(c.blocksPerRank()).boxed().toList(), costs.blocks(), v);
        } catch (StagesException e) {
            return null;
        }
        int stages = slices.size();
        double[] f = new double[stages], i = new double[stages], w = new double[stages], b = new double[stages];
        double[] comm = new double[stages];
        long[] act = new long[stages];
        long[] params = new long[p];
        double[] rankWork = new double[p];
        double total = 0;
        for (int s = 0; s < stages; s++) {
            StageSlice slice = slices.get(s);
            f[s] = costs.stageCost(0, slice, mbs, c.recompute());
            i[s] = costs.stageCost(1, slice, mbs, c.recompute());
            w[s] = costs.stageCost(2, slice, mbs, c.recompute());
            b[s] = i[s] + w[s];
            act[s] = costs.stageActivationBytes(slice, mbs, c.recompute());
            int rank = schedule.rankOfStage(s);
            params[rank] += costs.stageParams(slice);
            rankWork[rank] += c.microbatches() * (f[s] + b[s]);
            total += c.microbatches() * (f[s] + b[s]);
            if (s + 1 < stages && schedule.rankOfStage(s + 1) != rank) {
                comm[s] = costs.hop().seconds(rank, schedule.rankOfStage(s + 1), mbs * costs.inputBytesPerSample());
            }
        }
        Evaluation e = new Evaluation();
        e.c = c;
        e.schedule = schedule;
        e.params = params;
        e.model = CostModel.builder().forward(f).backward(b).backwardInput(i).backwardWeight(w).comm(comm)
                .memoryPerMicrobatchBytes(act).sharedProcessors(costs.sharedProcessors()).build();
        e.staticBytes = new long[p];
        e.staticFits = true;
        double bound = 0;
        for (int r = 0; r < p; r++) {
            e.staticBytes[r] = (long) (params[r] * costs.stateBytesPerParam() / job.tpSize());
            e.staticFits &= e.staticBytes[r] <= job.memoryPerDevice();
            bound = Math.max(bound, rankWork[r]);
        }
        if (costs.sharedProcessors() > 0) bound = Math.max(bound, total / costs.sharedProcessors());
        e.lowerBound = bound + costs.stepTail(params, c.microbatches());
        return e;
    }
}

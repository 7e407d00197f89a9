package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.runtime.ActionEvent;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.schedules.CostModel;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.schedules.SimResult;
import dev.ttpipe.schedules.Simulator;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * What a measured step says about the pipeline: per rank the busy time (compute actions of the
 * schedule: F, B, I, W) and the bubble (idle share of the passes' wall time), the per-stage mean
 * cost of each kind of action, what the simulator predicts for the same schedule with those costs,
 * and the runtime's own overhead between back-to-back actions ({@link #overhead()}).
 */
public final class StepAnalysis {
    private final int ranks;
    private final double wallSeconds;
    private final double[] busySeconds;
    private final Prediction predicted;
    private final Overhead overhead;
    private final StageCosts costs;

    /**
     * What the simulator predicts for the step: a pass's makespan (seconds), the bubble, and each rank's. Kept instead
     * of the simulated timeline, whose actions (1.5 million at 256 ranks and 1024 microbatches) would otherwise live on
     * until the next step's analysis and be copied by the collector meanwhile.
     */
    public record Prediction(double makespan, double bubbleFraction, double[] bubblePerRank) {
        static Prediction of(SimResult r) {
            double[] perRank = new double[r.schedule().ranks()];
            for (int k = 0; k < perRank.length; k++) perRank[k] = r.bubbleFraction(k);
            return new Prediction(r.makespan(), r.bubbleFraction(), perRank);
        }

        public double bubbleFraction(int rank) {
            return bubblePerRank[rank];
        }
    }

    /**
     * The measured mean cost of each kind of action per stage, seconds (the halves of B filled by the
     * cost model's rule when the schedule does not split it), and the mean SEND time.
     */
    public record StageCosts(double[] f, double[] b, double[] i, double[] w, double comm) {
    }

    /**
     * The runtime's own delay before a compute action: from the moment the rank's device was free (the
     * previous compute action ended) and the action's input was on the rank (the transport delivered
     * it, stamped on the transport's thread, or a stage of the same rank produced it), to the moment
     * the action started on the device. Every pair of consecutive compute actions of a rank in a pass
     * is one sample; {@code waitedForData} of them had their input arrive after the device was free.
     * Microseconds.
     */
    public record Overhead(int pairs, int waitedForData, double medianUs, double p90Us, double p99Us, double meanUs) {
        static Overhead of(double[] ns, int waited) {
            if (ns.length == 0) return new Overhead(0, 0, Double.NaN, Double.NaN, Double.NaN, Double.NaN);
            double[] s = ns.clone();
            Arrays.sort(s);
            double sum = 0;
            for (double v : s) sum += v;
            return new Overhead(s.length, waited, quantile(s, 0.5) / 1e3, quantile(s, 0.9) / 1e3, quantile(s, 0.99) / 1e3,
                    sum / s.length / 1e3);
        }

        /** Linear interpolation between the closest ranks of the sorted samples. */
        static double quantile(double[] sorted, double q) {
            double pos = q * (sorted.length - 1);
            int lo = (int) Math.floor(pos);
            int hi = Math.min(sorted.length - 1, lo + 1);
            return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
        }

        /** One line in plain words. */
        public String describe() {
            if (pairs == 0) return "runtime overhead between back-to-back actions: no pairs measured";
            return String.format(Locale.ROOT, "runtime overhead (device free and input there -> next action"
                            + " starts): median %.0f us, p90 %.0f us, p99 %.0f us over %d back-to-back pairs (%d waited for data first)",
                    medianUs, p90Us, p99Us, pairs, waitedForData);
        }
    }

    /** The analysis of a finished step. */
    public static StepAnalysis of(Schedule schedule, Coordinator.StepReport r) {
        long passWall = 0;
        for (int i = 0; i < r.passStartNs().length; i++) passWall += r.passEndNs()[i] - r.passStartNs()[i];
        return new StepAnalysis(schedule, r.events(), passWall);
    }

    /**
     * @param passWallNs total wall time of the passes (the schedule's part of the step)
     */
    public StepAnalysis(Schedule schedule, List<ActionEvent> events, long passWallNs) {
        this.ranks = schedule.ranks();
        int stages = schedule.stages();
        this.wallSeconds = passWallNs / 1e9;
        this.busySeconds = new double[ranks];
        double[][] sum = new double[4][stages];
        int[][] count = new int[4][stages];
        double commSum = 0;
        int commCount = 0;
        for (ActionEvent e : events) {
            int k = kindIndex(e.kind());
            if (k >= 0) {
                busySeconds[e.rank()] += e.durationNs() / 1e9;
                sum[k][e.stage()] += e.durationNs() / 1e9;
                count[k][e.stage()]++;
            } else if (e.kind() == ActionKind.SEND_F || e.kind() == ActionKind.SEND_B) {
                commSum += e.durationNs() / 1e9;
                commCount++;
            }
        }
        double[] f = mean(sum[0], count[0]);
        double[] b = new double[stages], i = new double[stages], w = new double[stages];
        for (int s = 0; s < stages; s++) {
            // Schedules that split B measure I and W; those that do not measure B. The cost model's rule fills the rest.
            double[] biw = CostModel.backwardParts(measured(sum[1], count[1], s), measured(sum[2], count[2], s),
                    measured(sum[3], count[3], s), 0.0);
            b[s] = biw[0];
            i[s] = biw[1];
            w[s] = biw[2];
        }
        double meanComm = commCount == 0 ? 0 : commSum / commCount;
        this.costs = new StageCosts(f, b, i, w, meanComm);
        double[] comm = new double[stages];
        Arrays.fill(comm, meanComm);
        Prediction sim;
        try {
            sim = Prediction.of(Simulator.simulate(schedule, CostModel.builder().forward(f).backward(b).backwardInput(i)
                    .backwardWeight(w).comm(comm).build()));
        } catch (RuntimeException e) {
            sim = null;
        }
        this.predicted = sim;
        this.overhead = overhead(events, ranks);
    }

    private static Double measured(double[] sum, int[] count, int stage) {
        return count[stage] == 0 ? null : sum[stage] / count[stage];
    }

    /** A rank's action in a pass: the key its events are found by (a record, not text: a step of 256 ranks has 1.5 million). */
    private record Key(int pass, Action action) {
    }

    private static Overhead overhead(List<ActionEvent> events, int ranks) {
        double[] gaps = new double[64];
        int count = 0;
        int waited = 0;
        List<List<ActionEvent>> byRank = new ArrayList<>();
        for (int r = 0; r < ranks; r++) byRank.add(new ArrayList<>());
        for (ActionEvent e : events) {
            if (e.rank() >= 0 && e.rank() < ranks && e.pass() >= 0) byRank.get(e.rank()).add(e);
        }
        for (int r = 0; r < ranks; r++) {
            List<ActionEvent> compute = new ArrayList<>();
            Map<Key, ActionEvent> byAction = new HashMap<>();
            for (ActionEvent e : byRank.get(r)) {
                byAction.put(new Key(e.pass(), e.action()), e);
                if (kindIndex(e.kind()) >= 0) compute.add(e);
            }
            compute.sort(Comparator.comparingLong(ActionEvent::startNs));
            ActionEvent prev = null;
            for (ActionEvent e : compute) {
                if (prev != null && e.pass() == prev.pass()) {
                    long ready = dataReadyNs(e, byAction);
                    if (ready > prev.endNs()) waited++;
                    if (count == gaps.length) gaps = Arrays.copyOf(gaps, 2 * count);
                    gaps[count++] = Math.max(0, e.startNs() - Math.max(prev.endNs(), ready));
                }
                prev = e;
            }
        }
        return Overhead.of(Arrays.copyOf(gaps, count), waited);
    }

    /** When {@code e}'s input was on the rank: its RECV's end, else its same-rank producer's end, else never late. */
    private static long dataReadyNs(ActionEvent e, Map<Key, ActionEvent> byAction) {
        int pass = e.pass();
        int s = e.stage(), mb = e.microbatch();
        Action recv, producer;
        switch (e.kind()) {
            case F:
                recv = new Action(s, ActionKind.RECV_F, mb);
                producer = s == 0 ? null : new Action(s - 1, ActionKind.F, mb);
                break;
            case B:
            case I: {
                recv = new Action(s, ActionKind.RECV_B, mb);
                ActionEvent b = byAction.get(new Key(pass, new Action(s + 1, ActionKind.B, mb)));
                producer = new Action(s + 1, b != null ? ActionKind.B : ActionKind.I, mb);
                break;
            }
            default: // W: after its own I
                recv = null;
                producer = new Action(s, ActionKind.I, mb);
        }
        ActionEvent got = recv == null ? null : byAction.get(new Key(pass, recv));
        if (got == null && producer != null) got = byAction.get(new Key(pass, producer));
        return got == null ? Long.MIN_VALUE : got.endNs();
    }

    public StageCosts costs() {
        return costs;
    }

    /** The runtime's overhead between back-to-back compute actions, over every pair of the step. */
    public Overhead overhead() {
        return overhead;
    }

    private static int kindIndex(ActionKind kind) {
        switch (kind) {
            case F: return 0;
            case B: return 1;
            case I: return 2;
            case W: return 3;
            default: return -1;
        }
    }

    private static double[] mean(double[] sum, int[] count) {
        double[] out = new double[sum.length];
        for (int i = 0; i < sum.length; i++) out[i] = count[i] == 0 ? 0 : sum[i] / count[i];
        return out;
    }

    public int ranks() {
        return ranks;
    }

    public double wallSeconds() {
        return wallSeconds;
    }

    public double busySeconds(int rank) {
        return busySeconds[rank];
    }

    /** Measured idle share of rank {@code rank} over the passes' wall time. */
    public double bubble(int rank) {
        return wallSeconds <= 0 ? 0 : Math.max(0, 1 - busySeconds[rank] / wallSeconds);
    }

    /** Measured idle share over all ranks. */
    public double bubble() {
        double busy = 0;
        for (double b : busySeconds) busy += b;
        return wallSeconds <= 0 ? 0 : Math.max(0, 1 - busy / (ranks * wallSeconds));
    }

    public double[] bubblePerRank() {
        double[] out = new double[ranks];
        for (int r = 0; r < ranks; r++) out[r] = bubble(r);
        return out;
    }

    /** The simulator's prediction for the same schedule with the measured mean costs (null if it could not run). */
    public Prediction predicted() {
        return predicted;
    }
}

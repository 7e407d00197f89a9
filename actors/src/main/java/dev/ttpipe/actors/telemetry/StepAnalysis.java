package dev.ttpipe.actors.telemetry;

import dev.ttpipe.schedules.CostModel;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.schedules.SimResult;
import dev.ttpipe.schedules.Simulator;

import java.util.List;
import java.util.Map;

/**
 * What a measured step says about the pipeline: per rank the busy time (compute actions of the
 * schedule: F, B, I, W) and the bubble (idle share of the passes' wall time), the per-stage mean
 * cost of each kind of action, and what the simulator predicts for the same schedule with those
 * costs, so prediction and measurement can be set side by side.
 */
public final class StepAnalysis {
    private final int ranks;
    private final double wallSeconds;
    private final double[] busySeconds;
    private final double[] meanF, meanB, meanI, meanW;
    private final double meanComm;
    private final SimResult predicted;
    private final double dispatchMedianUs, dispatchMeanUs;
    private final int dispatchSamples;

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
            } else if (e.kind().startsWith("SEND")) {
                commSum += e.durationNs() / 1e9;
                commCount++;
            }
        }
        meanF = mean(sum[0], count[0]);
        meanB = mean(sum[1], count[1]);
        meanI = mean(sum[2], count[2]);
        meanW = mean(sum[3], count[3]);
        for (int s = 0; s < stages; s++) {
            // Schedules that split B measure I and W; those that do not measure B. Fill the other from what was measured.
            if (count[1][s] == 0 && (count[2][s] > 0 || count[3][s] > 0)) meanB[s] = meanI[s] + meanW[s];
            if (count[2][s] == 0 && count[1][s] > 0) {
                meanI[s] = meanB[s] / 2;
                meanW[s] = meanB[s] / 2;
            }
        }
        meanComm = commCount == 0 ? 0 : commSum / commCount;
        CostModel costs = CostModel.builder().forward(meanF).backward(meanB).backwardInput(meanI).backwardWeight(meanW)
                .comm(filled(stages, meanComm)).build();
        SimResult sim;
        try {
            sim = Simulator.simulate(schedule, costs);
        } catch (RuntimeException e) {
            sim = null;
        }
        this.predicted = sim;
        double[] gaps = dispatchGaps(events, ranks);
        this.dispatchSamples = gaps.length;
        java.util.Arrays.sort(gaps);
        this.dispatchMedianUs = gaps.length == 0 ? Double.NaN : gaps[gaps.length / 2] / 1e3;
        double sumGaps = 0;
        for (double g : gaps) sumGaps += g;
        this.dispatchMeanUs = gaps.length == 0 ? Double.NaN : sumGaps / gaps.length / 1e3;
    }

    /**
     * The runtime's own cost between two compute actions of a rank when the second one's data was
     * already there: from the end of one kernel to the start of the next (actor message, bookkeeping,
     * hand-over to the device queue). Nanoseconds, one entry per such pair. An action's data is there
     * when its RECV ended (the transport delivered it) or, for a tensor from a stage on the same rank,
     * when the producing action ended; a pair whose second action's data came after the first one
     * ended measures waiting, not the runtime, and is left out.
     */
    private static double[] dispatchGaps(List<ActionEvent> events, int ranks) {
        List<Double> out = new java.util.ArrayList<>();
        for (int r = 0; r < ranks; r++) {
            List<ActionEvent> compute = new java.util.ArrayList<>();
            Map<String, ActionEvent> byLabel = new java.util.HashMap<>();
            for (ActionEvent e : events) {
                if (e.rank() != r || e.pass() < 0) continue;
                byLabel.put(e.pass() + ":" + e.label(), e);
                if (e.isCompute() && kindIndex(e.kind()) >= 0) compute.add(e);
            }
            compute.sort(java.util.Comparator.comparingLong(ActionEvent::startNs));
            ActionEvent prev = null;
            for (ActionEvent e : compute) {
                if (prev != null && e.pass() == prev.pass() && dataReadyNs(e, byLabel) <= prev.endNs()) {
                    out.add((double) (e.startNs() - prev.endNs()));
                }
                prev = e;
            }
        }
        double[] a = new double[out.size()];
        for (int i = 0; i < a.length; i++) a[i] = out.get(i);
        return a;
    }

    /** When {@code e}'s input was on the rank: its RECV's end, else its same-rank producer's end, else the pass start. */
    private static long dataReadyNs(ActionEvent e, Map<String, ActionEvent> byLabel) {
        String pass = e.pass() + ":";
        int s = e.stage(), mb = e.microbatch();
        String recv, producer;
        switch (e.kind()) {
            case "F":
                recv = s + "RECV_F" + mb;
                producer = (s - 1) + "F" + mb;
                break;
            case "B":
            case "I":
                recv = s + "RECV_B" + mb;
                ActionEvent b = byLabel.get(pass + (s + 1) + "B" + mb);
                producer = (s + 1) + (b != null ? "B" : "I") + mb;
                break;
            default: // W: after its own I
                recv = null;
                producer = s + "I" + mb;
        }
        ActionEvent got = recv == null ? null : byLabel.get(pass + recv);
        if (got == null) got = byLabel.get(pass + producer);
        return got == null ? Long.MIN_VALUE : got.endNs();
    }

    /** Median runtime overhead between back-to-back compute actions, microseconds (NaN if none). */
    public double dispatchMedianUs() {
        return dispatchMedianUs;
    }

    public double dispatchMeanUs() {
        return dispatchMeanUs;
    }

    public int dispatchSamples() {
        return dispatchSamples;
    }

    private static int kindIndex(String kind) {
        switch (kind) {
            case "F": return 0;
            case "B": return 1;
            case "I": return 2;
            case "W": return 3;
            default: return -1;
        }
    }

    private static double[] mean(double[] sum, int[] count) {
        double[] out = new double[sum.length];
        for (int i = 0; i < sum.length; i++) out[i] = count[i] == 0 ? 0 : sum[i] / count[i];
        return out;
    }

    private static double[] filled(int n, double v) {
        double[] out = new double[n];
        java.util.Arrays.fill(out, v);
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

    /** The simulator's timeline for the same schedule with the measured mean costs (null if it could not run). */
    public SimResult predicted() {
        return predicted;
    }

    public double meanForward(int stage) {
        return meanF[stage];
    }

    public double meanBackward(int stage) {
        return meanB[stage];
    }

    public double meanComm() {
        return meanComm;
    }
}

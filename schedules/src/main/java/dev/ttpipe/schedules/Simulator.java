package dev.ttpipe.schedules;

import java.util.ArrayList;
import java.util.List;

/**
 * Runs a schedule against a {@link CostModel} and returns its timeline.
 *
 * <p>Each rank runs its row in order. An action starts when the rank is free and all its data
 * has arrived: data produced on the same rank is there when the producer ends; data from
 * another rank arrives {@code comm(hop)} after the producing action (or, in a lowered schedule,
 * the SEND) ends. A RECV blocks its rank until its data arrives; a SEND never blocks. This is a
 * discrete-event simulation evaluated in dependency order, so it is exact and linear in the
 * number of actions. Works on compute-only and lowered schedules alike.
 */
public final class Simulator {
    private Simulator() {
    }

    /**
     * The timeline of {@code schedule} under {@code costs}.
     *
     * @throws ScheduleException when the schedule does not validate (it would deadlock or breaks a
     *                           dependency), with the grid, or when the cost model has per-stage
     *                           values for a different number of stages
     */
    public static SimResult simulate(Schedule schedule, CostModel costs) {
        costs.checkFits(schedule);
        ActionGraph graph = ActionGraph.of(schedule);
        int[] order = graph.executionOrder();
        int stages = schedule.stages();
        ActionKind[] kinds = ActionKind.values();
        double[] duration = new double[kinds.length * stages];
        for (ActionKind k : kinds) {
            for (int s = 0; s < stages; s++) duration[k.ordinal() * stages + s] = costs.duration(new Action(s, k, 0));
        }
        double[] hop = new double[stages];
        for (int s = 0; s < stages; s++) hop[s] = costs.comm(s);

        int n = graph.size;
        double[] start = new double[n];
        double[] end = new double[n];
        if (costs.sharedProcessors() > 0) {
            shared(graph, stages, duration, hop, costs.sharedProcessors(), start, end);
            return result(schedule, graph, start, end, costs);
        }
        for (int i : order) {
            int r = graph.rankOf[i];
            double t = i > graph.rowStart[r] ? end[i - 1] : 0;
            for (int k = graph.depStart[i]; k < graph.depStart[i + 1]; k++) {
                int h = graph.depHop[k];
                double arrival = end[graph.deps[k]] + (h < 0 ? 0 : hop[h]);
                if (arrival > t) t = arrival;
            }
            Action a = graph.actions[i];
            start[i] = t;
            end[i] = t + duration[a.kind().ordinal() * stages + a.stage()];
        }
        return result(schedule, graph, start, end, costs);
    }

    private static SimResult result(Schedule schedule, ActionGraph graph, double[] start, double[] end, CostModel costs) {
        int n = graph.size;
        List<TimedAction> events = new ArrayList<>(n);
        for (int i = 0; i < n; i++) events.add(new TimedAction(graph.rankOf[i], graph.actions[i], start[i], end[i]));
        return SimResult.of(schedule, events, costs);
    }

    /**
     * Processor sharing: ranks run their rows as above, but at any moment the k busy ranks share
     * {@code processors} processors, each progressing at min(1, processors / k). Event-driven: the
     * clock moves to the next completion or data arrival, whichever is first.
     */
    private static void shared(ActionGraph g, int stages, double[] duration, double[] hop, double processors,
                               double[] start, double[] end) {
        int ranks = g.ranks;
        int[] next = new int[ranks];
        int[] running = new int[ranks];
        double[] remaining = new double[ranks];
        boolean[] done = new boolean[g.size];
        for (int r = 0; r < ranks; r++) {
            next[r] = g.rowStart[r];
            running[r] = -1;
        }
        int finished = 0;
        double t = 0;
        while (finished < g.size) {
            double nextArrival = Double.POSITIVE_INFINITY;
            boolean started = true;
            while (started) {                            // start everything ready now; zero-cost actions end at once
                started = false;
                for (int r = 0; r < ranks; r++) {
                    if (running[r] >= 0 || next[r] >= g.rowStart[r + 1]) continue;
                    int i = next[r];
                    double ready = readyAt(g, i, done, end, hop);
                    if (ready > t) {
                        nextArrival = Math.min(nextArrival, ready);
                        continue;
                    }
                    Action a = g.actions[i];
                    start[i] = t;
                    double work = duration[a.kind().ordinal() * stages + a.stage()];
                    if (work <= 0) {
                        end[i] = t;
                        done[i] = true;
                        finished++;
                        next[r]++;
                    } else {
                        running[r] = i;
                        remaining[r] = work;
                    }
                    started = true;
                }
            }
            int busy = 0;
            double soonest = Double.POSITIVE_INFINITY;
            for (int r = 0; r < ranks; r++) {
                if (running[r] < 0) continue;
                busy++;
                soonest = Math.min(soonest, remaining[r]);
            }
            if (busy == 0) {
                if (nextArrival == Double.POSITIVE_INFINITY) break;  // cannot happen for a validated schedule
                t = nextArrival;
                continue;
            }
            double rate = Math.min(1.0, processors / busy);
            double dt = Math.min(soonest / rate, nextArrival - t);
            t += dt;
            for (int r = 0; r < ranks; r++) {
                if (running[r] < 0) continue;
                remaining[r] -= rate * dt;
                if (remaining[r] <= 1e-12 * Math.max(1, t)) {
                    int i = running[r];
                    end[i] = t;
                    done[i] = true;
                    finished++;
                    running[r] = -1;
                    next[r]++;
                }
            }
        }
    }

    /** When action i's inputs are all there, or +infinity while a producer has not finished. */
    private static double readyAt(ActionGraph g, int i, boolean[] done, double[] end, double[] hop) {
        double t = 0;
        for (int k = g.depStart[i]; k < g.depStart[i + 1]; k++) {
            int d = g.deps[k];
            if (!done[d]) return Double.POSITIVE_INFINITY;
            int h = g.depHop[k];
            t = Math.max(t, end[d] + (h < 0 ? 0 : hop[h]));
        }
        return t;
    }
}

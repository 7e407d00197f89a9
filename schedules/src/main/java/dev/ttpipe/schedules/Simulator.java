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
        List<TimedAction> events = new ArrayList<>(n);
        for (int i = 0; i < n; i++) events.add(new TimedAction(graph.rankOf[i], graph.actions[i], start[i], end[i]));
        return SimResult.of(schedule, events, costs);
    }
}

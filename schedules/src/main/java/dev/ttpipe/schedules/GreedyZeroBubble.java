package dev.ttpipe.schedules;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The cost-driven zero-bubble scheduler, after the heuristic of Zero Bubble Pipeline Parallelism
 * (arXiv 2401.10241, section 3.1), for one stage per rank.
 *
 * <p>It plays the pipeline forward in time with the given per-stage F, I, W and comm costs. A
 * free rank, earliest first, picks its next action: in warm-up as many forwards as the memory
 * limit allows; then F and I in turn as they become ready; a pending W fills any gap that is at
 * least W long, or that the memory limit forces (a W frees an activation); the remaining W's
 * close the schedule. The paper's switches are searched: whether a forward may delay a backward
 * that is (or may be) about to become ready, whether a W may fill a gap shorter than itself, and
 * whether warm-up stops at 1F1B's depth (P-r on rank r). The candidate with the smallest
 * simulated makespan wins.
 *
 * <p>The memory limit per stage is the cost model's limit in microbatches; without one it is P
 * (1F1B's peak on rank 0, the paper's ZB-1p setting).
 */
final class GreedyZeroBubble {
    private final int ranks;
    private final int microbatches;
    private final ForwardRule forwardRule;
    private final boolean weightFillsShortGaps;
    private final boolean shortWarmup;
    private final double[] forward;
    private final double[] input;
    private final double[] weight;
    private final double[] comm;
    private final int[] limit;

    private final double[] free;
    private final int[] forwards;
    private final int[] inputs;
    private final int[] weights;
    private final boolean[] lastWasForward;
    private final boolean[] blocked;
    private final double[] forwardEnd;
    private final double[] inputEnd;
    private final List<List<Action>> rows;
    /** Set when every rank was blocked; until the next progress, ranks wait for known times only. */
    private boolean stalled;

    private GreedyZeroBubble(int ranks, int microbatches, CostModel costs, ForwardRule forwardRule,
                             boolean weightFillsShortGaps, boolean shortWarmup) {
        this.ranks = ranks;
        this.microbatches = microbatches;
        this.forwardRule = forwardRule;
        this.weightFillsShortGaps = weightFillsShortGaps;
        this.shortWarmup = shortWarmup;
        forward = new double[ranks];
        input = new double[ranks];
        weight = new double[ranks];
        comm = new double[ranks];
        limit = new int[ranks];
        for (int s = 0; s < ranks; s++) {
            forward[s] = costs.forward(s);
            input[s] = costs.backwardInput(s);
            weight[s] = costs.backwardWeight(s);
            comm[s] = costs.comm(s);
            int l = costs.memoryLimitMicrobatches(s);
            limit[s] = l < 0 ? ranks : Math.max(1, l);
        }
        free = new double[ranks];
        forwards = new int[ranks];
        inputs = new int[ranks];
        weights = new int[ranks];
        lastWasForward = new boolean[ranks];
        blocked = new boolean[ranks];
        forwardEnd = new double[ranks * microbatches];
        inputEnd = new double[ranks * microbatches];
        rows = new ArrayList<>(ranks);
        for (int r = 0; r < ranks; r++) rows.add(new ArrayList<>(3 * microbatches));
    }

    static Schedule generate(int ranks, int microbatches, CostModel costs) {
        if (costs.stages() != 0 && costs.stages() != ranks) {
            throw new ScheduleException("zb-greedy holds one stage per rank, so it needs costs for " + ranks
                    + " stages, got " + costs.stages());
        }
        Schedule best = null;
        double bestMakespan = Double.POSITIVE_INFINITY;
        for (ForwardRule rule : ForwardRule.values()) {
            for (boolean shortGaps : new boolean[]{false, true}) {
                for (boolean shortWarmup : new boolean[]{false, true}) {
                    Schedule candidate = new GreedyZeroBubble(ranks, microbatches, costs, rule, shortGaps, shortWarmup).run();
                    double makespan = Simulator.simulate(candidate, costs).makespan();
                    if (makespan < bestMakespan) {
                        best = candidate;
                        bestMakespan = makespan;
                    }
                }
            }
        }
        return best;
    }

    private Schedule run() {
        while (true) {
            int r = nextRank();
            if (r < 0) break;
            decide(r);
        }
        return Schedule.of("zb-greedy", rows);
    }

    /** The unfinished, unblocked rank that is free earliest; -1 when all are finished. */
    private int nextRank() {
        int best = -1;
        boolean unfinished = false;
        for (int r = 0; r < ranks; r++) {
            if (weights[r] == microbatches) continue;
            unfinished = true;
            if (!blocked[r] && (best < 0 || free[r] < free[best])) best = r;
        }
        if (best < 0 && unfinished) {
            // every rank waits for something not yet placed: let them settle for what they know
            if (stalled) throw new IllegalStateException("zb-greedy: no rank can make progress");
            stalled = true;
            Arrays.fill(blocked, false);
            for (int r = 0; r < ranks; r++) {
                if (weights[r] < microbatches && (best < 0 || free[r] < free[best])) best = r;
            }
        }
        return best;
    }

    private void decide(int r) {
        double now = free[r];
        int m = forwards[r];
        int cap = shortWarmup && inputs[r] == 0 ? Math.min(limit[r], ranks - r) : limit[r];
        boolean memoryFull = m - weights[r] >= cap;
        double forwardReady = Double.POSITIVE_INFINITY;
        double forwardBound = Double.POSITIVE_INFINITY;
        if (m < microbatches) {
            if (r == 0) forwardReady = 0;
            else if (forwards[r - 1] > m) forwardReady = forwardEnd[(r - 1) * microbatches + m] + comm[r - 1];
            else forwardBound = free[r - 1] + forward[r - 1] + comm[r - 1];
        }
        double inputReady = Double.POSITIVE_INFINITY;
        double inputBound = Double.POSITIVE_INFINITY;
        int k = inputs[r];
        if (k < m) {
            double own = forwardEnd[r * microbatches + k];
            if (r == ranks - 1) inputReady = own;
            else if (inputs[r + 1] > k) inputReady = Math.max(own, inputEnd[(r + 1) * microbatches + k] + comm[r]);
            else inputBound = Math.max(own, free[r + 1] + input[r + 1] + comm[r]);
        }
        boolean forwardArrived = forwardReady <= now;
        boolean canForward = forwardArrived && !memoryFull;
        boolean canInput = inputReady <= now;
        boolean weightPending = weights[r] < inputs[r];

        if (canInput && (lastWasForward[r] || !forwardArrived)) {
            runInput(r, now);
        } else if (forwardArrived && memoryFull && weightPending) {
            runWeight(r, now); // frees an activation so that the forward can run next
        } else if (canForward && (canInput || !forwardWouldDelayInput(r, now, inputReady, inputBound))) {
            runForward(r, now);
        } else if (canInput) {
            runInput(r, now);
        } else {
            // nothing to run now: known = when a pending F or I is sure to be ready; bound = the
            // earliest an F or I whose producer has not been placed yet could become ready
            double known = canForward ? inputReady : Math.min(memoryFull ? Double.POSITIVE_INFINITY : forwardReady, inputReady);
            double bound = Math.min(memoryFull ? Double.POSITIVE_INFINITY : forwardBound, inputBound);
            double gap = Math.min(known, bound) - now;
            if (weightPending && (gap >= weight[r] || (weightFillsShortGaps && gap > 0))) {
                runWeight(r, now);
            } else if ((bound < known && !stalled) || known == Double.POSITIVE_INFINITY) {
                blocked[r] = true;
            } else {
                free[r] = known;
                stalled = false;
            }
        }
    }

    private boolean forwardWouldDelayInput(int r, double now, double inputReady, double inputBound) {
        double end = now + forward[r];
        if (stalled) return false;
        return switch (forwardRule) {
            case ALWAYS -> false;
            case UNLESS_BACKWARD_READY -> inputReady < end;
            case UNLESS_BACKWARD_MAY_BE_READY -> Math.min(inputReady, inputBound) < end;
        };
    }

    private void runForward(int r, double now) {
        int m = forwards[r]++;
        free[r] = forwardEnd[r * microbatches + m] = now + forward[r];
        lastWasForward[r] = true;
        emit(r, new Action(r, ActionKind.F, m));
    }

    private void runInput(int r, double now) {
        int m = inputs[r]++;
        free[r] = inputEnd[r * microbatches + m] = now + input[r];
        lastWasForward[r] = false;
        emit(r, new Action(r, ActionKind.I, m));
    }

    private void runWeight(int r, double now) {
        int m = weights[r]++;
        free[r] = now + weight[r];
        emit(r, new Action(r, ActionKind.W, m));
    }

    private void emit(int r, Action action) {
        rows.get(r).add(action);
        Arrays.fill(blocked, false);
        stalled = false;
    }

    /** When a ready forward may run although an I of the same rank becomes ready before it ends. */
    private enum ForwardRule {
        ALWAYS,
        /** not when that I's data has been produced already */
        UNLESS_BACKWARD_READY,
        /** not even when it only could arrive, judging by when its producer's rank is free */
        UNLESS_BACKWARD_MAY_BE_READY
    }
}

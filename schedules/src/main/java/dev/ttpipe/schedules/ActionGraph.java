package dev.ttpipe.schedules;

import java.util.Arrays;
import java.util.List;

import static dev.ttpipe.schedules.ActionKind.B;
import static dev.ttpipe.schedules.ActionKind.F;
import static dev.ttpipe.schedules.ActionKind.I;
import static dev.ttpipe.schedules.ActionKind.RECV_B;
import static dev.ttpipe.schedules.ActionKind.RECV_F;
import static dev.ttpipe.schedules.ActionKind.REDUCE_GRAD;
import static dev.ttpipe.schedules.ActionKind.SEND_B;
import static dev.ttpipe.schedules.ActionKind.SEND_F;
import static dev.ttpipe.schedules.ActionKind.W;

/**
 * The data dependencies of a schedule's actions, flattened into primitive arrays: action {@code i}
 * of the flat numbering is step {@code i - rowStart[r]} of rank {@code r}. Building it checks that
 * every dependency exists, comes earlier when it is on the same rank, and that every (stage,
 * microbatch) is computed exactly once; {@link #executionOrder()} then runs the rows with blocking
 * semantics and reports a deadlock.
 *
 * <p>Dependencies, besides the order within a row: F(s,m) needs F(s-1,m); B or I of (s,m) needs
 * F(s,m) and the input gradient (B or I) of (s+1,m); W(s,m) needs I(s,m); REDUCE_GRAD(s) needs
 * every weight gradient (W, or B) of stage s; OPTIMIZER_STEP(s) needs REDUCE_GRAD(s), or every
 * weight gradient when there is none. In a lowered schedule data crosses ranks only through
 * comm actions: the consumer needs its RECV, the RECV needs the matching SEND, the SEND needs the
 * producer. A SEND never blocks (the transport buffers early arrivals); a RECV blocks until its
 * SEND has run.
 */
final class ActionGraph {
    final Schedule schedule;
    final int ranks;
    final int stages;
    final int microbatches;
    final int size;
    /** Flat index of each rank's first action; {@code rowStart[ranks] == size}. */
    final int[] rowStart;
    final Action[] actions;
    final int[] rankOf;
    /** Dependencies of action i: {@code deps[depStart[i] .. depStart[i+1])}. */
    final int[] depStart;
    final int[] deps;
    /** For each dependency: the stage boundary (s between s and s+1) it crosses ranks at, or -1 when local. */
    final int[] depHop;

    /** A dependency that is an input gradient, either B or I ({@link #depText}). */
    private static final int B_OR_I = -1;
    /** Kinds that carry a microbatch are the first eight of {@link ActionKind}. */
    private static final int MICROBATCH_KINDS = 8;
    private final int[] index;
    private final int[] perStageIndex;
    private int[] depBuf = new int[64];
    private int[] hopBuf = new int[64];
    private int depCount;
    private Problem problem;

    private ActionGraph(Schedule schedule) {
        this.schedule = schedule;
        this.ranks = schedule.ranks();
        this.stages = schedule.stages();
        this.microbatches = schedule.microbatches();
        this.size = schedule.size();
        this.rowStart = new int[ranks + 1];
        this.actions = new Action[size];
        this.rankOf = new int[size];
        int i = 0;
        for (int r = 0; r < ranks; r++) {
            rowStart[r] = i;
            for (Action a : schedule.row(r)) {
                actions[i] = a;
                rankOf[i++] = r;
            }
        }
        rowStart[ranks] = size;
        this.index = new int[MICROBATCH_KINDS * stages * Math.max(microbatches, 1)];
        this.perStageIndex = new int[2 * stages];
        this.depStart = new int[size + 1];
        Arrays.fill(index, -1);
        Arrays.fill(perStageIndex, -1);
        linkAll();
        this.deps = Arrays.copyOf(depBuf, depCount);
        this.depHop = Arrays.copyOf(hopBuf, depCount);
        depBuf = null;
        hopBuf = null;
    }

    /**
     * The graph of {@code schedule}.
     *
     * @throws ScheduleException with the first offending action on the grid when an action is
     *                           duplicated, a dependency is missing or comes later on its rank, or
     *                           a (stage, microbatch) is not computed completely
     */
    static ActionGraph of(Schedule schedule) {
        checkMicrobatchNumbering(schedule);
        ActionGraph graph = new ActionGraph(schedule);
        if (graph.problem == null) graph.checkComplete();
        if (graph.problem != null) throw graph.problem.toException(schedule);
        return graph;
    }

    int stepOf(int i) {
        return i - rowStart[rankOf[i]];
    }

    /** Flat index of the action, or -1 when the schedule has none. */
    int find(ActionKind kind, int stage, int microbatch) {
        if (stage < 0 || stage >= stages) return -1;
        if (!kind.needsMicrobatch()) return perStageIndex[(kind == REDUCE_GRAD ? 0 : 1) * stages + stage];
        if (microbatch < 0 || microbatch >= microbatches) return -1;
        return index[(kind.ordinal() * stages + stage) * microbatches + microbatch];
    }

    /**
     * Runs the rows with blocking semantics (an action starts once its row predecessor and all its
     * dependencies have run) and returns the flat indices in an order they can run in.
     *
     * @throws ScheduleException describing the cyclic wait, with the grid, when some rank can
     *                           never finish
     */
    int[] executionOrder() {
        int[] succStart = new int[size + 1];
        for (int k = 0; k < deps.length; k++) succStart[deps[k] + 1]++;
        for (int i = 0; i < size; i++) succStart[i + 1] += succStart[i];
        int[] succ = new int[deps.length];
        int[] fill = Arrays.copyOf(succStart, size);
        int[] waiting = new int[size];
        for (int i = 0; i < size; i++) {
            for (int k = depStart[i]; k < depStart[i + 1]; k++) succ[fill[deps[k]]++] = i;
            waiting[i] = depStart[i + 1] - depStart[i];
        }
        for (int r = 0; r < ranks; r++) {
            for (int i = rowStart[r] + 1; i < rowStart[r + 1]; i++) waiting[i]++;
        }
        int[] order = new int[size];
        int head = 0;
        int tail = 0;
        for (int r = 0; r < ranks; r++) {
            int first = rowStart[r];
            if (first < rowStart[r + 1] && waiting[first] == 0) order[tail++] = first;
        }
        while (head < tail) {
            int i = order[head++];
            int next = i + 1;
            if (next < rowStart[rankOf[i] + 1] && --waiting[next] == 0) order[tail++] = next;
            for (int k = succStart[i]; k < succStart[i + 1]; k++) {
                if (--waiting[succ[k]] == 0) order[tail++] = succ[k];
            }
        }
        if (tail < size) throw deadlock(order, tail);
        return order;
    }

    // ---- building -------------------------------------------------------------------------

    private static void checkMicrobatchNumbering(Schedule schedule) {
        // every (stage, microbatch) needs at least F and B, so a huge index means a gap
        long needed = 2L * schedule.stages() * schedule.microbatches();
        if (needed <= schedule.size()) return;
        if ((long) schedule.stages() * schedule.microbatches() <= 1L << 20) return;
        Action largest = null;
        for (List<Action> row : schedule.rows()) {
            for (Action a : row) if (largest == null || a.microbatch() > largest.microbatch()) largest = a;
        }
        throw new ScheduleException(schedule.name() + ": microbatches must be numbered 0..M-1 without gaps, but "
                + largest + " names microbatch " + largest.microbatch() + " in a schedule of only "
                + schedule.size() + " actions");
    }

    private void linkAll() {
        for (int i = 0; i < size; i++) indexAction(i);
        for (int i = 0; i < size; i++) {
            depStart[i] = depCount;
            link(i);
        }
        depStart[size] = depCount;
    }

    private void indexAction(int i) {
        Action a = actions[i];
        int slot;
        int[] table;
        if (a.kind().needsMicrobatch()) {
            table = index;
            slot = (a.kind().ordinal() * stages + a.stage()) * microbatches + a.microbatch();
        } else {
            table = perStageIndex;
            slot = (a.kind() == REDUCE_GRAD ? 0 : 1) * stages + a.stage();
        }
        int earlier = table[slot];
        if (earlier < 0) {
            table[slot] = i;
        } else {
            report(i, a + " appears twice: rank " + rankOf[i] + " runs it at steps " + stepOf(earlier) + " and "
                    + stepOf(i) + "; each action runs exactly once");
        }
    }

    private void link(int i) {
        Action a = actions[i];
        int s = a.stage();
        int m = a.microbatch();
        int r = rankOf[i];
        boolean lowered = schedule.isLowered();
        switch (a.kind()) {
            case F -> {
                if (s > 0) {
                    if (schedule.rankOfStage(s - 1) == r) local(i, find(F, s - 1, m), F.ordinal(), s - 1, m);
                    else if (lowered) needRecv(i, RECV_F, s - 1);
                    else remote(i, find(F, s - 1, m), s - 1, F.ordinal(), s - 1, m);
                }
            }
            case B, I -> {
                if (a.kind() == I && find(B, s, m) >= 0) {
                    report(i, a + " and " + s + "B" + m + " are both scheduled; B is the whole backward and excludes I and W");
                }
                local(i, find(F, s, m), F.ordinal(), s, m);
                if (s < stages - 1) {
                    if (schedule.rankOfStage(s + 1) == r) local(i, inputGrad(s + 1, m), B_OR_I, s + 1, m);
                    else if (lowered) needRecv(i, RECV_B, s);
                    else remote(i, inputGrad(s + 1, m), s, B_OR_I, s + 1, m);
                }
            }
            case W -> {
                if (find(B, s, m) >= 0) {
                    report(i, a + " and " + s + "B" + m + " are both scheduled; B already computes the weight gradient");
                }
                local(i, find(I, s, m), I.ordinal(), s, m);
            }
            case SEND_F -> {
                if (commPeerOk(i, s + 1, "send its forward output to")) {
                    local(i, find(F, s, m), F.ordinal(), s, m);
                    matchingRecv(i, find(RECV_F, s + 1, m), RECV_F.ordinal(), s + 1, m);
                }
            }
            case SEND_B -> {
                if (commPeerOk(i, s - 1, "send its input gradient to")) {
                    local(i, inputGrad(s, m), B_OR_I, s, m);
                    matchingRecv(i, find(RECV_B, s - 1, m), RECV_B.ordinal(), s - 1, m);
                }
            }
            case RECV_F -> {
                if (commPeerOk(i, s - 1, "receive its forward input from")) {
                    remote(i, find(SEND_F, s - 1, m), s - 1, SEND_F.ordinal(), s - 1, m);
                }
            }
            case RECV_B -> {
                if (commPeerOk(i, s + 1, "receive its output gradient from")) {
                    remote(i, find(SEND_B, s + 1, m), s, SEND_B.ordinal(), s + 1, m);
                }
            }
            case REDUCE_GRAD -> needAllWeightGrads(i, s);
            case OPTIMIZER_STEP -> {
                int reduce = find(REDUCE_GRAD, s, -1);
                if (reduce >= 0) local(i, reduce, REDUCE_GRAD.ordinal(), s, -1);
                else needAllWeightGrads(i, s);
            }
        }
    }

    private int inputGrad(int stage, int microbatch) {
        int i = find(I, stage, microbatch);
        return i >= 0 ? i : find(B, stage, microbatch);
    }

    private int weightGrad(int stage, int microbatch) {
        int w = find(W, stage, microbatch);
        return w >= 0 ? w : find(B, stage, microbatch);
    }

    private void needAllWeightGrads(int i, int stage) {
        for (int m = 0; m < microbatches; m++) {
            int w = weightGrad(stage, m);
            if (w >= 0) local(i, w, W.ordinal(), stage, m);
        }
    }

    private boolean commPeerOk(int i, int peerStage, String what) {
        Action a = actions[i];
        if (peerStage < 0 || peerStage >= stages) {
            report(i, a + " has no peer: there is no stage " + peerStage + " to " + what
                    + " (stages are 0.." + (stages - 1) + ")");
            return false;
        }
        int r = rankOf[i];
        if (schedule.rankOfStage(peerStage) == r) {
            report(i, a + " is not needed: stages " + a.stage() + " and " + peerStage + " both live on rank " + r
                    + ", which hands data over locally without SEND/RECV");
            return false;
        }
        return true;
    }

    private void needRecv(int i, ActionKind recvKind, int peerStage) {
        Action a = actions[i];
        int recvIndex = find(recvKind, a.stage(), a.microbatch());
        if (recvIndex < 0) {
            report(i, a + " needs " + depText(recvKind.ordinal(), a.stage(), a.microbatch()) + " (its " + (recvKind == RECV_F ? "input comes" : "output gradient comes")
                    + " from stage " + peerStage + " on rank " + schedule.rankOfStage(peerStage) + "), which rank "
                    + rankOf[i] + " never runs");
            return;
        }
        local(i, recvIndex, recvKind.ordinal(), a.stage(), a.microbatch());
    }

    private void matchingRecv(int i, int recvIndex, int kind, int stage, int mb) {
        if (recvIndex < 0) {
            Action a = actions[i];
            int peer = a.kind() == SEND_F ? a.stage() + 1 : a.stage() - 1;
            report(i, a + " has no matching " + depText(kind, stage, mb) + " on rank " + schedule.rankOfStage(peer));
        }
    }

    /**
     * A dependency in words, built only for a problem's message (a graph of a million actions would otherwise build a
     * few million strings it never shows): the action {@code stage, kind, mb} ({@code 2F3}, {@code 0REDUCE_GRAD}), or
     * for {@link #B_OR_I} the input gradient's two forms ({@code 2B3 or 2I3}).
     */
    private static String depText(int kind, int stage, int mb) {
        if (kind == B_OR_I) return stage + "B" + mb + " or " + stage + "I" + mb;
        return stage + ActionKind.values()[kind].name() + (mb >= 0 ? Integer.toString(mb) : "");
    }

    private void local(int i, int dep, int kind, int stage, int mb) {
        if (dep < 0) {
            report(i, actions[i] + " needs " + depText(kind, stage, mb) + ", which no rank runs");
            return;
        }
        if (dep > i) {
            report(i, actions[i] + " at step " + stepOf(i) + " needs " + actions[dep] + ", which rank " + rankOf[i]
                    + " only runs later, at step " + stepOf(dep));
            return;
        }
        add(dep, -1);
    }

    private void remote(int i, int dep, int hop, int kind, int stage, int mb) {
        if (dep < 0) {
            report(i, actions[i] + " needs " + depText(kind, stage, mb) + ", which no rank runs");
            return;
        }
        add(dep, hop);
    }

    private void add(int dep, int hop) {
        if (depCount == depBuf.length) {
            depBuf = Arrays.copyOf(depBuf, depCount * 2);
            hopBuf = Arrays.copyOf(hopBuf, depCount * 2);
        }
        depBuf[depCount] = dep;
        hopBuf[depCount++] = hop;
    }

    private void checkComplete() {
        for (int s = 0; s < stages; s++) {
            for (int m = 0; m < microbatches; m++) {
                int f = find(F, s, m);
                int b = find(B, s, m);
                int in = find(I, s, m);
                if (f < 0) {
                    report(b >= 0 ? b : in, "stage " + s + " never runs its forward for microbatch " + m
                            + " (" + s + "F" + m + "); every stage runs every microbatch 0.." + (microbatches - 1));
                } else if (b < 0 && in < 0) {
                    report(f, "stage " + s + " never runs a backward for microbatch " + m + " (" + s + "B" + m
                            + ", or " + s + "I" + m + " and " + s + "W" + m + ")");
                } else if (in >= 0 && find(W, s, m) < 0) {
                    report(in, actions[in] + " has no " + s + "W" + m + ": the weight gradient is never computed");
                }
                if (problem != null) return;
            }
        }
    }

    private void report(int i, String reason) {
        Problem p = new Problem(i < 0 ? -1 : rankOf[i], i < 0 ? -1 : stepOf(i), reason);
        if (problem == null || p.isBefore(problem)) problem = p;
    }

    // ---- deadlock -------------------------------------------------------------------------

    private ScheduleException deadlock(int[] order, int executedCount) {
        boolean[] done = new boolean[size];
        for (int k = 0; k < executedCount; k++) done[order[k]] = true;
        int[] headOf = new int[ranks];
        int[] waitsFor = new int[ranks];
        Arrays.fill(headOf, -1);
        int start = -1;
        for (int r = 0; r < ranks; r++) {
            for (int i = rowStart[r]; i < rowStart[r + 1]; i++) {
                if (!done[i]) {
                    headOf[r] = i;
                    break;
                }
            }
            if (headOf[r] < 0) continue;
            int h = headOf[r];
            waitsFor[r] = -1;
            for (int k = depStart[h]; k < depStart[h + 1]; k++) {
                if (!done[deps[k]]) {
                    waitsFor[r] = deps[k];
                    break;
                }
            }
            if (start < 0 || stepOf(h) < stepOf(headOf[start])) start = r;
        }
        // every blocked rank waits for an action of another blocked rank: follow until a rank repeats
        int[] seenAt = new int[ranks];
        Arrays.fill(seenAt, -1);
        int[] path = new int[ranks + 1];
        int len = 0;
        int r = start;
        while (seenAt[r] < 0) {
            seenAt[r] = len;
            path[len++] = r;
            r = rankOf[waitsFor[r]];
        }
        int cycleStart = seenAt[r];
        int first = r;
        for (int k = cycleStart; k < len; k++) {
            if (stepOf(headOf[path[k]]) < stepOf(headOf[first])) first = path[k];
        }
        StringBuilder why = new StringBuilder("deadlock, a cyclic wait: ");
        int cycleLength = len - cycleStart;
        int rank = first;
        for (int k = 0; k < cycleLength; k++) {
            if (k == 4 && cycleLength > 5) {
                why.append("... (").append(cycleLength - 4).append(" more ranks)");
                break;
            }
            int h = headOf[rank];
            int d = waitsFor[rank];
            if (k > 0) why.append("; ");
            why.append("rank ").append(rank).append(" blocks at step ").append(stepOf(h)).append(" (").append(actions[h])
                    .append(") until rank ").append(rankOf[d]).append(" runs ").append(actions[d])
                    .append(" (its step ").append(stepOf(d)).append(')');
            rank = rankOf[d];
        }
        return new Problem(first, stepOf(headOf[first]), why.toString()).toException(schedule);
    }

    /** A located failure; earlier steps (then lower ranks) come first. */
    private record Problem(int rank, int step, String reason) {
        boolean isBefore(Problem other) {
            if (other.step < 0) return step >= 0;
            if (step < 0) return false;
            return step != other.step ? step < other.step : rank < other.rank;
        }

        ScheduleException toException(Schedule schedule) {
            return new ScheduleException(schedule.name() + ": " + reason, StepGrid.render(schedule, rank, step));
        }
    }
}

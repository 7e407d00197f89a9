package dev.ttpipe.schedules;

/**
 * One action on a timeline: which rank ran it, from when to when (in the cost model's time unit,
 * or whatever unit a measured timeline uses).
 */
public record TimedAction(int rank, Action action, double start, double end) {
    public TimedAction {
        if (action == null) throw new IllegalArgumentException("timed action without an action");
        if (rank < 0) throw new IllegalArgumentException("rank " + rank + " of " + action + " is negative");
        if (!(end >= start)) throw new IllegalArgumentException(action + " on rank " + rank + " ends at " + end
                + ", before it starts at " + start);
    }

    public double duration() {
        return end - start;
    }
}

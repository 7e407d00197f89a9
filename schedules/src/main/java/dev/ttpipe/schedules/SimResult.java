package dev.ttpipe.schedules;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;

/**
 * A timeline of a schedule, simulated or measured: every action with its rank, start and end,
 * and what follows from them (makespan, idle time, activation memory).
 *
 * <p>Build one from measured events with {@link #of(Schedule, List)}; the figures below are
 * computed from the events alone, so simulated and measured timelines compare one to one.
 *
 * <ul>
 * <li>makespan: last end minus first start;</li>
 * <li>bubble fraction of a rank: its idle time over the makespan; overall: total idle time over
 *     {@code ranks * makespan};</li>
 * <li>peak activations of a rank: the most (stage, microbatch) activations it holds at once,
 *     each held from its F until its B, or until its W when the backward is split into I and W;
 *     in bytes too when the cost model knows the bytes per microbatch of every stage.</li>
 * </ul>
 * Immutable.
 */
public final class SimResult {
    private final Schedule schedule;
    private final List<TimedAction> events;
    private final double start;
    private final double makespan;
    private final double[] busy;
    private final int[] peakActivations;
    private final long[] peakActivationBytes;
    private final List<String> memoryLimitViolations;

    private SimResult(Schedule schedule, List<TimedAction> events, CostModel costs) {
        this.schedule = schedule;
        List<TimedAction> sorted = new ArrayList<>(events);
        sorted.sort(Comparator.comparingInt(TimedAction::rank).thenComparingDouble(TimedAction::start));
        this.events = List.copyOf(sorted);
        int ranks = schedule.ranks();
        double first = Double.POSITIVE_INFINITY;
        double last = Double.NEGATIVE_INFINITY;
        busy = new double[ranks];
        for (TimedAction e : this.events) {
            if (e.rank() >= ranks) {
                throw new IllegalArgumentException("event " + e.action() + " on rank " + e.rank() + ", but schedule "
                        + schedule.name() + " has " + ranks + " ranks");
            }
            first = Math.min(first, e.start());
            last = Math.max(last, e.end());
            busy[e.rank()] += e.duration();
        }
        this.start = this.events.isEmpty() ? 0 : first;
        this.makespan = this.events.isEmpty() ? 0 : last - first;

        int stages = schedule.stages();
        peakActivations = new int[ranks];
        peakActivationBytes = new long[ranks];
        int[] held = new int[stages];
        int[] stagePeak = new int[stages];
        long[] stagePeakBytes = new long[stages];
        long[] bytesPer = new long[stages];
        boolean bytesKnown = costs != null;
        for (int s = 0; s < stages && bytesKnown; s++) {
            bytesPer[s] = costs.memoryPerMicrobatchBytes(s);
            bytesKnown = bytesPer[s] >= 0;
        }
        int rank = -1;
        int count = 0;
        long bytes = 0;
        for (TimedAction e : this.events) {
            if (e.rank() != rank) {
                rank = e.rank();
                count = 0;
                bytes = 0;
            }
            Action a = e.action();
            int s = a.stage();
            if (s >= stages) continue;
            int delta = switch (a.kind()) {
                case F -> 1;
                case B, W -> -1; // W exists only where the backward is split; then it, not I, frees
                default -> 0;
            };
            if (delta == 0) continue;
            held[s] += delta;
            count += delta;
            bytes += delta * bytesPer[s];
            stagePeak[s] = Math.max(stagePeak[s], held[s]);
            stagePeakBytes[s] = Math.max(stagePeakBytes[s], held[s] * bytesPer[s]);
            peakActivations[rank] = Math.max(peakActivations[rank], count);
            peakActivationBytes[rank] = Math.max(peakActivationBytes[rank], bytes);
        }
        if (!bytesKnown) Arrays.fill(peakActivationBytes, -1);
        List<String> violations = new ArrayList<>();
        for (int s = 0; s < stages && costs != null; s++) {
            int limit = costs.memoryLimitMicrobatches(s);
            long limitBytes = costs.memoryLimitBytes(s);
            if (limit >= 0 && stagePeak[s] > limit) {
                violations.add("stage " + s + " holds " + stagePeak[s] + " microbatches of activations at peak, over its limit of " + limit);
            } else if (limitBytes >= 0 && bytesKnown && stagePeakBytes[s] > limitBytes) {
                violations.add("stage " + s + " holds " + stagePeakBytes[s] + " bytes of activations at peak, over its limit of "
                        + limitBytes + " bytes");
            }
        }
        this.memoryLimitViolations = List.copyOf(violations);
    }

    /** A timeline from events (simulated or measured) of {@code schedule}; bytes unknown, no memory limits. */
    public static SimResult of(Schedule schedule, List<TimedAction> events) {
        return new SimResult(schedule, events, null);
    }

    /** A timeline whose memory figures use {@code costs} (bytes per microbatch, limits); costs may be null. */
    public static SimResult of(Schedule schedule, List<TimedAction> events, CostModel costs) {
        return new SimResult(schedule, events, costs);
    }

    public Schedule schedule() {
        return schedule;
    }

    /** The events, rank by rank, each rank's in start order (unmodifiable). */
    public List<TimedAction> events() {
        return events;
    }

    /** When the first action starts (0 for a simulation). */
    public double start() {
        return start;
    }

    /** Last end minus first start. */
    public double makespan() {
        return makespan;
    }

    /** Time {@code rank} spends running actions. */
    public double busy(int rank) {
        return busy[rank];
    }

    /** Idle time of {@code rank} over the makespan (0 for an empty timeline). */
    public double bubbleFraction(int rank) {
        return makespan == 0 ? 0 : (makespan - busy[rank]) / makespan;
    }

    /** Total idle time over {@code ranks * makespan}. */
    public double bubbleFraction() {
        if (makespan == 0) return 0;
        double total = 0;
        for (double b : busy) total += b;
        int ranks = busy.length;
        return (ranks * makespan - total) / (ranks * makespan);
    }

    /** The most (stage, microbatch) activations {@code rank} holds at once. */
    public int peakActivations(int rank) {
        return peakActivations[rank];
    }

    /** {@link #peakActivations(int)} in bytes, or -1 when the bytes per microbatch are unknown. */
    public long peakActivationBytes(int rank) {
        return peakActivationBytes[rank];
    }

    /** One sentence per stage whose activations exceed the cost model's memory limit; empty when none do. */
    public List<String> memoryLimitViolations() {
        return memoryLimitViolations;
    }
}

package dev.ttpipe.device.profile;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Time, calls, model FLOPs and bytes moved per op kind, as {@link ProfiledOps} records them; read
 * by {@code ttpipe bench step --profile}. Not thread-safe: one stage's ops run on one thread at a time.
 */
public final class OpProfile {
    /** The figures of one op kind. */
    public static final class Entry {
        public final String kind;
        long nanos;
        long calls;
        double flops;
        double bytes;

        Entry(String kind) {
            this.kind = kind;
        }

        public double seconds() {
            return nanos / 1e9;
        }

        public long calls() {
            return calls;
        }

        public double flops() {
            return flops;
        }

        public double bytes() {
            return bytes;
        }
    }

    private final Map<String, Entry> entries = new LinkedHashMap<>();

    void record(String kind, long nanos, double flops, double bytes) {
        Entry e = entries.computeIfAbsent(kind, Entry::new);
        e.nanos += nanos;
        e.calls++;
        e.flops += flops;
        e.bytes += bytes;
    }

    public void reset() {
        entries.clear();
    }

    /** The kinds, most time first. */
    public List<Entry> entries() {
        List<Entry> l = new ArrayList<>(entries.values());
        l.sort(Comparator.comparingLong((Entry e) -> e.nanos).reversed());
        return l;
    }

    public double seconds() {
        long s = 0;
        for (Entry e : entries.values()) s += e.nanos;
        return s / 1e9;
    }

    /**
     * An aligned table over {@code steps} steps that took {@code stepSeconds} in all: per kind ms/step,
     * share of the step, calls/step and GFLOP/s (kinds with FLOPs) or GB/s; the rest of the step
     * (outside any op: host code, the trainer's loop) as one line.
     */
    public String table(int steps, double stepSeconds) {
        StringBuilder sb = new StringBuilder();
        sb.append(String.format(Locale.ROOT, "  %-34s %9s %7s %8s %14s%n", "op kind", "ms/step", "share", "calls", "rate"));
        for (Entry e : entries()) {
            String rate = e.flops > 0 ? String.format(Locale.ROOT, "%7.1f GFLOP/s", e.flops / e.seconds() / 1e9)
                    : e.bytes > 0 ? String.format(Locale.ROOT, "%7.2f GB/s", e.bytes / e.seconds() / 1e9) : "";
            sb.append(String.format(Locale.ROOT, "  %-34s %9.1f %6.1f%% %8d %14s%n", e.kind, e.seconds() * 1e3 / steps,
                    100 * e.seconds() / stepSeconds, e.calls / steps, rate));
        }
        double rest = stepSeconds - seconds();
        sb.append(String.format(Locale.ROOT, "  %-34s %9.1f %6.1f%%%n", "outside ops (host code, other)", rest * 1e3 / steps,
                100 * rest / stepSeconds));
        return sb.toString();
    }
}

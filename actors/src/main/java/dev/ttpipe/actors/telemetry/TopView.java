package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.config.Sizes;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * What {@code ttpipe top} draws from a job's {@code /status}: a header with the step, the loss and a
 * sparkline of the losses of the last steps (by step: steps redone after a recovery replace the ones they
 * supersede; a {@code |} marks where training went back, and the header names the last resume or
 * recovery), the last validation loss (once one is measured), tokens/s and the measured
 * against the simulated bubble; then a row per
 * rank with what it does in the schedule notation ({@code 2RECV_F5 waiting 1.2 s}), a bar of busy
 * against idle over the last step, memory and queue depth; below them, only when a rank's transport
 * dropped frames, how many and why; then each straggler ({@link Stragglers}) and the split that would
 * even the ranks out. Fits {@code width} columns (at least 80) and, given a height, that many lines less one:
 * where the ranks do not fit, consecutive ranks share a row ({@code 0-6}: how many run, wait and idle, their mean
 * busy share, the largest memory and queue), so a pipeline of 256 ranks shows whole on one screen.
 */
public final class TopView {
    private static final String SPARKS = "▁▂▃▄▅▆▇█";
    /** The loss of each step seen, by step: a step redone after a recovery replaces what it superseded. */
    private final TreeMap<Integer, Double> losses = new TreeMap<>();
    /** Steps after which training went back (a resume, recovery or restart): drawn as a bar in the sparkline. */
    private final TreeSet<Integer> marks = new TreeSet<>();
    private String markText = "";
    private int lastStep = -1;

    /**
     * Adds what {@code status} says to the history, against the step: the loss of each new step; when the step
     * goes back (a recovery redoes steps) the steps it supersedes are dropped and the place is marked.
     */
    public void observe(Map<?, ?> status) {
        int step = ((Number) status.get("step")).intValue();
        Object loss = status.get("loss");
        if (status.get("mark") instanceof Map<?, ?> m && m.get("from_step") instanceof Number from) {
            markText = " | " + ("recovery".equals(m.get("kind")) ? "recovered" : "resume".equals(m.get("kind")) ? "resumed"
                    : "restarted") + " @" + from.intValue();
            if (from.intValue() > 0) marks.add(from.intValue());
        }
        if (step != lastStep && loss instanceof Number n) {
            if (step < lastStep) {                          // went back: what was drawn from here on is superseded
                losses.tailMap(step, true).clear();
                marks.tailSet(step, true).clear();
                marks.add(step - 1);
            }
            losses.put(step, n.doubleValue());
            while (losses.size() > 200) losses.pollFirstEntry();
            lastStep = step;
        }
    }

    /** Every rank on a row of its own ({@code top --once}). */
    public String render(String url, Map<?, ?> status, int width) {
        return render(url, status, width, Integer.MAX_VALUE);
    }

    /** Within {@code width} columns and {@code height - 1} lines (the caller's last line says how to quit). */
    public String render(String url, Map<?, ?> status, int width, int height) {
        int w = Math.max(80, width);
        StringBuilder sb = new StringBuilder();
        String val = status.get("val_loss") instanceof Number v ? String.format(Locale.ROOT, " | val %.4f @%s", v.doubleValue(),
                status.get("val_step")) : "";
        String head = String.format(Locale.ROOT, "step %s/%s | loss %s %s%s%s | %s tok/s | bubble %s (sim %s)",
                status.get("step"), status.get("steps"), num(status.get("loss"), "%.4f"), sparkline(16), val, markText,
                human(status.get("tokens_per_second")), pct(status.get("bubble")), pct(status.get("predicted_bubble")));
        sb.append(cut("ttpipe top " + url, w)).append('\n');
        sb.append(cut(head, w)).append('\n');
        List<?> ranks = (List<?>) status.get("ranks");
        List<String> below = new ArrayList<>();
        String dropped = droppedFrames(ranks);
        if (dropped != null) below.add(dropped);
        below.addAll(stragglers(status.get("stragglers")));
        int room = height == Integer.MAX_VALUE ? Integer.MAX_VALUE : height - 1 - 3 - below.size();
        if (ranks.size() <= room) {
            sb.append(cut(String.format(Locale.ROOT, "%-4s %-34s %-22s %10s %5s", "rank", "doing", "busy|idle (last step)", "memory",
                    "queue"), w)).append('\n');
            for (Object o : ranks) {
                Map<?, ?> r = (Map<?, ?>) o;
                if (!Boolean.TRUE.equals(r.get("up"))) {
                    sb.append(cut(String.format(Locale.ROOT, "%-4s %s", r.get("rank"), "no answer"), w)).append('\n');
                    continue;
                }
                sb.append(cut(String.format(Locale.ROOT, "%-4s %-34s %-22s %10s %5s", r.get("rank"), doing(r), bar(r.get("bubble")),
                        Sizes.format(((Number) r.get("memory_bytes")).longValue()), r.get("queue_depth")), w)).append('\n');
            }
        } else {
            int rows = Math.max(1, room - 1);                 // one line says how the ranks are grouped
            int group = (ranks.size() + rows - 1) / rows;
            sb.append(cut(String.format(Locale.ROOT, "%-9s %-29s %-22s %10s %5s", "ranks", "doing", "busy|idle (last step)",
                    "max memory", "queue"), w)).append('\n');
            for (int from = 0; from < ranks.size(); from += group) {
                sb.append(cut(groupRow(ranks.subList(from, Math.min(ranks.size(), from + group))), w)).append('\n');
            }
            sb.append(cut("(" + ranks.size() + " ranks in rows of " + group + " to fit the terminal; top --once lists"
                    + " every rank)", w)).append('\n');
        }
        for (String line : below) sb.append(cut(line, w)).append('\n');
        return sb.toString();
    }

    /**
     * One row for consecutive ranks: {@code 0-6}, how many run, wait, idle or do not answer, the mean busy share over
     * the last step, the largest memory and queue.
     */
    static String groupRow(List<?> ranks) {
        int running = 0, waiting = 0, idle = 0, silent = 0, withBubble = 0;
        double bubble = 0;
        long memory = 0, queue = 0;
        for (Object o : ranks) {
            Map<?, ?> r = (Map<?, ?>) o;
            if (!Boolean.TRUE.equals(r.get("up"))) {
                silent++;
                continue;
            }
            if (r.get("running") != null) running++;
            else if (r.get("waiting_for") != null) waiting++;
            else idle++;
            if (r.get("bubble") instanceof Number b) {
                bubble += b.doubleValue();
                withBubble++;
            }
            if (r.get("memory_bytes") instanceof Number m) memory = Math.max(memory, m.longValue());
            if (r.get("queue_depth") instanceof Number q) queue = Math.max(queue, q.longValue());
        }
        List<String> doing = new ArrayList<>();
        if (running > 0) doing.add(running + " running");
        if (waiting > 0) doing.add(waiting + " waiting");
        if (idle > 0) doing.add(idle + " idle");
        if (silent > 0) doing.add(silent + " no answer");
        Map<?, ?> first = (Map<?, ?>) ranks.get(0), last = (Map<?, ?>) ranks.get(ranks.size() - 1);
        String label = ranks.size() == 1 ? String.valueOf(first.get("rank")) : first.get("rank") + "-" + last.get("rank");
        return String.format(Locale.ROOT, "%-9s %-29s %-22s %10s %5s", label, String.join(", ", doing),
                withBubble == 0 ? "" : bar(bubble / withBubble), Sizes.format(memory), queue);
    }

    /**
     * {@code straggler: rank 3 runs F 1.6x slower than planned: 42 ms vs 26 ms} for each rank and link
     * named, then the suggested {@code blocks_per_rank}; nothing when none is.
     */
    static List<String> stragglers(Object stragglers) {
        List<String> out = new ArrayList<>();
        if (!(stragglers instanceof Map<?, ?> s)) return out;
        for (String what : List.of("ranks", "links")) {
            if (!(s.get(what) instanceof List<?> named)) continue;
            for (Object o : named) if (o instanceof Map<?, ?> m) out.add("straggler: " + m.get("text"));
        }
        if (s.get("blocks_per_rank") instanceof Map<?, ?> split) {
            List<String> parts = new ArrayList<>();
            split.forEach((rank, blocks) -> parts.add(rank + ": " + blocks));
            out.addAll(Stragglers.suggestion(parts));
        }
        return out;
    }

    /** {@code frames dropped: rank 1: 2 foreign_job, 1 corrupt}, or null when no rank dropped any. */
    static String droppedFrames(List<?> ranks) {
        List<String> parts = new ArrayList<>();
        for (Object o : ranks) {
            Map<?, ?> r = (Map<?, ?>) o;
            if (!(r.get("frames_dropped") instanceof Map<?, ?> byReason)) continue;
            List<String> counts = new ArrayList<>();
            for (Map.Entry<?, ?> e : byReason.entrySet()) {
                if (e.getValue() instanceof Number n && n.longValue() > 0) counts.add(n.longValue() + " " + e.getKey());
            }
            if (!counts.isEmpty()) parts.add("rank " + r.get("rank") + ": " + String.join(", ", counts));
        }
        return parts.isEmpty() ? null : "frames dropped: " + String.join("; ", parts);
    }

    /** {@code 1F5 running 0.3 s}, {@code 2RECV_F5 waiting 1.2 s from rank 1}, or idle since the last finished action. */
    static String doing(Map<?, ?> r) {
        if (r.get("running") != null) {
            return r.get("running") + " running " + seconds(r.get("running_ms"));
        }
        if (r.get("waiting_for") != null) {
            return r.get("waiting_for") + " waiting " + seconds(r.get("waiting_ms")) + " from " + r.get("waiting_from_rank");
        }
        Object last = r.get("last_finished");
        return last == null ? "idle" : "idle since " + last + " (" + seconds(r.get("since_finished_ms")) + ")";
    }

    /** The losses of the last {@code n} steps seen, in step order, with a {@code |} after each step training went back to. */
    String sparkline(int n) {
        if (losses.isEmpty()) return "";
        List<Map.Entry<Integer, Double>> tail = new ArrayList<>(losses.descendingMap().entrySet()).subList(0, Math.min(n, losses.size()));
        double lo = Double.MAX_VALUE, hi = -Double.MAX_VALUE;
        for (Map.Entry<Integer, Double> e : tail) {
            lo = Math.min(lo, e.getValue());
            hi = Math.max(hi, e.getValue());
        }
        StringBuilder sb = new StringBuilder();
        for (int i = tail.size() - 1; i >= 0; i--) {
            Map.Entry<Integer, Double> e = tail.get(i);
            if (i < tail.size() - 1 && marks.contains(e.getKey() - 1)) sb.append('|');
            double v = e.getValue();
            int k = hi > lo ? (int) Math.round((v - lo) / (hi - lo) * (SPARKS.length() - 1)) : 0;
            sb.append(SPARKS.charAt(k));
        }
        return sb.toString();
    }

    private static String bar(Object bubble) {
        if (!(bubble instanceof Number b)) return "";
        int width = 14;
        int busy = (int) Math.round((1 - b.doubleValue()) * width);
        return "[" + "#".repeat(busy) + ".".repeat(width - busy) + "] " + String.format(Locale.ROOT, "%3.0f%%", 100 * (1 - b.doubleValue()));
    }

    private static String seconds(Object ms) {
        return ms instanceof Number n ? String.format(Locale.ROOT, "%.1f s", n.doubleValue() / 1e3) : "?";
    }

    private static String num(Object v, String fmt) {
        return v instanceof Number n ? String.format(Locale.ROOT, fmt, n.doubleValue()) : "n/a";
    }

    private static String pct(Object v) {
        return v instanceof Number n ? String.format(Locale.ROOT, "%.0f%%", 100 * n.doubleValue()) : "n/a";
    }

    private static String human(Object v) {
        if (!(v instanceof Number n)) return "n/a";
        double d = n.doubleValue();
        return d >= 1e3 ? String.format(Locale.ROOT, "%.1fk", d / 1e3) : String.format(Locale.ROOT, "%.0f", d);
    }

    private static String cut(String s, int w) {
        return s.length() <= w ? s : s.substring(0, w);
    }
}

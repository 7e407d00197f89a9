package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.runtime.ActionEvent;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.schedules.TraceEventWriter;
import dev.ttpipe.schedules.TraceLayout;

import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Writes measured steps as a Chrome trace (JSON trace-event format; opens in Perfetto and
 * chrome://tracing) in the simulator's layout ({@link TraceLayout}: one process per rank, a compute
 * and a communication track per stage, spans named {@code 2F3}), so a measured and a simulated
 * trace overlay. Args carry the microbatch, pass, bytes and wait; flow arrows go from the end of each
 * SEND to the end of its RECV, when the data had left and when it had arrived (each a nanosecond inside its
 * slice, where Perfetto binds it), so they point forward in time; a global instant
 * marks the start of each step; counters per rank show buffered arrivals, stashed microbatches and
 * device memory, a sample written only where the rank's value changes (a counter is drawn as a step
 * function, so a repeated sample adds bytes and nothing else; at 256 ranks most samples repeat). Times
 * are microseconds written exactly to the nanosecond, from the integer nanoseconds.
 */
public final class ChromeTrace {
    /** Shortest span drawn, nanoseconds: a RECV whose data was already there is an empty span. */
    private static final long MIN_DURATION_NS = 10;
    /** How far inside a slice a flow's end is bound: one nanosecond, the trace viewers' resolution. */
    private static final long BIND_INSIDE_NS = 1;
    private static final int QUEUE = 0, STASH = 1, MEMORY = 2;
    private static final String[] COUNTERS = {"buffered arrivals", "stashed microbatches", "device memory"};
    private static final String[] UNITS = {"count", "count", "bytes"};

    private ChromeTrace() {
    }

    public static void write(Path file, Schedule schedule, List<ActionEvent> events, List<Coordinator.StepReport> steps,
                             long originNs) throws IOException {
        try (Writer w = Files.newBufferedWriter(file, StandardCharsets.UTF_8)) {
            write(w, schedule, events, steps, originNs);
        }
    }

    public static void write(Writer w, Schedule schedule, List<ActionEvent> events, List<Coordinator.StepReport> steps,
                             long originNs) throws IOException {
        TraceEventWriter out = TraceEventWriter.begin(w, schedule, ",\"measured\":true");
        for (Coordinator.StepReport s : steps) {
            out.event("{\"ph\":\"i\",\"s\":\"g\",\"name\":\"step " + (s.step() + 1) + "\",\"cat\":\"step\",\"pid\":0,\"tid\":0,\"ts\":"
                    + us(s.startNs() - originNs) + ",\"args\":{\"step\":" + (s.step() + 1) + ",\"loss\":"
                    + Json.num(s.loss()) + "}}");
        }
        Map<String, ActionEvent> sends = new HashMap<>();
        for (ActionEvent e : events) {
            if (e.kind() == ActionKind.SEND_F || e.kind() == ActionKind.SEND_B) {
                sends.put(flowKey(e.kind() == ActionKind.SEND_F, e.stage(), e.microbatch(), e.pass()), e);
            }
        }
        long flowId = 1;
        Map<Integer, long[]> lastCounters = new HashMap<>();
        for (ActionEvent e : events) {
            Action a = e.action();
            int pid = TraceLayout.pid(e.rank()), tid = TraceLayout.tid(a);
            long start = e.startNs() - originNs, end = e.endNs() - originNs;
            out.event("{\"ph\":\"X\",\"name\":" + Json.str(TraceLayout.spanName(a)) + ",\"cat\":" + Json.str(a.kind().name())
                    + ",\"pid\":" + pid + ",\"tid\":" + tid + ",\"ts\":" + us(start) + ",\"dur\":" + us(drawnNs(e))
                    + ",\"args\":{\"microbatch\":" + e.microbatch() + ",\"pass\":" + e.pass()
                    + (e.bytes() > 0 ? ",\"bytes\":" + e.bytes() : "")
                    + (e.waitNs() > 0 ? ",\"wait_ms\":" + Json.num(e.waitNs() / 1e6) : "") + "}}");
            long[] last = lastCounters.computeIfAbsent(pid, k -> new long[]{-1, -1, -1});
            counter(out, last, QUEUE, pid, start, e.queueDepth());
            counter(out, last, STASH, pid, end, e.stashed());
            counter(out, last, MEMORY, pid, end, e.memory());
            if (e.kind() == ActionKind.RECV_F || e.kind() == ActionKind.RECV_B) {
                boolean forward = e.kind() == ActionKind.RECV_F;
                int from = forward ? e.stage() - 1 : e.stage() + 1;
                ActionEvent send = sends.get(flowKey(forward, from, e.microbatch(), e.pass()));
                if (send != null) {
                    long id = flowId++;
                    String name = Json.str(send.label() + " -> " + e.label());
                    out.event("{\"ph\":\"s\",\"id\":" + id + ",\"name\":" + name + ",\"cat\":\"dataflow\",\"pid\":"
                            + TraceLayout.pid(send.rank()) + ",\"tid\":" + TraceLayout.tid(send.action()) + ",\"ts\":"
                            + us(departure(send, e, originNs)) + "}");
                    out.event("{\"ph\":\"f\",\"bp\":\"e\",\"id\":" + id + ",\"name\":" + name + ",\"cat\":\"dataflow\",\"pid\":"
                            + pid + ",\"tid\":" + tid + ",\"ts\":" + us(nearEnd(e, originNs)) + "}");
                }
            }
        }
        out.end();
    }

    /** A sample of counter {@code which} where rank {@code pid}'s value changed since its last one (always its first). */
    private static void counter(TraceEventWriter out, long[] last, int which, int pid, long atNs, long value) throws IOException {
        if (last[which] == value) return;
        last[which] = value;
        out.event("{\"ph\":\"C\",\"name\":\"" + COUNTERS[which] + "\",\"pid\":" + pid + ",\"ts\":" + us(atNs)
                + ",\"args\":{\"" + UNITS[which] + "\":" + value + "}}");
    }

    /** The slice's length as drawn: its duration, at least {@link #MIN_DURATION_NS}. */
    private static long drawnNs(ActionEvent e) {
        return Math.max(MIN_DURATION_NS, e.durationNs());
    }

    /** One nanosecond before the end of the slice as drawn (with its minimum duration): inside it, never on a neighbour's edge. */
    private static long nearEnd(ActionEvent e, long originNs) {
        return e.startNs() - originNs + drawnNs(e) - BIND_INSIDE_NS;
    }

    /**
     * When the data left: the end of the SEND, or, where the RECV had it before the SEND's bookkeeping
     * finished, a nanosecond before the RECV's end, kept inside the SEND's slice. So an arrow never points
     * back in time unless the RECV ended before the SEND began (clocks of two hosts).
     */
    private static long departure(ActionEvent send, ActionEvent recv, long originNs) {
        long start = send.startNs() - originNs + BIND_INSIDE_NS;
        return Math.max(start, Math.min(nearEnd(send, originNs), nearEnd(recv, originNs) - BIND_INSIDE_NS));
    }

    /** Nanoseconds as microseconds, exactly and without trailing zeros: {@code 4219834.161}, {@code 12}, {@code -0.5}. */
    static String us(long ns) {
        StringBuilder b = new StringBuilder(20);
        if (ns < 0) b.append('-');
        long abs = Math.abs(ns);
        b.append(abs / 1000);
        int frac = (int) (abs % 1000);
        if (frac != 0) {
            b.append('.').append((char) ('0' + frac / 100));
            if (frac % 100 != 0) b.append((char) ('0' + frac / 10 % 10));
            if (frac % 10 != 0) b.append((char) ('0' + frac % 10));
        }
        return b.toString();
    }

    /** Step numbers in words, runs of consecutive ones as ranges: {@code steps 1-10 and 60}, {@code step 3}, {@code no step}. */
    public static String stepsText(List<Integer> ascending) {
        if (ascending.isEmpty()) return "no step";
        StringBuilder b = new StringBuilder(ascending.size() == 1 ? "step " : "steps ");
        for (int i = 0; i < ascending.size(); ) {
            int j = i;
            while (j + 1 < ascending.size() && ascending.get(j + 1) == ascending.get(j) + 1) j++;
            if (i > 0) b.append(j + 1 == ascending.size() ? " and " : ", ");
            b.append(ascending.get(i));
            if (j > i) b.append('-').append(ascending.get(j));
            i = j + 1;
        }
        return b.toString();
    }

    private static String flowKey(boolean forward, int fromStage, int mb, int pass) {
        return (forward ? "F:" : "B:") + fromStage + ":" + mb + ":" + pass;
    }
}

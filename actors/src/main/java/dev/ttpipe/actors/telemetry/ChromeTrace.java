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
 * device memory.
 */
public final class ChromeTrace {
    /** Shortest span drawn, microseconds: a RECV whose data was already there is an empty span. */
    private static final double MIN_DURATION_US = 0.01;
    /** How far inside a slice a flow's end is bound, microseconds: one nanosecond, the trace viewers' resolution. */
    private static final double BIND_INSIDE_US = 0.001;

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
                    + Json.num(us(s.startNs() - originNs)) + ",\"args\":{\"step\":" + (s.step() + 1) + ",\"loss\":"
                    + Json.num(s.loss()) + "}}");
        }
        Map<String, ActionEvent> sends = new HashMap<>();
        for (ActionEvent e : events) {
            if (e.kind() == ActionKind.SEND_F || e.kind() == ActionKind.SEND_B) {
                sends.put(flowKey(e.kind() == ActionKind.SEND_F, e.stage(), e.microbatch(), e.pass()), e);
            }
        }
        long flowId = 1;
        for (ActionEvent e : events) {
            Action a = e.action();
            int pid = TraceLayout.pid(e.rank()), tid = TraceLayout.tid(a);
            double ts = us(e.startNs() - originNs);
            double dur = Math.max(MIN_DURATION_US, us(e.durationNs()));
            out.event("{\"ph\":\"X\",\"name\":" + Json.str(TraceLayout.spanName(a)) + ",\"cat\":" + Json.str(a.kind().name())
                    + ",\"pid\":" + pid + ",\"tid\":" + tid + ",\"ts\":" + Json.num(ts) + ",\"dur\":" + Json.num(dur)
                    + ",\"args\":{\"microbatch\":" + e.microbatch() + ",\"pass\":" + e.pass()
                    + (e.bytes() > 0 ? ",\"bytes\":" + e.bytes() : "")
                    + (e.waitNs() > 0 ? ",\"wait_ms\":" + Json.num(e.waitNs() / 1e6) : "") + "}}");
            double endTs = us(e.endNs() - originNs);
            out.event("{\"ph\":\"C\",\"name\":\"buffered arrivals\",\"pid\":" + pid + ",\"ts\":" + Json.num(ts)
                    + ",\"args\":{\"count\":" + e.queueDepth() + "}}");
            out.event("{\"ph\":\"C\",\"name\":\"stashed microbatches\",\"pid\":" + pid + ",\"ts\":" + Json.num(endTs)
                    + ",\"args\":{\"count\":" + e.stashed() + "}}");
            out.event("{\"ph\":\"C\",\"name\":\"device memory\",\"pid\":" + pid + ",\"ts\":" + Json.num(endTs)
                    + ",\"args\":{\"bytes\":" + e.memory() + "}}");
            if (e.kind() == ActionKind.RECV_F || e.kind() == ActionKind.RECV_B) {
                boolean forward = e.kind() == ActionKind.RECV_F;
                int from = forward ? e.stage() - 1 : e.stage() + 1;
                ActionEvent send = sends.get(flowKey(forward, from, e.microbatch(), e.pass()));
                if (send != null) {
                    long id = flowId++;
                    String name = Json.str(send.label() + " -> " + e.label());
                    out.event("{\"ph\":\"s\",\"id\":" + id + ",\"name\":" + name + ",\"cat\":\"dataflow\",\"pid\":"
                            + TraceLayout.pid(send.rank()) + ",\"tid\":" + TraceLayout.tid(send.action()) + ",\"ts\":"
                            + Json.num(departure(send, e, originNs)) + "}");
                    out.event("{\"ph\":\"f\",\"bp\":\"e\",\"id\":" + id + ",\"name\":" + name + ",\"cat\":\"dataflow\",\"pid\":"
                            + pid + ",\"tid\":" + tid + ",\"ts\":" + Json.num(nearEnd(e, originNs)) + "}");
                }
            }
        }
        out.end();
    }

    /** One nanosecond before the end of the slice as drawn (with its minimum duration): inside it, never on a neighbour's edge. */
    private static double nearEnd(ActionEvent e, long originNs) {
        return us(e.startNs() - originNs) + Math.max(MIN_DURATION_US, us(e.durationNs())) - BIND_INSIDE_US;
    }

    /**
     * When the data left: the end of the SEND, or, where the RECV had it before the SEND's bookkeeping
     * finished, a nanosecond before the RECV's end, kept inside the SEND's slice. So an arrow never points
     * back in time unless the RECV ended before the SEND began (clocks of two hosts).
     */
    private static double departure(ActionEvent send, ActionEvent recv, long originNs) {
        double start = us(send.startNs() - originNs) + BIND_INSIDE_US;
        return Math.max(start, Math.min(nearEnd(send, originNs), nearEnd(recv, originNs) - BIND_INSIDE_US));
    }

    private static double us(long ns) {
        return ns / 1e3;
    }

    private static String flowKey(boolean forward, int fromStage, int mb, int pass) {
        return (forward ? "F:" : "B:") + fromStage + ":" + mb + ":" + pass;
    }
}

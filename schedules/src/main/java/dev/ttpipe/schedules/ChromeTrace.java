package dev.ttpipe.schedules;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * A timeline in Chrome's trace event format (JSON), which Perfetto and chrome://tracing open.
 *
 * <p>The layout of {@link TraceLayout} (one process per rank, a compute and a communication track
 * per stage), the same as the runtime's measured trace; each action a complete event
 * ({@code ph:"X"}) named in the action notation ({@code 2F0}), with its kind as category; a flow arrow ({@code ph:"s"} then {@code ph:"f"}, {@code bp:"e"}, matching ids) from
 * every action that sends data to another rank to the action that receives it: SEND to RECV in a
 * lowered schedule, producing to consuming compute action in a compute-only one.
 */
public final class ChromeTrace {
    private ChromeTrace() {
    }

    /** The trace, reading the timeline's time unit as milliseconds. */
    public static String render(SimResult result) {
        return render(result, 1000);
    }

    /** The trace; one time unit of the timeline is {@code microsPerUnit} microseconds. */
    public static String render(SimResult result, double microsPerUnit) {
        List<TimedAction> events = result.events();
        StringBuilder json = new StringBuilder(256 + events.size() * 150);
        try {
            write(json, result, microsPerUnit);
        } catch (IOException e) {
            throw new UncheckedIOException(e);      // a StringBuilder does not throw
        }
        return json.toString();
    }

    private static void write(StringBuilder json, SimResult result, double microsPerUnit) throws IOException {
        List<TimedAction> events = result.events();
        TraceEventWriter out = TraceEventWriter.begin(json, result.schedule(), ",\"makespan\":" + num(result.makespan())
                + ",\"bubble_fraction\":" + num(result.bubbleFraction()));
        double t0 = result.start();
        StringBuilder event = new StringBuilder(160);
        for (TimedAction e : events) {
            Action a = e.action();
            event.setLength(0);
            event.append("{\"name\":\"").append(TraceLayout.spanName(a)).append("\",\"cat\":\"").append(a.kind().name())
                    .append("\",\"ph\":\"X\",\"pid\":").append(TraceLayout.pid(e.rank())).append(",\"tid\":")
                    .append(TraceLayout.tid(a)).append(",\"ts\":")
                    .append(num((e.start() - t0) * microsPerUnit)).append(",\"dur\":").append(num(e.duration() * microsPerUnit))
                    .append(",\"args\":{\"stage\":").append(a.stage()).append(",\"microbatch\":").append(a.microbatch())
                    .append("}}");
            out.event(event);
        }
        int id = 0;
        for (int[] flow : crossRankFlows(result)) {
            TimedAction from = events.get(flow[0]);
            TimedAction to = events.get(flow[1]);
            id++;
            out.event("{\"name\":\"" + from.action() + " -> " + to.action() + "\",\"cat\":\"dataflow\",\"ph\":\"s\",\"id\":" + id
                    + ",\"pid\":" + TraceLayout.pid(from.rank()) + ",\"tid\":" + TraceLayout.tid(from.action()) + ",\"ts\":"
                    + num((middle(from) - t0) * microsPerUnit) + "}");
            out.event("{\"name\":\"" + from.action() + " -> " + to.action() + "\",\"cat\":\"dataflow\",\"ph\":\"f\",\"bp\":\"e\",\"id\":"
                    + id + ",\"pid\":" + TraceLayout.pid(to.rank()) + ",\"tid\":" + TraceLayout.tid(to.action()) + ",\"ts\":"
                    + num((middle(to) - t0) * microsPerUnit) + "}");
        }
        out.end();
    }

    /**
     * Pairs of event indices (producer, consumer) where data crosses ranks: SEND to RECV when the
     * schedule is lowered, else the producing compute action to the consuming one.
     */
    static List<int[]> crossRankFlows(SimResult result) {
        List<TimedAction> events = result.events();
        Map<Action, Integer> byAction = new HashMap<>(events.size() * 2);
        for (int i = 0; i < events.size(); i++) byAction.put(events.get(i).action(), i);
        boolean lowered = result.schedule().isLowered();
        List<int[]> flows = new ArrayList<>();
        for (int i = 0; i < events.size(); i++) {
            Action a = events.get(i).action();
            int s = a.stage();
            int m = a.microbatch();
            Integer from = null;
            if (lowered) {
                if (a.kind() == ActionKind.RECV_F) from = byAction.get(new Action(s - 1, ActionKind.SEND_F, m));
                else if (a.kind() == ActionKind.RECV_B) from = byAction.get(new Action(s + 1, ActionKind.SEND_B, m));
            } else if (a.kind() == ActionKind.F && s > 0) {
                from = byAction.get(new Action(s - 1, ActionKind.F, m));
            } else if (a.kind() == ActionKind.B || a.kind() == ActionKind.I) {
                from = byAction.get(new Action(s + 1, ActionKind.I, m));
                if (from == null) from = byAction.get(new Action(s + 1, ActionKind.B, m));
            }
            if (from != null && events.get(from).rank() != events.get(i).rank()) flows.add(new int[]{from, i});
        }
        return flows;
    }

    /** Flow ends bind to the slice enclosing their timestamp: the middle is inside it, never on a neighbour's edge. */
    private static double middle(TimedAction e) {
        return (e.start() + e.end()) / 2;
    }

    private static String num(double v) {
        if (v == Math.rint(v) && Math.abs(v) < 1e15) return Long.toString((long) v);
        return String.format(Locale.ROOT, "%.3f", v);
    }
}

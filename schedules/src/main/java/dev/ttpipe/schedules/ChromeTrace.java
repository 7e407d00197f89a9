package dev.ttpipe.schedules;

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
        Schedule schedule = result.schedule();
        List<TimedAction> events = result.events();
        StringBuilder json = new StringBuilder(256 + events.size() * 150);
        json.append("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"schedule\":").append(quote(schedule.name()))
                .append(",\"makespan\":").append(num(result.makespan())).append(",\"bubble_fraction\":")
                .append(num(result.bubbleFraction())).append("},\n\"traceEvents\":[\n");
        for (String m : TraceLayout.metadata(schedule)) json.append(m).append(",\n");
        double t0 = result.start();
        for (TimedAction e : events) {
            Action a = e.action();
            json.append("{\"name\":\"").append(TraceLayout.spanName(a)).append("\",\"cat\":\"").append(a.kind().name())
                    .append("\",\"ph\":\"X\",\"pid\":").append(TraceLayout.pid(e.rank())).append(",\"tid\":")
                    .append(TraceLayout.tid(a)).append(",\"ts\":")
                    .append(num((e.start() - t0) * microsPerUnit)).append(",\"dur\":").append(num(e.duration() * microsPerUnit))
                    .append(",\"args\":{\"stage\":").append(a.stage()).append(",\"microbatch\":").append(a.microbatch())
                    .append("}},\n");
        }
        int id = 0;
        for (int[] flow : crossRankFlows(result)) {
            TimedAction from = events.get(flow[0]);
            TimedAction to = events.get(flow[1]);
            id++;
            json.append("{\"name\":\"").append(from.action()).append(" -> ").append(to.action())
                    .append("\",\"cat\":\"dataflow\",\"ph\":\"s\",\"id\":").append(id).append(",\"pid\":").append(TraceLayout.pid(from.rank()))
                    .append(",\"tid\":").append(TraceLayout.tid(from.action())).append(",\"ts\":").append(num((middle(from) - t0) * microsPerUnit)).append("},\n");
            json.append("{\"name\":\"").append(from.action()).append(" -> ").append(to.action())
                    .append("\",\"cat\":\"dataflow\",\"ph\":\"f\",\"bp\":\"e\",\"id\":").append(id).append(",\"pid\":")
                    .append(TraceLayout.pid(to.rank())).append(",\"tid\":").append(TraceLayout.tid(to.action())).append(",\"ts\":").append(num((middle(to) - t0) * microsPerUnit)).append("},\n");
        }
        int last = json.lastIndexOf(",\n");
        if (last >= 0 && last == json.length() - 2) json.setLength(last);
        return json.append("\n]}\n").toString();
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

    static String quote(String s) {
        StringBuilder out = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) out.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
                    else out.append(c);
                }
            }
        }
        return out.append('"').toString();
    }
}

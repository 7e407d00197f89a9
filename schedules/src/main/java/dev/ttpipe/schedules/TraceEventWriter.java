package dev.ttpipe.schedules;

import java.io.IOException;
import java.util.Locale;

/**
 * The frame of a Chrome trace (JSON trace-event format) as both ttpipe's traces write it, the simulated
 * ({@link ChromeTrace}) and the runtime's measured one: the header with the schedule's name and other data,
 * the {@link TraceLayout} metadata rows, then one event per line, comma-separated, and the closing bracket.
 * Events are JSON objects the caller builds; strings in them go through {@link #quote}. Not thread-safe;
 * writes straight through to its {@link Appendable}, which the caller owns and closes.
 */
public final class TraceEventWriter {
    private final Appendable out;
    private boolean first = true;

    private TraceEventWriter(Appendable out) {
        this.out = out;
    }

    /**
     * Writes the header and the metadata rows of {@code schedule}'s layout.
     *
     * @param otherData further members of the {@code otherData} object after the schedule's name, each with its
     *                  leading comma ({@code ,"measured":true}), or empty
     */
    public static TraceEventWriter begin(Appendable out, Schedule schedule, String otherData) throws IOException {
        out.append("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"schedule\":").append(quote(schedule.name())).append(otherData)
                .append("},\n\"traceEvents\":[\n");
        TraceEventWriter w = new TraceEventWriter(out);
        for (String m : TraceLayout.metadata(schedule)) w.event(m);
        return w;
    }

    /** One event: a JSON object on its own line. */
    public void event(CharSequence json) throws IOException {
        if (!first) out.append(",\n");
        first = false;
        out.append(json);
    }

    /** Closes the event list and the trace. */
    public void end() throws IOException {
        out.append("\n]}\n");
    }

    /** {@code s} as a JSON string literal: quotes, backslashes and control characters escaped. */
    public static String quote(String s) {
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

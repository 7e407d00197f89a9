package dev.ttpipe.actors.telemetry;

import dev.ttpipe.schedules.Action;
import dev.ttpipe.stages.checkpoint.MiniJson;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The compute spans (F, B, I, W) of a run's {@code trace.json}, as {@code ttpipe report} draws them. The
 * trace of a large pipeline runs to gigabytes (2.3 GB for 3 steps of 256 ranks and 1024 microbatches), more
 * than one JSON document should be read whole, so a trace in the layout ttpipe writes (a header line, then
 * one event per line) is read a line at a time, each event parsed alone and only compute spans kept. Any
 * other JSON trace is read whole, within {@link MiniJson}'s bound on a file's size.
 */
public final class TracedSpans {
    /** The line ttpipe's traces begin with (up to the schedule's name). */
    private static final String HEADER = "{\"displayTimeUnit\":\"ms\",\"otherData\":{";
    /** ttpipe's second line: the list of events opens, each event then on a line of its own. */
    private static final String EVENTS = "\"traceEvents\":[";
    /** The longest header line looked for (the schedule's name and other data are short). */
    private static final int MAX_HEADER = 1 << 16;
    /** The longest event line read; ttpipe's are a few hundred characters. */
    private static final int MAX_LINE = 1 << 20;

    /** One compute span: its action, its rank's process id, its start and length in microseconds, its pass. */
    public record Span(Action action, int pid, double tsUs, double durUs, int pass) {
    }

    private TracedSpans() {
    }

    /**
     * The compute spans of {@code file}, in file order.
     *
     * @throws IllegalArgumentException naming the file (and line) where it is not a trace
     */
    static List<Span> read(Path file) throws IOException {
        if (!ownLayout(file)) return whole(file);
        List<Span> spans = new ArrayList<>();
        try (Reader in = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            Lines lines = new Lines(in);
            StringBuilder buf = new StringBuilder(512);
            int n = 0;
            while (lines.next(buf)) {
                n++;
                if (buf.length() > MAX_LINE) {
                    throw new IllegalArgumentException(file + ":" + n + ": a line of more than " + MAX_LINE
                            + " characters, expected one trace event per line");
                }
                String line = buf.toString();
                if (!line.contains("\"ph\":\"X\"") || line.contains("\"cat\":\"SEND_") || line.contains("\"cat\":\"RECV_")) {
                    continue;                                        // not a span, or a comm span: parsing it is wasted
                }
                String event = line.strip();
                if (event.endsWith(",")) event = event.substring(0, event.length() - 1);
                Object parsed;
                try {
                    parsed = MiniJson.parse(event);
                } catch (IllegalArgumentException e) {
                    throw new IllegalArgumentException(file + ":" + n + ": not valid JSON (" + e.getMessage() + ")");
                }
                if (!(parsed instanceof Map<?, ?> m)) throw new IllegalArgumentException(file + ":" + n + ": not a JSON object");
                add(spans, m, file + ":" + n);
            }
        }
        return spans;
    }

    /** Lines of a reader, each cut one character past {@link #MAX_LINE} (so a file without line breaks is not read whole). */
    private static final class Lines {
        private final Reader in;
        private final char[] buf = new char[1 << 16];
        private int at;
        private int end;

        Lines(Reader in) {
            this.in = in;
        }

        /** The next line, without its line break, into {@code line}; false at the end of the file. */
        boolean next(StringBuilder line) throws IOException {
            line.setLength(0);
            boolean any = false;
            while (true) {
                if (at == end) {
                    end = in.read(buf, 0, buf.length);
                    at = 0;
                    if (end <= 0) {
                        end = 0;
                        return any;
                    }
                }
                any = true;
                int from = at;
                while (at < end && buf[at] != '\n') at++;
                line.append(buf, from, at - from);
                if (at < end) {
                    at++;                                            // the line break
                    return true;
                }
                if (line.length() > MAX_LINE) return true;
            }
        }
    }

    /** Whether {@code file} begins as ttpipe writes a trace: the header line, then a line that opens the list of events. */
    static boolean ownLayout(Path file) throws IOException {
        try (BufferedReader in = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            char[] head = new char[MAX_HEADER];
            int got = 0;
            for (int n; got < head.length && (n = in.read(head, got, head.length - got)) > 0; ) got += n;
            String text = new String(head, 0, got);
            int eol = text.indexOf('\n');
            int after = eol + 1 + EVENTS.length();
            return text.startsWith(HEADER) && eol > 0 && text.startsWith(EVENTS, eol + 1) && after < text.length()
                    && (text.charAt(after) == '\n' || text.charAt(after) == '\r');
        }
    }

    /** A trace in another layout: read whole (bounded by MiniJson's limit on a file's size). */
    private static List<Span> whole(Path file) throws IOException {
        long size = Files.size(file);
        if (size > MiniJson.MAX_TEXT) {
            throw new IllegalArgumentException(file + ": " + size + " bytes, more than the " + MiniJson.MAX_TEXT + " read whole from a"
                    + " trace that is not in ttpipe's layout (a header line, then one event per line)");
        }
        Object parsed;
        try {
            parsed = MiniJson.read(file);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(file + ": not valid JSON (" + e.getMessage() + ")");
        }
        if (!(parsed instanceof Map<?, ?> m) || !(m.get("traceEvents") instanceof List<?> events)) {
            throw new IllegalArgumentException(file + ": not a trace (expected a JSON object with traceEvents)");
        }
        List<Span> spans = new ArrayList<>();
        for (Object o : events) {
            if (o instanceof Map<?, ?> e && "X".equals(e.get("ph"))) add(spans, e, file.toString());
        }
        return spans;
    }

    /** Adds {@code e} if it is a compute span of a pass; {@code where} names it in an error. */
    private static void add(List<Span> spans, Map<?, ?> e, String where) {
        if (!(e.get("args") instanceof Map<?, ?> args) || !(args.get("pass") instanceof Number pass) || pass.intValue() < 0) return;
        if (!(e.get("name") instanceof String name)) return;
        Action action;
        try {
            action = Action.parse(name);
        } catch (RuntimeException ex) {
            throw new IllegalArgumentException(where + ": span name '" + name + "' is not an action (" + ex.getMessage() + ")");
        }
        if (!action.kind().isCompute()) return;
        spans.add(new Span(action, (int) Report.num(e.get("pid")), Report.num(e.get("ts")), Report.num(e.get("dur")), pass.intValue()));
    }
}

package dev.ttpipe.actors.telemetry;

import dev.ttpipe.schedules.Schedule;

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
 * chrome://tracing): one process per stage ({@code stage s (rank r)}), a compute track and a
 * communication track in each, spans named like {@code F3} / {@code B3} / {@code W3} /
 * {@code RECV_F3} with the microbatch, pass and bytes in args, flow arrows from each send to its
 * receive, and counters of buffered arrivals, stashed microbatches and device memory per stage.
 */
public final class ChromeTrace {
    private static final int COMPUTE = 1, COMM = 2;

    private ChromeTrace() {
    }

    public static void write(Path file, Schedule schedule, List<ActionEvent> events, long originNs) throws IOException {
        try (Writer w = Files.newBufferedWriter(file, StandardCharsets.UTF_8)) {
            write(w, schedule, events, originNs);
        }
    }

    public static void write(Writer w, Schedule schedule, List<ActionEvent> events, long originNs) throws IOException {
        w.write("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
        boolean[] first = {true};
        Emitter out = line -> {
            if (!first[0]) w.write(",\n");
            first[0] = false;
            w.write(line);
        };
        for (int s = 0; s < schedule.stages(); s++) {
            out.emit("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + s + ",\"args\":{\"name\":"
                    + Json.str("stage " + s + " (rank " + schedule.rankOfStage(s) + ")") + "}}");
            out.emit("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + s + ",\"args\":{\"sort_index\":" + s + "}}");
            out.emit("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + s + ",\"tid\":" + COMPUTE + ",\"args\":{\"name\":\"compute\"}}");
            out.emit("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + s + ",\"tid\":" + COMM + ",\"args\":{\"name\":\"communication\"}}");
        }
        Map<String, ActionEvent> sends = new HashMap<>();
        for (ActionEvent e : events) {
            if (e.kind().startsWith("SEND")) sends.put(flowKey(e.kind().substring(5), e.stage(), e.microbatch(), e.pass()), e);
        }
        long flowId = 1;
        for (ActionEvent e : events) {
            double ts = (e.startNs() - originNs) / 1e3;
            double dur = Math.max(0.001, e.durationNs() / 1e3);
            int tid = e.isCompute() ? COMPUTE : COMM;
            String name = e.kind() + (e.microbatch() >= 0 ? Integer.toString(e.microbatch()) : "");
            out.emit("{\"ph\":\"X\",\"name\":" + Json.str(name) + ",\"cat\":" + Json.str(e.isCompute() ? "compute" : "comm")
                    + ",\"pid\":" + e.stage() + ",\"tid\":" + tid + ",\"ts\":" + Json.num(ts) + ",\"dur\":" + Json.num(dur)
                    + ",\"args\":{\"action\":" + Json.str(e.label()) + ",\"microbatch\":" + e.microbatch() + ",\"pass\":" + e.pass()
                    + ",\"rank\":" + e.rank() + (e.bytes() > 0 ? ",\"bytes\":" + e.bytes() : "")
                    + (e.waitNs() > 0 ? ",\"wait_ms\":" + Json.num(e.waitNs() / 1e6) : "") + "}}");
            double endTs = (e.endNs() - originNs) / 1e3;
            out.emit("{\"ph\":\"C\",\"name\":\"buffered arrivals\",\"pid\":" + e.stage() + ",\"ts\":" + Json.num(ts)
                    + ",\"args\":{\"count\":" + e.queueDepth() + "}}");
            out.emit("{\"ph\":\"C\",\"name\":\"stashed microbatches\",\"pid\":" + e.stage() + ",\"ts\":" + Json.num(endTs)
                    + ",\"args\":{\"count\":" + e.stashed() + "}}");
            out.emit("{\"ph\":\"C\",\"name\":\"device memory\",\"pid\":" + e.stage() + ",\"ts\":" + Json.num(endTs)
                    + ",\"args\":{\"bytes\":" + e.memory() + "}}");
            if (e.kind().startsWith("RECV")) {
                String dir = e.kind().substring(5);                  // F or B
                int from = dir.equals("F") ? e.stage() - 1 : e.stage() + 1;
                ActionEvent send = sends.get(flowKey(dir, from, e.microbatch(), e.pass()));
                if (send != null) {
                    long id = flowId++;
                    out.emit("{\"ph\":\"s\",\"id\":" + id + ",\"name\":\"tensor\",\"cat\":\"flow\",\"pid\":" + send.stage()
                            + ",\"tid\":" + COMM + ",\"ts\":" + Json.num((send.startNs() - originNs) / 1e3) + "}");
                    out.emit("{\"ph\":\"f\",\"bp\":\"e\",\"id\":" + id + ",\"name\":\"tensor\",\"cat\":\"flow\",\"pid\":" + e.stage()
                            + ",\"tid\":" + COMM + ",\"ts\":" + Json.num(endTs - 0.0005) + "}");
                }
            }
        }
        w.write("\n]}\n");
    }

    private static String flowKey(String dir, int fromStage, int mb, int pass) {
        return dir + ":" + fromStage + ":" + mb + ":" + pass;
    }

    private interface Emitter {
        void emit(String line) throws IOException;
    }
}

package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.schedules.CostModel;
import dev.ttpipe.schedules.Lowering;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.schedules.Schedules;
import dev.ttpipe.schedules.SimResult;
import dev.ttpipe.schedules.Simulator;
import dev.ttpipe.schedules.SvgTimeline;
import dev.ttpipe.schedules.TimedAction;
import dev.ttpipe.stages.checkpoint.MiniJson;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Function;

/**
 * {@code ttpipe report}: one self-contained HTML page (inline SVG and CSS, no script, nothing fetched)
 * from a run directory: the loss and validation curves, tokens/s and the bubble per step, the measured
 * timeline of one traced step drawn like {@code simulate --svg} beside the simulator's prediction for
 * the same step's measured costs, the per-rank table averaged over the steps after the first, the
 * F/I/B/W cost per stage, and the run's metadata. With two run directories they stand side by side.
 */
public final class Report {
    /** One run directory, read; {@code trace}: trace.json's compute spans, null without one. */
    public record Run(Path dir, List<Map<?, ?>> steps, Map<?, ?> record, TtpipeConfig config, List<TracedSpans.Span> trace) {
        public static Run read(Path dir) {
            Path metrics = dir.resolve("metrics.jsonl");
            if (!Files.isRegularFile(metrics)) {
                throw new IllegalArgumentException(dir + ": no metrics.jsonl, expected the run directory of a `ttpipe train` run");
            }
            try {
                List<Map<?, ?>> steps = lastWrites(metrics.toString(), Files.readAllLines(metrics, StandardCharsets.UTF_8));
                if (steps.isEmpty()) throw new IllegalArgumentException(metrics + ": no step recorded yet");
                Path rec = dir.resolve("run.json");
                Map<?, ?> record = Files.isRegularFile(rec) ? object(rec.toString(), () -> MiniJson.read(rec)) : Map.of();
                Path cfg = dir.resolve("config.yaml");
                TtpipeConfig config = Files.isRegularFile(cfg) ? ConfigLoader.load(cfg) : null;
                Path tr = dir.resolve("trace.json");
                List<TracedSpans.Span> trace = Files.isRegularFile(tr) ? TracedSpans.read(tr) : null;
                return new Run(dir, steps, record, config, trace);
            } catch (IOException e) {
                throw new IllegalArgumentException(dir + ": cannot be read (" + e.getMessage() + ")");
            }
        }

        /** A JSON text that {@code source} parses; an error names {@code where}, a file or file:line. */
        private interface JsonSource {
            Object parse() throws IOException;
        }

        /** The JSON object {@code source} parses; an error names {@code where}, a file or file:line. */
        private static Map<?, ?> object(String where, JsonSource source) throws IOException {
            Object parsed;
            try {
                parsed = source.parse();
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(where + ": not valid JSON (" + e.getMessage() + ")");
            }
            if (!(parsed instanceof Map<?, ?> m)) throw new IllegalArgumentException(where + ": not a JSON object");
            return m;
        }

        /**
         * One line per step, in step order, as the run stands now: a line with a {@code mark} (a resume, a recovery, a
         * restart) drops every line written before it of a later step than the one it went back to, and of the steps
         * written more than once (redone after a recovery) the last write is kept.
         */
        static List<Map<?, ?>> lastWrites(List<String> lines) throws IOException {
            return lastWrites("metrics.jsonl", lines);
        }

        /** {@link #lastWrites(List)}; an error names {@code file}:line. */
        static List<Map<?, ?>> lastWrites(String file, List<String> lines) throws IOException {
            TreeMap<Integer, Map<?, ?>> byStep = new TreeMap<>();
            for (int n = 0; n < lines.size(); n++) {
                String line = lines.get(n);
                if (line.isBlank()) continue;
                Map<?, ?> m = object(file + ":" + (n + 1), () -> MiniJson.parse(line));
                if (m.get("mark") instanceof Map<?, ?> mark) byStep.tailMap((int) num(mark.get("from_step")), false).clear();
                byStep.put((int) num(m.get("step")), m);
            }
            return new ArrayList<>(byStep.values());
        }

        /** The step numbers of {@link #steps()}, counted from 1 as metrics.jsonl records them. */
        int[] stepNumbers() {
            return steps.stream().mapToInt(m -> (int) num(m.get("step"))).toArray();
        }

        /** The steps a resume, recovery or restart came before, with its kind. */
        List<Map.Entry<Integer, String>> marks() {
            List<Map.Entry<Integer, String>> out = new ArrayList<>();
            for (Map<?, ?> m : steps) {
                if (m.get("mark") instanceof Map<?, ?> mark) out.add(Map.entry((int) num(m.get("step")), String.valueOf(mark.get("kind"))));
            }
            return out;
        }

        double[] series(String key) {
            double[] out = new double[steps.size()];
            for (int i = 0; i < out.length; i++) out[i] = num(steps.get(i).get(key));
            return out;
        }

        /** The mean of a per-rank array over the steps after the first (all of them when there is one). */
        double[] perRankMean(String key) {
            return meanOverSteps(step -> step.get(key));
        }

        /** The mean per-stage cost of one kind (f, b, i, w) in ms over the steps after the first. */
        double[] stageMean(String kind) {
            return meanOverSteps(step -> step.get("stage_ms") instanceof Map<?, ?> c ? c.get(kind) : null);
        }

        /** Element-wise mean of the array {@code pick} finds in each step after the first (empty when none has one). */
        private double[] meanOverSteps(Function<Map<?, ?>, Object> pick) {
            int from = steps.size() > 1 ? 1 : 0;
            double[] sum = null;
            int n = 0;
            for (int i = from; i < steps.size(); i++) {
                if (!(pick.apply(steps.get(i)) instanceof List<?> v)) continue;
                if (sum == null) sum = new double[v.size()];
                for (int k = 0; k < sum.length; k++) sum[k] += num(v.get(k));
                n++;
            }
            if (sum == null) return new double[0];
            for (int k = 0; k < sum.length; k++) sum[k] /= n;
            return sum;
        }
    }

    private Report() {
    }

    static double num(Object o) {
        return o instanceof Number n ? n.doubleValue() : Double.NaN;
    }

    /** The HTML page for one run, or two side by side, the timeline of the last traced step. */
    public static String html(List<Run> runs) {
        return html(runs, null);
    }

    /** As {@link #html(List)}, the timeline of step {@code step} (1-based; null: the last traced). */
    public static String html(List<Run> runs, Integer step) {
        StringBuilder h = new StringBuilder();
        h.append("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ttpipe report</title>\n<style>")
                .append("body{font-family:Helvetica,Arial,sans-serif;margin:20px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:28px}")
                .append("table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}")
                .append("th{background:#f3f3f3}td.l,th.l{text-align:left}.runs{display:flex;gap:24px}.run{flex:1;min-width:0}")
                .append("svg{max-width:100%;height:auto}details{margin-top:8px}pre{font-size:12px;background:#f7f7f7;padding:8px}")
                .append("</style></head><body>\n<h1>ttpipe report</h1>\n");
        if (runs.size() > 1) {
            h.append("<h2>Loss, both runs</h2>\n<div id=\"loss-compare\">").append(chart(runs, "loss", "loss per step", true))
                    .append("</div>\n");
        }
        h.append("<div class=\"runs\">\n");
        for (Run r : runs) h.append("<div class=\"run\">\n").append(section(r, step)).append("</div>\n");
        return h.append("</div>\n</body></html>\n").toString();
    }

    private static String section(Run r, Integer chosenStep) {
        StringBuilder h = new StringBuilder();
        h.append("<h2>").append(esc(r.dir().getFileName().toString())).append("</h2>\n");
        h.append("<div id=\"loss-curve\">").append(chart(List.of(r), "loss", "loss per step (dots: validation)", false)).append("</div>\n");
        h.append("<div id=\"tokens\">").append(chart(List.of(r), "tokens_per_second", "tokens/s per step", false)).append("</div>\n");
        h.append("<div id=\"bubble\">").append(chart(List.of(r), "bubble", "bubble per step (measured; grey: simulated)", false))
                .append("</div>\n");
        h.append(timeline(r, chosenStep));
        h.append(rankTable(r));
        h.append(stageTable(r));
        h.append("<h2>Run</h2>\n<table id=\"metadata\">");
        for (Map.Entry<?, ?> e : r.record().entrySet()) {
            h.append("<tr><th class=\"l\">").append(esc(String.valueOf(e.getKey()))).append("</th><td class=\"l\">")
                    .append(esc(String.valueOf(e.getValue()))).append("</td></tr>");
        }
        h.append("</table>\n");
        try {
            Path cfg = r.dir().resolve("config.yaml");
            if (Files.isRegularFile(cfg)) {
                h.append("<details><summary>config.yaml</summary><pre>").append(esc(Files.readString(cfg))).append("</pre></details>\n");
            }
        } catch (IOException ignored) {
            // metadata only
        }
        return h.toString();
    }

    /**
     * A line chart of {@code key} against the step recorded in metrics.jsonl for each run, on one step axis (so runs
     * compare step by step, a resumed one from where it resumed); validation loss as dots, the predicted bubble in
     * grey, a dashed line before each step a resume, recovery or restart came before.
     */
    static String chart(List<Run> runs, String key, String title, boolean legend) {
        int w = 560, hgt = 200, left = 50, top = 24, pw = w - left - 12, ph = hgt - top - 28;
        double lo = Double.MAX_VALUE, hi = -Double.MAX_VALUE;
        int first = Integer.MAX_VALUE, last = Integer.MIN_VALUE;
        for (Run r : runs) {
            for (double v : r.series(key)) if (Double.isFinite(v)) {
                lo = Math.min(lo, v);
                hi = Math.max(hi, v);
            }
            if (key.equals("bubble")) for (double v : r.series("predicted_bubble")) if (Double.isFinite(v)) {
                lo = Math.min(lo, v);
                hi = Math.max(hi, v);
            }
            int[] n = r.stepNumbers();
            first = Math.min(first, n[0]);
            last = Math.max(last, n[n.length - 1]);
        }
        if (lo > hi) {
            lo = 0;
            hi = 1;
        }
        if (hi == lo) hi = lo + 1;
        StepAxis axis = new StepAxis(first, last, left, pw);
        StringBuilder s = new StringBuilder("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"" + hgt
                + "\" font-size=\"11\"><text x=\"" + left + "\" y=\"14\" font-weight=\"bold\">" + esc(title) + "</text>");
        s.append("<rect x=\"").append(left).append("\" y=\"").append(top).append("\" width=\"").append(pw).append("\" height=\"")
                .append(ph).append("\" fill=\"none\" stroke=\"#ccc\"/>");
        s.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>", left - 4, top + 10, fmt(hi)));
        s.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>", left - 4, top + ph, fmt(lo)));
        s.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\">step %d</text><text x=\"%d\" y=\"%d\" text-anchor=\"end\">step %d</text>",
                left, top + ph + 16, first, left + pw, top + ph + 16, last));
        String[] colours = {"#1f77b4", "#d62728"};
        for (int k = 0; k < runs.size(); k++) {
            Run r = runs.get(k);
            int[] steps = r.stepNumbers();
            for (Map.Entry<Integer, String> m : r.marks()) {
                double x = axis.x(m.getKey() - 0.5);
                s.append(String.format(Locale.ROOT, "<line class=\"mark\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\""
                                + " stroke-dasharray=\"3,3\"/><text x=\"%.1f\" y=\"%d\" fill=\"%s\">%s at step %d</text>", x, top, x, top + ph,
                        colours[k % 2], x + 2, top + ph - 4 - 12 * k, colours[k % 2], esc(markText(m.getValue())), m.getKey() - 1));
            }
            s.append(polyline(steps, r.series(key), lo, hi, axis, top, ph, colours[k % 2]));
            if (key.equals("bubble")) s.append(polyline(steps, r.series("predicted_bubble"), lo, hi, axis, top, ph, "#999"));
            if (key.equals("loss")) {
                double[] val = r.series("val_loss");
                for (int i = 0; i < val.length; i++) {
                    if (!Double.isFinite(val[i])) continue;
                    s.append(String.format(Locale.ROOT, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", axis.x(steps[i]),
                            y(val[i], lo, hi, top, ph), colours[k % 2]));
                }
            }
            if (legend) {
                s.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>", left + pw - 200, top + 14 + 14 * k,
                        colours[k % 2], esc(r.dir().getFileName().toString())));
            }
        }
        return s.append("</svg>").toString();
    }

    private static String markText(String kind) {
        return switch (kind) {
            case "resume" -> "resumed";
            case "recovery" -> "recovered";
            case "restart" -> "restarted";
            default -> kind;
        };
    }

    /** Steps {@code first..last} across {@code pw} pixels from {@code left}. */
    private record StepAxis(int first, int last, int left, int pw) {
        double x(double step) {
            return left + (last <= first ? 0 : (step - first) / (last - first) * pw);
        }
    }

    private static String polyline(int[] steps, double[] v, double lo, double hi, StepAxis axis, int top, int ph, String colour) {
        StringBuilder p = new StringBuilder();
        for (int i = 0; i < v.length; i++) {
            if (!Double.isFinite(v[i])) continue;
            p.append(String.format(Locale.ROOT, "%.1f,%.1f ", axis.x(steps[i]), y(v[i], lo, hi, top, ph)));
        }
        return p.length() == 0 ? "" : "<polyline fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"1.5\" points=\"" + p.toString().trim() + "\"/>";
    }

    private static double y(double v, double lo, double hi, int top, int ph) {
        return top + ph - (v - lo) / (hi - lo) * ph;
    }

    /**
     * A traced step's first pass as measured (the last traced step, or {@code chosenStep}), and the
     * simulator's prediction for that step's measured costs.
     *
     * @throws IllegalArgumentException when the chosen step is not in trace.json
     */
    static String timeline(Run r, Integer chosenStep) {
        if (r.trace() == null || r.config() == null) return "<h2>Timeline</h2><p>(no trace.json or config.yaml)</p>\n";
        TtpipeConfig.PipelineConfig pc = r.config().pipeline();
        Schedule schedule = Lowering.lower(Schedules.generate(pc.schedule, pc.ranks(), pc.numMicrobatches, pc.effectiveVirtualStages(), null));
        List<TracedSpans.Span> spans = r.trace();
        int lastPass = -1;
        for (TracedSpans.Span e : spans) lastPass = Math.max(lastPass, e.pass());
        if (lastPass < 0) return "<h2>Timeline</h2><p>(no traced pass)</p>\n";
        int accumulation = Math.max(1, r.config().training.gradientAccumulationSteps);
        if (chosenStep != null) {
            int pass = (chosenStep - 1) * accumulation;
            if (spans.stream().noneMatch(e -> e.pass() == pass)) {
                List<Integer> traced = spans.stream().map(e -> e.pass() / accumulation + 1).distinct().sorted().toList();
                throw new IllegalArgumentException("--step: " + chosenStep + " is not in " + r.dir().resolve("trace.json")
                        + ", which holds " + ChromeTrace.stepsText(traced) + " (the first telemetry.trace_steps and the last)");
            }
            lastPass = pass;
        }
        int stepIndex = lastPass / accumulation;
        List<TimedAction> measured = new ArrayList<>();
        double t0 = Double.MAX_VALUE;
        for (TracedSpans.Span e : spans) {
            if (e.pass() != lastPass) continue;
            double start = e.tsUs() / 1e3, end = start + e.durUs() / 1e3;
            t0 = Math.min(t0, start);
            measured.add(new TimedAction(e.pid(), e.action(), start, end));
        }
        List<TimedAction> shifted = new ArrayList<>();
        for (TimedAction t : measured) shifted.add(new TimedAction(t.rank(), t.action(), t.start() - t0, t.end() - t0));
        shifted.sort(Comparator.comparingDouble(TimedAction::start));
        StringBuilder h = new StringBuilder("<h2>Timeline of step " + (stepIndex + 1) + (accumulation > 1 ? ", its first pass" : "")
                + " (ms)</h2>\n<div id=\"timeline\">");
        h.append(SvgTimeline.render(SimResult.of(schedule, shifted), "measured"));
        Map<?, ?> step = r.steps().get(r.steps().size() - 1);
        for (Map<?, ?> m : r.steps()) if ((int) num(m.get("step")) == stepIndex + 1) step = m;
        if (step.get("stage_ms") instanceof Map<?, ?> c) {
            try {
                CostModel costs = CostModel.builder().forward(arr(c.get("f"))).backward(arr(c.get("b"))).backwardInput(arr(c.get("i")))
                        .backwardWeight(arr(c.get("w"))).comm(num(c.get("comm"))).build();
                h.append("</div>\n<div id=\"prediction\">")
                        .append(SvgTimeline.render(Simulator.simulate(schedule, costs), "simulated, same measured costs"));
            } catch (RuntimeException e) {
                h.append("<p>(no prediction: ").append(esc(String.valueOf(e.getMessage()))).append(")</p>");
            }
        }
        return h.append("</div>\n").toString();
    }

    private static double[] arr(Object o) {
        List<?> v = (List<?>) o;
        double[] out = new double[v.size()];
        for (int i = 0; i < out.length; i++) out[i] = num(v.get(i));
        return out;
    }

    static String rankTable(Run r) {
        double[] busy = r.perRankMean("busy_seconds_per_rank"), bubble = r.perRankMean("bubble_per_rank");
        double[] sim = r.perRankMean("predicted_bubble_per_rank"), mem = r.perRankMean("memory_peak_bytes");
        double[] sent = r.perRankMean("sent_bytes_per_rank"), wait = r.perRankMean("recv_wait_seconds_per_rank");
        double[] received = r.perRankMean("received_bytes_per_rank");
        StringBuilder h = new StringBuilder("<h2>Per rank (mean over the steps after the first)</h2>\n<table id=\"rank-table\"><tr>"
                + "<th>rank</th><th>busy</th><th>bubble</th><th>sim bubble</th><th>peak memory</th><th>sent per step</th>"
                + "<th>received per step</th><th>waiting on receives</th></tr>");
        for (int k = 0; k < bubble.length; k++) {
            h.append(String.format(Locale.ROOT, "<tr><td>%d</td><td>%s</td><td>%.1f%%</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>",
                    k, k < busy.length ? String.format(Locale.ROOT, "%.1f ms", busy[k] * 1e3) : "",
                    100 * bubble[k], k < sim.length ? String.format(Locale.ROOT, "%.1f%%", 100 * sim[k]) : "n/a",
                    k < mem.length ? Sizes.format((long) mem[k]) : "",
                    k < sent.length ? Sizes.format((long) sent[k]) : "",
                    k < received.length ? Sizes.format((long) received[k]) : "",
                    k < wait.length ? String.format(Locale.ROOT, "%.1f ms", wait[k] * 1e3) : ""));
        }
        return h.append("</table>\n").toString();
    }

    static String stageTable(Run r) {
        double[] f = r.stageMean("f"), i = r.stageMean("i"), b = r.stageMean("b"), w = r.stageMean("w");
        StringBuilder h = new StringBuilder("<h2>Cost per stage (ms, mean over the steps after the first)</h2>\n"
                + "<table id=\"stage-table\"><tr><th>stage</th><th>F</th><th>I</th><th>B</th><th>W</th></tr>");
        for (int s = 0; s < f.length; s++) {
            h.append(String.format(Locale.ROOT, "<tr><td>%d</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%.2f</td></tr>", s, f[s],
                    s < i.length ? i[s] : Double.NaN, s < b.length ? b[s] : Double.NaN, s < w.length ? w[s] : Double.NaN));
        }
        return h.append("</table>\n").toString();
    }

    /** The figures of each run as JSON (for scripts). */
    public static String json(List<Run> runs) {
        StringBuilder j = new StringBuilder("{\"runs\":[");
        for (int k = 0; k < runs.size(); k++) {
            Run r = runs.get(k);
            double[] loss = r.series("loss");
            int[] steps = r.stepNumbers();
            j.append(k == 0 ? "" : ",").append("{\"dir\":").append(Json.str(r.dir().toString())).append(",\"steps\":").append(loss.length)
                    .append(",\"first_step\":").append(steps[0]).append(",\"last_step\":").append(steps[steps.length - 1])
                    .append(",\"marks\":").append(r.marks().size())
                    .append(",\"first_loss\":").append(Json.num(loss[0])).append(",\"last_loss\":").append(Json.num(loss[loss.length - 1]))
                    .append(",\"bubble_per_rank\":").append(Json.nums(r.perRankMean("bubble_per_rank")))
                    .append(",\"predicted_bubble_per_rank\":").append(Json.nums(r.perRankMean("predicted_bubble_per_rank")))
                    .append(",\"stage_ms\":{\"f\":").append(Json.nums(r.stageMean("f"))).append(",\"b\":").append(Json.nums(r.stageMean("b")))
                    .append("}}");
        }
        return j.append("]}").toString();
    }

    private static String fmt(double v) {
        return Math.abs(v) >= 1000 ? String.format(Locale.ROOT, "%.0f", v) : String.format(Locale.ROOT, "%.3g", v);
    }

    static String esc(String s) {
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\"", "&quot;");
    }
}

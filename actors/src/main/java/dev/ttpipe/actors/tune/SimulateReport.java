package dev.ttpipe.actors.tune;

import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.telemetry.RunLinks;
import dev.ttpipe.actors.telemetry.RunStageCosts;
import dev.ttpipe.actors.telemetry.TextTable;
import dev.ttpipe.actors.telemetry.TextWrap;
import dev.ttpipe.actors.tune.SimulateRun.Outcome;
import dev.ttpipe.actors.tune.SimulateRun.Simulation;
import dev.ttpipe.schedules.AsciiGrid;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.schedules.SimResult;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

import static dev.ttpipe.actors.telemetry.TextTable.num;

/**
 * What {@code ttpipe simulate} prints: one simulated schedule as its grid and figures (makespan, bubble fraction,
 * peak activations per rank), several side by side as one aligned row each, or either as JSON.
 */
final class SimulateReport {
    private SimulateReport() {
    }

    /**
     * The grid and the figures, as text {@code width} columns wide (the grid folded into bands, lines wrapped);
     * {@code stepGrid}: the grid of the schedule's steps (SEND/RECV shown).
     */
    static String text(Outcome o, boolean stepGrid, int width) {
        Schedule s = o.schedule();
        SimResult r = o.result();
        StringBuilder text = new StringBuilder();
        paragraph(text, String.format(Locale.ROOT, "%s: %d ranks, %d stages, %d microbatches", s.name(), s.ranks(), s.stages(),
                s.microbatches()), width);
        paragraph(text, String.format(Locale.ROOT, "costs %s: F=%s B=%s (I=%s W=%s), comm=%s per hop",
                o.costs().measured() == null ? "per rank" : "mean per stage", num(o.costs().f()), num(o.costs().b()),
                num(o.costs().i()), num(o.costs().w()), num(o.costs().comm())), width);
        RunStageCosts mc = o.costs().measured();
        if (mc != null) {
            paragraph(text, String.format(Locale.ROOT, "costs measured in %s (ms, mean of %d steps after the first): F per stage %s, B %s",
                    mc.runDir(), mc.steps(), nums(mc.f()), nums(mc.b())), width);
        }
        RunLinks links = mc == null ? null : mc.links();
        if (links != null) {
            paragraph(text, String.format(Locale.ROOT, "comm per hop from the links %s measured before step 1 (ms, latency + a %s"
                    + " activation frame over the bandwidth): %s", links.file(), Sizes.format(links.activationFrameBytes()),
                    hops(s, links)), width);
        }
        text.append('\n').append(stepGrid ? AsciiGrid.render(s, width) : AsciiGrid.render(r, width)).append('\n');
        text.append(String.format(Locale.ROOT, "makespan %s, bubble %s overall%n%n", num(r.makespan()), percent(r.bubbleFraction())));
        boolean bytes = r.peakActivationBytes(0) >= 0;
        String[] header = {"rank", "stages", "busy", "idle", "bubble", "peak activations"};
        List<String[]> rows = new ArrayList<>();
        for (int rank = 0; rank < s.ranks(); rank++) {
            StringBuilder stages = new StringBuilder();
            for (int st : s.stagesOfRank(rank)) stages.append(stages.length() == 0 ? "" : ",").append(st);
            rows.add(new String[]{Integer.toString(rank), stages.toString(), num(r.busy(rank)), num(r.makespan() - r.busy(rank)),
                    percent(r.bubbleFraction(rank)), r.peakActivations(rank) + (bytes ? " (" + r.peakActivationBytes(rank) + " B)" : "")});
        }
        text.append(TextTable.render(header, rows));
        for (String violation : r.memoryLimitViolations()) paragraph(text, "note: " + violation, width);
        return text.toString();
    }

    /** {@code line} wrapped at spaces to {@code width}, the lines after the first indented by two. */
    private static void paragraph(StringBuilder text, String line, int width) {
        text.append(TextWrap.wrap(line, width, 2)).append('\n');
    }

    /** Each hop between two ranks once, in stage order: {@code 0-1 0.12, 1-2 0.09}. */
    private static String hops(Schedule s, RunLinks links) {
        double[] ms = RankCosts.hops(s, links);
        StringBuilder b = new StringBuilder();
        Set<String> seen = new HashSet<>();
        for (int st = 0; st + 1 < s.stages(); st++) {
            int from = s.rankOfStage(st), to = s.rankOfStage(st + 1);
            if (from == to || !seen.add(Math.min(from, to) + "-" + Math.max(from, to))) continue;
            b.append(b.length() == 0 ? "" : ", ").append(Math.min(from, to)).append('-').append(Math.max(from, to)).append(' ')
                    .append(num(ms[st]));
        }
        return b.toString();
    }

    private static String nums(double[] v) {
        StringBuilder b = new StringBuilder("[");
        for (int k = 0; k < v.length; k++) b.append(k == 0 ? "" : ", ").append(num(v[k]));
        return b.append(']').toString();
    }

    /** One aligned row per schedule; the lines around the table wrapped to {@code width}. */
    static String compareTable(Simulation s, List<Outcome> outcomes, int width) {
        StringBuilder text = new StringBuilder();
        paragraph(text, String.format(Locale.ROOT, "%d ranks, %d microbatches; per rank F=%s B=%s (I=%s W=%s), comm=%s per hop",
                s.ranks(), s.microbatches(), num(s.costs().f()), num(s.costs().b()), num(s.costs().i()), num(s.costs().w()),
                num(s.costs().comm())), width);
        text.append('\n');
        String[] header = {"schedule", "V", "makespan", "bubble", "peak activations per rank"};
        List<String[]> rows = new ArrayList<>();
        for (Outcome o : outcomes) {
            StringBuilder peaks = new StringBuilder();
            for (int rank = 0; rank < o.schedule().ranks(); rank++) {
                peaks.append(rank == 0 ? "" : " ").append(o.result().peakActivations(rank));
            }
            rows.add(new String[]{o.schedule().name(), Integer.toString(o.schedule().virtualStages()), num(o.result().makespan()),
                    percent(o.result().bubbleFraction()), peaks.toString()});
        }
        text.append(TextTable.render(header, rows));
        if (outcomes.stream().anyMatch(o -> o.schedule().virtualStages() > 1)) {
            paragraph(text, "(with V stages per rank, one activation is one stage's: a V-th of a rank's share)", width);
        }
        return text.toString();
    }

    /** The JSON array of {@link #json(Outcome)} objects, one line each. */
    static String jsonArray(List<Outcome> outcomes) {
        StringBuilder array = new StringBuilder("[");
        for (Outcome o : outcomes) array.append(array.length() > 1 ? ",\n " : "").append(json(o));
        return array.append(']').toString();
    }

    /** One JSON object with the schedule's figures. */
    static String json(Outcome o) {
        Schedule s = o.schedule();
        SimResult r = o.result();
        StringBuilder j = new StringBuilder("{");
        j.append("\"schedule\":").append(Json.str(s.name()));
        j.append(",\"stages\":").append(s.ranks());
        j.append(",\"virtual_stages\":").append(s.virtualStages());
        j.append(",\"microbatches\":").append(s.microbatches());
        j.append(",\"lowered\":").append(s.isLowered());
        j.append(",\"costs\":{\"f\":").append(Json.num(o.costs().f())).append(",\"b\":").append(Json.num(o.costs().b()))
                .append(",\"i\":").append(Json.num(o.costs().i())).append(",\"w\":").append(Json.num(o.costs().w()))
                .append(",\"comm\":").append(Json.num(o.costs().comm()));
        RunLinks links = o.costs().measured() == null ? null : o.costs().measured().links();
        if (links != null) j.append(",\"comm_per_stage\":").append(Json.nums(RankCosts.hops(s, links)));
        j.append('}');
        j.append(",\"makespan\":").append(Json.num(r.makespan()));
        j.append(",\"bubble_fraction\":").append(Json.num(r.bubbleFraction()));
        j.append(",\"bubble_fraction_per_rank\":[");
        for (int rank = 0; rank < s.ranks(); rank++) j.append(rank == 0 ? "" : ",").append(Json.num(r.bubbleFraction(rank)));
        j.append("],\"peak_activations\":[");
        for (int rank = 0; rank < s.ranks(); rank++) j.append(rank == 0 ? "" : ",").append(r.peakActivations(rank));
        j.append("],\"memory_limit_violations\":[");
        List<String> violations = r.memoryLimitViolations();
        for (int k = 0; k < violations.size(); k++) j.append(k == 0 ? "" : ",").append(Json.str(violations.get(k)));
        return j.append("]}").toString();
    }

    private static String percent(double fraction) {
        return String.format(Locale.ROOT, "%.1f%%", 100 * fraction);
    }
}

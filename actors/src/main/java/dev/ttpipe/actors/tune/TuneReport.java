package dev.ttpipe.actors.tune;

import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.telemetry.TextTable;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * What {@code ttpipe tune} prints: the costs, the search's figures, the ranking (with the measured columns after
 * {@code --verify-top}) and the candidates that do not fit, as aligned text or as one JSON object.
 * {@code measured} holds one row per verified candidate, the shipped config's last: {median seconds, the prediction
 * at the share of the cores the run got, the prediction from costs calibrated beside it}; empty when nothing was run.
 */
final class TuneReport {
    private TuneReport() {
    }

    static String text(TtpipeConfig cfg, String how, LayerCosts costs, Search.Outcome r, List<Prediction> ranked,
                       Prediction shipped, List<double[]> measured, double calibrationSeconds, Path written) {
        StringBuilder t = new StringBuilder();
        t.append(String.format(Locale.ROOT, "%ncosts (%s, %.1f s):%n", how, calibrationSeconds));
        for (String n : costs.notes()) t.append("  ").append(n).append('\n');
        t.append(String.format(Locale.ROOT, "%nsearched %d candidates in %.2f s (%.0f per second): %d simulated, %d pruned by their"
                        + " lower bound, %d dominated (within 1%% of a faster one that needs no more memory), %d do not fit, %d not buildable%s%n%n",
                r.considered(), r.seconds(), r.considered() / Math.max(1e-9, r.seconds()), r.evaluated(), r.prunedByBound(),
                r.dominated(), r.overflowing().size(), r.invalid(), r.stoppedAtBudget() ? "; stopped at the budget" : ""));
        List<String[]> rows = new ArrayList<>();
        boolean verified = !measured.isEmpty();
        // a P column when the ranking holds more than one rank count (tune --ranks)
        Set<Integer> counts = new HashSet<>();
        for (Prediction p : ranked) counts.add(p.candidate().ranks());
        if (shipped != null) counts.add(shipped.candidate().ranks());
        boolean ranks = counts.size() > 1;
        boolean besides = verified && measured.stream().anyMatch(m -> m.length > 2 && !Double.isNaN(m[2]));
        for (int i = 0; i < ranked.size(); i++) {
            Prediction p = ranked.get(i);
            rows.add(row(Integer.toString(i + 1), p, cfg, verified && i < measured.size() - 1 ? measured.get(i) : null, verified, ranks,
                    besides));
        }
        if (shipped != null) {
            rows.add(row("shipped", shipped, cfg, verified ? measured.get(measured.size() - 1) : null, verified, ranks, besides));
        }
        List<String> header = new ArrayList<>(List.of("#", "schedule", "V", "M", "mbs", "split", "recompute", "step ms", "bubble",
                "peak mem/rank", "tokens/s"));
        if (ranks) header.add(1, "P");
        if (verified) header.addAll(List.of("measured ms", "error", "at its load"));
        if (besides) header.add("calibrated beside");
        t.append(TextTable.render(header.toArray(new String[0]), rows));
        if (verified) {
            t.append(String.format(Locale.ROOT, "measured: `ttpipe train`'s runtime, median step of the steps after the first %d"
                    + " (warm-up, left out); error = (measured - predicted) / predicted; at its load: against the same model"
                    + " re-run at the share of the cores the run itself got (the host's load moves between calibration and"
                    + " verification)%s%n", Trial.WARMUP_STEPS, besides ? "; calibrated beside: predicted again from costs measured by"
                    + " calibration runs stepped in turn with the verified ones (the same load), and its error" : ""));
        }
        if (!r.overflowing().isEmpty()) {
            t.append("\ndo not fit (fastest first):\n");
            for (Prediction p : r.overflowing().subList(0, Math.min(5, r.overflowing().size()))) {
                t.append(String.format(Locale.ROOT, "  %s: %.1f ms/step, rank %d needs %s, %s over %s%n", p.candidate(),
                        p.stepSeconds() * 1e3, p.overflowRank(), Sizes.format(p.peakBytesPerRank()[p.overflowRank()]),
                        Sizes.format(p.overflowBytes()), Sizes.format(cfg.device.memoryPerDevice)));
            }
        }
        return t.toString();
    }

    private static String[] row(String label, Prediction p, TtpipeConfig cfg, double[] m, boolean verified, boolean ranks,
                                boolean besides) {
        double measured = m == null ? Double.NaN : m[0];
        Candidate c = p.candidate();
        int mbs = cfg.training.batchSize / c.microbatches();
        List<String> cells = new ArrayList<>(List.of(label, c.schedule(), Integer.toString(c.virtualStages()),
                Integer.toString(c.microbatches()), Integer.toString(mbs), c.split(), c.recompute() ? "yes" : "no",
                String.format(Locale.ROOT, "%.1f", p.stepSeconds() * 1e3), String.format(Locale.ROOT, "%.1f%%", 100 * p.bubble()),
                Sizes.format(p.peakBytes()), String.format(Locale.ROOT, "%.0f", p.tokensPerSecond())));
        if (ranks) cells.add(1, Integer.toString(c.ranks()));
        if (verified) {
            cells.add(Double.isNaN(measured) ? "" : String.format(Locale.ROOT, "%.1f", measured * 1e3));
            cells.add(Double.isNaN(measured) ? "" : String.format(Locale.ROOT, "%+.1f%%", 100 * (measured - p.stepSeconds()) / p.stepSeconds()));
            cells.add(m == null || Double.isNaN(m[1]) ? "" : String.format(Locale.ROOT, "%+.1f%%", 100 * (measured - m[1]) / m[1]));
        }
        if (besides) {
            cells.add(m == null || Double.isNaN(m[2]) ? "" : String.format(Locale.ROOT, "%.1f ms, %+.1f%%", m[2] * 1e3,
                    100 * (measured - m[2]) / m[2]));
        }
        return cells.toArray(new String[0]);
    }

    static String json(TtpipeConfig cfg, String how, LayerCosts costs, Search.Outcome r, List<Prediction> ranked,
                       Prediction shipped, List<double[]> measured, Path written, Prediction best) {
        StringBuilder j = new StringBuilder("{");
        j.append("\"costs\":").append(Json.str(how));
        j.append(",\"candidates\":").append(r.considered()).append(",\"simulated\":").append(r.evaluated())
                .append(",\"pruned_by_bound\":").append(r.prunedByBound()).append(",\"dominated\":").append(r.dominated())
                .append(",\"do_not_fit\":").append(r.overflowing().size()).append(",\"seconds\":").append(Json.num(r.seconds()))
                .append(",\"stopped_at_budget\":").append(r.stoppedAtBudget());
        j.append(",\"ranking\":[");
        for (int i = 0; i < ranked.size(); i++) {
            j.append(i == 0 ? "" : ",").append(json(ranked.get(i), i < measured.size() - 1 ? measured.get(i) : null));
        }
        j.append("]");
        if (shipped != null) j.append(",\"shipped\":").append(json(shipped, measured.isEmpty() ? null : measured.get(measured.size() - 1)));
        j.append(",\"overflowing\":[");
        for (int i = 0; i < Math.min(5, r.overflowing().size()); i++) {
            Prediction p = r.overflowing().get(i);
            j.append(i == 0 ? "" : ",").append(json(p, null));
        }
        j.append("]");
        j.append(",\"best\":").append(json(best, null));
        if (written != null) j.append(",\"written\":").append(Json.str(written.toString()));
        return j.append('}').toString();
    }

    /** @param m null, or {measured seconds, the prediction at the run's core share, the prediction calibrated beside it} */
    private static String json(Prediction p, double[] m) {
        double measured = m == null ? Double.NaN : m[0];
        Candidate c = p.candidate();
        StringBuilder j = new StringBuilder("{\"schedule\":").append(Json.str(c.schedule()))
                .append(",\"ranks\":").append(c.ranks()).append(",\"virtual_stages\":").append(c.virtualStages()).append(",\"microbatches\":").append(c.microbatches())
                .append(",\"blocks_per_rank\":[").append(c.split()).append("],\"recompute\":").append(c.recompute())
                .append(",\"predicted_step_seconds\":").append(Json.num(p.stepSeconds()))
                .append(",\"bubble\":").append(Json.num(p.bubble())).append(",\"tokens_per_second\":").append(Json.num(p.tokensPerSecond()))
                .append(",\"peak_bytes_per_rank\":[");
        for (int r = 0; r < p.peakBytesPerRank().length; r++) j.append(r == 0 ? "" : ",").append(p.peakBytesPerRank()[r]);
        j.append(']');
        if (!p.fits()) j.append(",\"overflow_rank\":").append(p.overflowRank()).append(",\"overflow_bytes\":").append(p.overflowBytes());
        if (!Double.isNaN(measured)) {
            j.append(",\"measured_step_seconds\":").append(Json.num(measured))
                    .append(",\"error\":").append(Json.num((measured - p.stepSeconds()) / p.stepSeconds()));
            if (m.length > 2 && !Double.isNaN(m[2])) j.append(",\"calibrated_beside_step_seconds\":").append(Json.num(m[2]));
        }
        return j.append('}').toString();
    }
}

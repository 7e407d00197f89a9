package dev.ttpipe.actors.telemetry;

import dev.ttpipe.stages.checkpoint.MiniJson;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The per-stage costs a {@code ttpipe train} run measured, read back from its run directory: the mean over the
 * steps after the first (the only one when there is one) of the {@code stage_ms} that {@link StepMetrics} writes
 * into each line of {@code metrics.jsonl}. Milliseconds; {@code comm} the mean SEND time. A multi-process run also
 * measured its links before step 1 ({@code links}, from its run.json; null for other runs): what a hop costs.
 *
 * @param steps the number of steps averaged
 */
public record RunStageCosts(Path runDir, int steps, double[] f, double[] b, double[] i, double[] w, double comm, RunLinks links) {
    /**
     * Reads {@code runDir/metrics.jsonl}.
     *
     * @throws IllegalArgumentException naming the file (and line) when it cannot be read, a line is not JSON, no
     *                                  step has per-stage costs, or run.json's links cannot be read
     */
    public static RunStageCosts read(Path runDir) {
        Path metrics = runDir.resolve("metrics.jsonl");
        List<String> lines;
        try {
            lines = Files.readAllLines(metrics, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new IllegalArgumentException(metrics + " cannot be read (" + e.getMessage()
                    + "), expected the run directory of a `ttpipe train` run");
        }
        List<Map<?, ?>> costs = new ArrayList<>();
        for (int n = 0; n < lines.size(); n++) {
            Object o;
            try {
                o = MiniJson.parse(lines.get(n));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(metrics + ":" + (n + 1) + ": not JSON (" + e.getMessage() + ")");
            }
            if (o instanceof Map<?, ?> m && m.get("stage_ms") instanceof Map<?, ?> c) costs.add(c);
        }
        if (costs.isEmpty()) {
            throw new IllegalArgumentException(metrics + " has no step with per-stage costs (stage_ms), expected a"
                    + " run of this ttpipe version");
        }
        List<Map<?, ?>> used = costs.size() > 1 ? costs.subList(1, costs.size()) : costs;   // the first step warms up
        return new RunStageCosts(runDir, used.size(), mean(used, "f"), mean(used, "b"), mean(used, "i"), mean(used, "w"),
                used.stream().mapToDouble(c -> ((Number) c.get("comm")).doubleValue()).average().orElse(0), RunLinks.read(runDir));
    }

    private static double[] mean(List<Map<?, ?>> rows, String key) {
        double[] sum = null;
        for (Map<?, ?> r : rows) {
            List<?> v = (List<?>) r.get(key);
            if (sum == null) sum = new double[v.size()];
            for (int k = 0; k < sum.length; k++) sum[k] += v.get(k) == null ? 0 : ((Number) v.get(k)).doubleValue();
        }
        for (int k = 0; k < sum.length; k++) sum[k] /= rows.size();
        return sum;
    }
}

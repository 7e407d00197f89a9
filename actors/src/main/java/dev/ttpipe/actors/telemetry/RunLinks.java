package dev.ttpipe.actors.telemetry;

import dev.ttpipe.stages.checkpoint.MiniJson;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The data links a multi-process run measured before its step 1, read back from its {@code run.json}
 * ({@code "links"} and {@code "link_check"}, written by {@link LinkTable}): the cost of a hop between two ranks as
 * the simulator and {@code tune} take it, the link's latency plus the bytes over its bandwidth, the mean of its two
 * directions.
 *
 * @param file                 the run.json read
 * @param links                by {@code from * 65536 + to}: {latency in seconds, bandwidth in bytes per second}
 * @param activationFrameBytes the bytes of one activation frame of that run
 */
public record RunLinks(Path file, Map<Long, double[]> links, long activationFrameBytes) {
    /**
     * The data links in {@code runDir/run.json}; null when there is no run.json or it has none (a single-process run,
     * or a run of a version without the link check).
     *
     * @throws IllegalArgumentException naming the file when it is not JSON or its links are not as LinkTable writes them
     */
    public static RunLinks read(Path runDir) {
        Path file = runDir.resolve("run.json");
        if (!Files.isRegularFile(file)) return null;
        Object o;
        try {
            o = MiniJson.read(file);
        } catch (IOException | IllegalArgumentException e) {
            throw new IllegalArgumentException(file + " cannot be read (" + e.getMessage() + ")");
        }
        if (!(o instanceof Map<?, ?> run) || !(run.get("links") instanceof List<?> list)) return null;
        Map<Long, double[]> links = new TreeMap<>();
        try {
            for (Object item : list) {
                Map<?, ?> l = (Map<?, ?>) item;
                if (!"data".equals(l.get("kind"))) continue;
                int from = ((Number) l.get("from")).intValue(), to = ((Number) l.get("to")).intValue();
                double gbps = ((Number) l.get("bandwidth_gbps")).doubleValue();
                links.put(key(from, to), new double[]{((Number) l.get("latency_us")).doubleValue() / 1e6, gbps * 1e9});
            }
            if (links.isEmpty()) return null;
            long frame = ((Number) ((Map<?, ?>) run.get("link_check")).get("activation_frame_bytes")).longValue();
            return new RunLinks(file, links, frame);
        } catch (ClassCastException | NullPointerException e) {
            throw new IllegalArgumentException(file + ": \"links\" or \"link_check\" is not as ttpipe writes it (" + e.getMessage()
                    + "), expected the run.json of a multi-process run");
        }
    }

    private static long key(int from, int to) {
        return from * 65536L + to;
    }

    /**
     * Seconds {@code bytes} take between ranks {@code a} and {@code b}: the mean over the directions measured of
     * latency + bytes / bandwidth; for two ranks whose link was not measured, the mean over every measured link.
     */
    public double seconds(int a, int b, double bytes) {
        double sum = 0;
        int n = 0;
        for (long k : new long[]{key(a, b), key(b, a)}) {
            double[] l = links.get(k);
            if (l == null) continue;
            sum += l[0] + bytes / l[1];
            n++;
        }
        if (n > 0) return sum / n;
        for (double[] l : links.values()) sum += l[0] + bytes / l[1];
        return sum / links.size();
    }

    /** Milliseconds of one activation frame of the run over a link, the mean over every measured link. */
    public double meanHopMs() {
        double sum = 0;
        for (double[] l : links.values()) sum += l[0] + activationFrameBytes / l[1];
        return sum / links.size() * 1e3;
    }

    /** Milliseconds of one activation frame of the run between ranks {@code a} and {@code b}. */
    public double hopMs(int a, int b) {
        return seconds(a, b, activationFrameBytes) * 1e3;
    }
}

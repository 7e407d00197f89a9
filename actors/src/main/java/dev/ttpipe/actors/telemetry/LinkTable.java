package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.actors.runtime.LinkCheck;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * A passed link check ({@link LinkCheck}) as the job prints it (a table within 80 columns) and as {@code run.json}
 * keeps it: {@code "links"}, one object per link, and {@code "link_check"}, what the check sent and the bytes of
 * one activation frame, with which {@link RunLinks} turns the figures into the cost of a hop.
 */
public final class LinkTable {
    /** Addresses longer than this are cut in the middle, so that a row fits 80 columns. */
    private static final int ADDRESS_WIDTH = 36;

    private LinkTable() {
    }

    /** The heading and one row per link. */
    public static String text(LinkCheck.Report r) {
        String[] header = {"link", "ranks", "to", "latency", "bandwidth"};
        List<String[]> rows = new ArrayList<>();
        for (LinkCheck.Measured m : r.links()) {
            boolean control = m.kind().equals("control");
            rows.add(new String[]{m.kind(), m.from() + (control ? " <> " : " -> ") + m.to(), shorten(m.toAddress()),
                    latency(m.latencyUs()), String.format(Locale.ROOT, "%.2f GB/s", m.gbps())});
        }
        return TextWrap.wrap(String.format(Locale.ROOT, "link check: %d link%s in %.2f s, each way a %s and a %s frame, %s each",
                r.links().size(), r.links().size() == 1 ? "" : "s", r.seconds(), Sizes.format(LinkCheck.SMALL_BYTES),
                Sizes.format(r.largeBytes()), seconds(r.deadline().toMillis())), Terminal.columns(), 2) + "\n"
                + TextTable.render(header, rows);
    }

    /** One line: how many links, the slowest latency and bandwidth (after a recovery's check). */
    public static String summary(LinkCheck.Report r) {
        double latency = 0, gbps = Double.MAX_VALUE;
        for (LinkCheck.Measured m : r.links()) {
            latency = Math.max(latency, m.latencyUs());
            gbps = Math.min(gbps, m.gbps());
        }
        return String.format(Locale.ROOT, "link check: %d links in %.2f s; the slowest latency %s, the lowest bandwidth %.2f GB/s",
                r.links().size(), r.seconds(), latency(latency), r.links().isEmpty() ? 0 : gbps);
    }

    /** run.json's {@code "links"}: an array of {kind, from, to, from_address, to_address, latency_us, bandwidth_gbps, bytes}. */
    public static String json(LinkCheck.Report r) {
        StringBuilder j = new StringBuilder("[");
        for (LinkCheck.Measured m : r.links()) {
            j.append(j.length() == 1 ? "\n    " : ",\n    ").append("{\"kind\": ").append(Json.str(m.kind()))
                    .append(", \"from\": ").append(m.from()).append(", \"to\": ").append(m.to())
                    .append(", \"from_address\": ").append(Json.str(m.fromAddress()))
                    .append(", \"to_address\": ").append(Json.str(m.toAddress()))
                    .append(", \"latency_us\": ").append(Json.num(round(m.latencyUs(), 1)))
                    .append(", \"bandwidth_gbps\": ").append(Json.num(round(m.gbps(), 4)))
                    .append(", \"bytes\": ").append(m.bytes()).append('}');
        }
        return j.append(r.links().isEmpty() ? "]" : "\n  ]").toString();
    }

    /** run.json's {@code "link_check"}: the frames' sizes, the deadline, the time it took, and one activation frame's bytes. */
    public static String checkJson(LinkCheck.Report r, long activationFrameBytes) {
        return "{\"small_bytes\": " + LinkCheck.SMALL_BYTES + ", \"large_bytes\": " + r.largeBytes() + ", \"deadline_s\": "
                + Json.num(r.deadline().toMillis() / 1e3) + ", \"seconds\": " + Json.num(round(r.seconds(), 3))
                + ", \"activation_frame_bytes\": " + activationFrameBytes + "}";
    }

    private static String latency(double us) {
        return us >= 1000 ? String.format(Locale.ROOT, "%.2f ms", us / 1e3) : String.format(Locale.ROOT, "%.0f us", us);
    }

    private static String seconds(long ms) {
        return ms % 1000 == 0 ? ms / 1000 + " s" : String.format(Locale.ROOT, "%.1f s", ms / 1e3);
    }

    private static String shorten(String address) {
        if (address.length() <= ADDRESS_WIDTH) return address;
        int keep = (ADDRESS_WIDTH - 2) / 2;
        return address.substring(0, keep) + ".." + address.substring(address.length() - keep);
    }

    private static double round(double v, int decimals) {
        double f = Math.pow(10, decimals);
        return Math.round(v * f) / f;
    }
}

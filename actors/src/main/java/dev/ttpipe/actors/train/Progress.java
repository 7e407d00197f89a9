package dev.ttpipe.actors.train;

import java.io.PrintStream;
import java.util.Locale;

/**
 * A progress line for long work: redrawn in place on a terminal, or printed every tenth of the way
 * (and at the end) when the output is a file or a pipe.
 */
public final class Progress {
    private final PrintStream out;
    private final int total;
    private final boolean tty;
    private final long startNs = System.nanoTime();
    private int lastPrinted = -1;
    private int width;

    public Progress(PrintStream out, int total) {
        this.out = out;
        this.total = total;
        this.tty = System.console() != null && !"dumb".equals(System.getenv("TERM"));
    }

    public void update(int done, String status) {
        double elapsed = (System.nanoTime() - startNs) / 1e9;
        double eta = done == 0 ? 0 : elapsed / done * (total - done);
        int barWidth = 24;
        int filled = (int) Math.round(barWidth * (double) done / total);
        String bar = "[" + "=".repeat(Math.max(0, filled - 1)) + (filled > 0 ? ">" : "") + " ".repeat(barWidth - filled) + "]";
        String line = String.format(Locale.ROOT, "step %d/%d %s %s | %s elapsed, ETA %s", done, total, bar, status,
                duration(elapsed), duration(eta));
        if (tty) {
            out.print("\r" + line + " ".repeat(Math.max(0, width - line.length())));
            width = line.length();
            if (done == total) out.println();
            out.flush();
        } else {
            int every = Math.max(1, total / 10);
            if (done == total || done == 1 || done / every != lastPrinted / every) {
                out.println(line);
                lastPrinted = done;
            }
        }
    }

    public static String duration(double seconds) {
        if (seconds < 60) return String.format(Locale.ROOT, "%.0fs", seconds);
        long s = Math.round(seconds);
        if (s < 3600) return String.format(Locale.ROOT, "%dm%02ds", s / 60, s % 60);
        return String.format(Locale.ROOT, "%dh%02dm", s / 3600, (s % 3600) / 60);
    }
}

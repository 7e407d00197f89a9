package dev.ttpipe.actors.train;

import dev.ttpipe.actors.telemetry.Terminal;
import dev.ttpipe.actors.telemetry.TextWrap;

import java.io.PrintStream;
import java.util.Locale;

/**
 * A progress line for long work, the ETA first: {@code ETA 1m05s | step 150/300 [====>     ] 1m40s | STATUS}.
 * On a terminal it is redrawn in place and cut to the terminal's width ({@link Terminal#columns()}), so what
 * is cut is the status's end, never the ETA; when the output is a file or a pipe (a log), it prints a plain
 * line ({@code ETA 1m05s | step 150/300, 1m40s | STATUS}, wrapped at spaces to 80 columns, no carriage
 * returns) every {@code logEvery} steps, or about every 10 s when that is 0, plus the first and the last.
 * The ETA leaves out start-up: it is the rate since the first step ended, not since the start.
 */
public final class Progress {
    static final long LOG_INTERVAL_NS = 10_000_000_000L;

    private final PrintStream out;
    private final int total;
    private final int first;
    private final boolean tty;
    private final int logEvery;
    private final long startNs = System.nanoTime();
    private long rateStartNs = -1;
    private int rateStartDone;
    private long lastPrintNs = Long.MIN_VALUE;
    private int width;

    /**
     * @param first    steps already done before this run (a resumed run)
     * @param logEvery when not a terminal, print every this many steps (0: about every 10 s)
     */
    public Progress(PrintStream out, int total, int first, int logEvery) {
        this.out = out;
        this.total = total;
        this.first = first;
        this.logEvery = logEvery;
        this.tty = Terminal.isTerminal();
    }

    public void update(int done, String status) {
        long now = System.nanoTime();
        if (rateStartNs < 0) {                       // the first step: start-up and warm-up, left out of the ETA
            rateStartNs = now;
            rateStartDone = done;
        }
        double elapsed = (now - startNs) / 1e9;
        String eta = done > rateStartDone ? duration((now - rateStartNs) / 1e9 / (done - rateStartDone) * (total - done)) : "...";
        if (tty) {
            int columns = Terminal.columns();
            String head = "ETA " + eta + " | step " + done + "/" + total + " ";
            String tail = " " + duration(elapsed) + " | " + status;
            int barWidth = Math.max(10, Math.min(24, columns - 1 - head.length() - tail.length() - 2));
            String line = head + bar(done, barWidth) + tail;
            if (line.length() > columns - 1) line = line.substring(0, columns - 1);
            out.print("\r" + line + " ".repeat(Math.max(0, width - line.length())));
            width = line.length();
            if (done == total) out.println();
            out.flush();
        } else {
            boolean due = logEvery > 0 ? (done - first) % logEvery == 0 : now - lastPrintNs >= LOG_INTERVAL_NS;
            if (done == total || done == first + 1 || due) {
                out.println(TextWrap.wrap("ETA " + eta + " | step " + done + "/" + total + ", " + duration(elapsed) + " | " + status,
                        Terminal.columns(), 2));
                lastPrintNs = now;
            }
        }
    }

    /** A line of its own between progress updates: on a terminal it replaces the progress line, which the next update redraws. */
    public void note(String line) {
        if (tty && width > 0) {
            out.print("\r" + " ".repeat(width) + "\r");
            width = 0;
        }
        out.println(line);
        out.flush();
    }

    private String bar(int done, int barWidth) {
        int filled = (int) Math.round(barWidth * (double) done / total);
        return "[" + "=".repeat(Math.max(0, filled - 1)) + (filled > 0 ? ">" : "") + " ".repeat(barWidth - filled) + "]";
    }

    public static String duration(double seconds) {
        if (seconds < 60) return String.format(Locale.ROOT, "%.0fs", seconds);
        long s = Math.round(seconds);
        if (s < 3600) return String.format(Locale.ROOT, "%dm%02ds", s / 60, s % 60);
        return String.format(Locale.ROOT, "%dh%02dm", s / 3600, (s % 3600) / 60);
    }
}

package dev.ttpipe.schedules;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.function.IntFunction;

/**
 * Schedules and timelines as text for the terminal: one line per rank. Cells are compact
 * actions, {@code F3}, {@code B3}, {@code I3}, {@code W3}, with the stage in front when ranks hold
 * several ({@code 4F3}); comm actions are {@code sF3}/{@code rF3} (send/receive forward) and
 * {@code sB3}/{@code rB3}; {@code RG} and {@code OS} are REDUCE_GRAD and OPTIMIZER_STEP.
 */
public final class AsciiGrid {
    private static final int MAX_SLOTS = 4000;

    private AsciiGrid() {
    }

    /** One column per step (position in the row), no timing, on lines as long as it takes. */
    public static String render(Schedule schedule) {
        return render(schedule, Integer.MAX_VALUE);
    }

    /**
     * One column per step (position in the row), no timing, folded to {@code width} columns: when the steps do
     * not fit, they go on in bands below, each with its own step numbers and rank labels.
     */
    public static String render(Schedule schedule, int width) {
        boolean stagePrefix = schedule.virtualStages() > 1;
        int steps = 0;
        int labelWidth = 1;
        for (List<Action> row : schedule.rows()) {
            steps = Math.max(steps, row.size());
            for (Action a : row) labelWidth = Math.max(labelWidth, label(a, stagePrefix).length());
        }
        int cell = labelWidth + 1;
        char[][] lines = blank(schedule.ranks(), steps * cell);
        for (int r = 0; r < schedule.ranks(); r++) {
            List<Action> row = schedule.row(r);
            for (int k = 0; k < row.size(); k++) {
                String text = label(row.get(k), stagePrefix);
                text.getChars(0, text.length(), lines[r], k * cell);
            }
        }
        StringBuilder out = new StringBuilder();
        fold(out, "step", lines, cell, steps, 5, Integer::toString, width);
        return out.toString();
    }

    /** One column per time slot (see {@link #render(SimResult, int)}), on lines as long as it takes. */
    public static String render(SimResult result) {
        return render(result, Integer.MAX_VALUE);
    }

    /**
     * One column per time slot, the slot being the shortest action: an action's label starts
     * where it starts and its span stays blank, {@code .} marks idle slots. Zero-length actions
     * (comm without cost) are not drawn. Folded to {@code width} columns: when the slots do not fit,
     * they go on in bands below, each with its own time axis and rank labels.
     */
    public static String render(SimResult result, int width) {
        Schedule schedule = result.schedule();
        double slotMin = Double.POSITIVE_INFINITY;
        for (TimedAction e : result.events()) {
            if (e.duration() > 0) slotMin = Math.min(slotMin, e.duration());
        }
        if (slotMin == Double.POSITIVE_INFINITY) return render(schedule, width);
        double slot = Math.max(slotMin, result.makespan() / MAX_SLOTS);
        int slots = (int) Math.ceil(result.makespan() / slot - 1e-9);
        boolean stagePrefix = schedule.virtualStages() > 1;
        int labelWidth = 1;
        for (TimedAction e : result.events()) labelWidth = Math.max(labelWidth, label(e.action(), stagePrefix).length());
        int cell = labelWidth + 1;
        char[][] lines = blank(schedule.ranks(), slots * cell);
        for (char[] line : lines) {
            for (int k = 0; k < slots; k++) line[k * cell] = '.';
        }
        double t0 = result.start();
        for (TimedAction e : result.events()) {
            if (e.duration() <= 0) continue;
            int from = (int) Math.round((e.start() - t0) / slot);
            int to = Math.max(from + 1, (int) Math.round((e.end() - t0) / slot));
            char[] line = lines[e.rank()];
            from = Math.min(from, slots - 1);
            to = Math.min(to, slots);
            Arrays.fill(line, from * cell, to * cell, ' ');
            String text = label(e.action(), stagePrefix);
            int room = (to - from) * cell - 1;
            text.getChars(0, Math.min(text.length(), room), line, from * cell);
        }
        StringBuilder out = new StringBuilder();
        int tick = Math.max(1, (int) Math.ceil(8.0 / cell));
        double step = slot;
        int rankLabel = ("rank " + (schedule.ranks() - 1)).length();
        fold(out, "time", lines, cell, slots, tick, k -> number(k * step), width);
        String indent = " ".repeat(rankLabel + 2);
        String[] legend = {"one column = " + number(slot) + (slot == 1 ? " time unit;" : " time units;"), "F forward,", "B backward,",
                "I input grad,", "W weight grad,", ". idle"};
        StringBuilder line = new StringBuilder(indent).append(legend[0]);
        for (int k = 1; k < legend.length; k++) {
            if (line.length() + 1 + legend[k].length() > width) {
                out.append(line).append('\n');
                line.setLength(0);
                line.append(indent).append(legend[k]);
            } else {
                line.append(' ').append(legend[k]);
            }
        }
        return out.append(line).append('\n').toString();
    }

    private static char[][] blank(int ranks, int width) {
        char[][] lines = new char[ranks][width];
        for (char[] line : lines) Arrays.fill(line, ' ');
        return lines;
    }

    /**
     * Appends the grid {@code lines} ({@code columns} columns of {@code cell} characters per rank) under an axis
     * headed {@code corner} that labels every {@code tick}-th column, in bands that fit {@code width}: as many
     * whole ticks per band as fit (whole columns where not even one tick does), a blank line between bands.
     * A label never straddles two bands: each fits its cell.
     */
    private static void fold(StringBuilder out, String corner, char[][] lines, int cell, int columns, int tick,
                             IntFunction<String> axisLabel, int width) {
        int labelWidth = ("rank " + (lines.length - 1)).length();
        long room = (long) width - labelWidth - 2;
        int perBand = room >= (long) tick * cell ? (int) Math.min(columns, room / ((long) tick * cell) * tick)
                : (int) Math.max(1, room / cell);
        for (int c0 = 0; c0 < Math.max(1, columns); c0 += perBand) {
            int c1 = Math.min(columns, c0 + perBand);
            if (c0 > 0) out.append('\n');
            char[] axis = new char[Math.max(0, c1 - c0) * cell];
            Arrays.fill(axis, ' ');
            for (int k = c0; k < c1; k++) {
                if (k % tick != 0) continue;
                String text = axisLabel.apply(k);
                int fits = Math.min(tick, c1 - k) * cell - 1;
                text.getChars(0, Math.min(text.length(), fits), axis, (k - c0) * cell);
            }
            appendTrimmed(out, pad(corner, labelWidth) + " |", axis, 0, axis.length);
            for (int r = 0; r < lines.length; r++) {
                appendTrimmed(out, pad("rank " + r, labelWidth) + " |", lines[r], c0 * cell, Math.max(0, c1 - c0) * cell);
            }
        }
    }

    private static void appendTrimmed(StringBuilder out, String head, char[] body, int from, int length) {
        int start = out.length();
        out.append(head).append(body, from, length);
        int n = out.length();
        while (n > start && out.charAt(n - 1) == ' ') n--;
        out.setLength(n);
        out.append('\n');
    }

    /** The compact cell text of an action (see the class comment). */
    static String label(Action a, boolean stagePrefix) {
        String code = switch (a.kind()) {
            case SEND_F -> "sF";
            case RECV_F -> "rF";
            case SEND_B -> "sB";
            case RECV_B -> "rB";
            case REDUCE_GRAD -> "RG";
            case OPTIMIZER_STEP -> "OS";
            default -> a.kind().name();
        };
        return (stagePrefix ? Integer.toString(a.stage()) : "") + code + (a.hasMicrobatch() ? Integer.toString(a.microbatch()) : "");
    }

    static String number(double v) {
        if (v == Math.rint(v) && Math.abs(v) < 1e15) return Long.toString((long) v);
        return String.format(Locale.ROOT, "%.3g", v);
    }

    private static String pad(String s, int width) {
        return s.length() >= width ? s : s + " ".repeat(width - s.length());
    }
}

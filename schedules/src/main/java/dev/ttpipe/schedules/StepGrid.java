package dev.ttpipe.schedules;

import java.util.List;

/**
 * The rank-by-step grid that failure messages show: one line per rank, one column per step (the
 * position in the row), the offending action in brackets. Long schedules show a window of steps
 * around the marked one.
 */
final class StepGrid {
    private static final int MAX_STEPS = 32;

    private StepGrid() {
    }

    /** The grid with the action at ({@code markRank}, {@code markStep}) marked; -1 marks nothing. */
    static String render(Schedule schedule, int markRank, int markStep) {
        int steps = 0;
        for (List<Action> row : schedule.rows()) steps = Math.max(steps, row.size());
        int from = 0;
        int to = steps;
        if (steps > MAX_STEPS) {
            from = markStep < 0 ? 0 : Math.max(0, Math.min(markStep - MAX_STEPS / 2, steps - MAX_STEPS));
            to = from + MAX_STEPS;
        }
        int width = Integer.toString(steps).length();
        for (List<Action> row : schedule.rows()) {
            for (int t = from; t < Math.min(to, row.size()); t++) width = Math.max(width, row.get(t).toString().length());
        }
        width += 3; // room for the brackets of the marked cell and a space
        String label = "rank " + (schedule.ranks() - 1);
        StringBuilder out = new StringBuilder();
        out.append(pad("step", label.length() + 1));
        if (from > 0) out.append(pad("...", 4));
        for (int t = from; t < to; t++) out.append(pad(" " + t, width));
        if (to < steps) out.append("...");
        trimEnd(out);
        for (int r = 0; r < schedule.ranks(); r++) {
            out.append('\n').append(pad("rank " + r, label.length() + 1));
            if (from > 0) out.append(pad("...", 4));
            List<Action> row = schedule.row(r);
            for (int t = from; t < Math.min(to, row.size()); t++) {
                String cell = row.get(t).toString();
                out.append(pad(r == markRank && t == markStep ? "[" + cell + "]" : " " + cell, width));
            }
            if (to < row.size()) out.append("...");
            trimEnd(out);
        }
        return out.toString();
    }

    private static String pad(String s, int width) {
        return s.length() >= width ? s + " " : s + " ".repeat(width - s.length());
    }

    private static void trimEnd(StringBuilder out) {
        int n = out.length();
        while (n > 0 && out.charAt(n - 1) == ' ') n--;
        out.setLength(n);
    }
}

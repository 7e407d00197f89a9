package dev.ttpipe.schedules;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;

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

    /** One column per step (position in the row), no timing. */
    public static String render(Schedule schedule) {
        boolean stagePrefix = schedule.virtualStages() > 1;
        int steps = 0;
        int width = 1;
        for (List<Action> row : schedule.rows()) {
            steps = Math.max(steps, row.size());
            for (Action a : row) width = Math.max(width, label(a, stagePrefix).length());
        }
        int cell = width + 1;
        String rankLabel = "rank " + (schedule.ranks() - 1);
        StringBuilder out = new StringBuilder();
        out.append(pad("step", rankLabel.length())).append(" |");
        for (int t = 0; t < steps; t += 5) out.append(pad(t + " ", 5 * cell));
        trimEnd(out);
        for (int r = 0; r < schedule.ranks(); r++) {
            out.append('\n').append(pad("rank " + r, rankLabel.length())).append(" |");
            for (Action a : schedule.row(r)) out.append(pad(label(a, stagePrefix), cell));
            trimEnd(out);
        }
        return out.append('\n').toString();
    }

    /**
     * One column per time slot, the slot being the shortest action: an action's label starts
     * where it starts and its span stays blank, {@code .} marks idle slots. Zero-length actions
     * (comm without cost) are not drawn.
     */
    public static String render(SimResult result) {
        Schedule schedule = result.schedule();
        double slot = Double.POSITIVE_INFINITY;
        for (TimedAction e : result.events()) {
            if (e.duration() > 0) slot = Math.min(slot, e.duration());
        }
        if (slot == Double.POSITIVE_INFINITY) return render(schedule);
        slot = Math.max(slot, result.makespan() / MAX_SLOTS);
        int slots = (int) Math.ceil(result.makespan() / slot - 1e-9);
        boolean stagePrefix = schedule.virtualStages() > 1;
        int width = 1;
        for (TimedAction e : result.events()) width = Math.max(width, label(e.action(), stagePrefix).length());
        int cell = width + 1;
        String rankLabel = "rank " + (schedule.ranks() - 1);
        StringBuilder out = new StringBuilder();
        out.append(pad("time", rankLabel.length())).append(" |");
        int tick = Math.max(1, (int) Math.ceil(8.0 / cell));
        for (int k = 0; k < slots; k += tick) out.append(pad(number(k * slot) + " ", tick * cell));
        trimEnd(out);
        char[][] lines = new char[schedule.ranks()][slots * cell];
        for (char[] line : lines) {
            Arrays.fill(line, ' ');
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
        for (int r = 0; r < lines.length; r++) {
            out.append('\n').append(pad("rank " + r, rankLabel.length())).append(" |").append(lines[r]);
            trimEnd(out);
        }
        out.append('\n').append(pad("", rankLabel.length())).append("  one column = ").append(number(slot))
                .append(slot == 1 ? " time unit" : " time units").append("; F forward, B backward, I input grad, W weight grad, . idle\n");
        return out.toString();
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

    private static void trimEnd(StringBuilder out) {
        int n = out.length();
        while (n > 0 && out.charAt(n - 1) == ' ') n--;
        out.setLength(n);
    }
}

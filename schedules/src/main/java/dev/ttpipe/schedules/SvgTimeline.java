package dev.ttpipe.schedules;

import java.util.Locale;

/**
 * A timeline as the classic pipeline diagram, in SVG: one row per rank, time to the right, a box
 * per action coloured by kind (F blue, B green, I teal, W purple, comm a thin grey bar, REDUCE_GRAD
 * orange, OPTIMIZER_STEP red) with its microbatch number inside when it fits and the full action
 * as tooltip; idle time shows as the grey row background. A time axis, a legend, and a title with
 * the makespan and bubble fraction.
 *
 * <p>The plot is as wide as its actions need: at least {@value #MIN_PLOT_WIDTH} px, and wider where the
 * shortest labelled action would be too narrow for its label (so at P=8, M=32 every microbatch number shows,
 * and twice the microbatches make it about twice as wide), up to {@value #MAX_PLOT_WIDTH} px.
 *
 * <p>A timeline of more than {@value #MAX_BOXES} actions (a pipeline of 128 ranks and 512 microbatches has
 * 131,072 compute actions) is drawn thinned, so the page stays a few MB instead of hundreds: the comm bars are
 * left out and, where the compute actions alone are still more, every k-th rank drawn (the first and the last
 * always), k the least that brings them within the limit. The heading says so; the trace has every action.
 */
public final class SvgTimeline {
    static final int MIN_PLOT_WIDTH = 1200;
    static final int MAX_PLOT_WIDTH = 30_000;
    /** The most boxes drawn; a larger timeline is thinned (every k-th rank, no comm bars). */
    static final int MAX_BOXES = 40_000;
    /** The width a label's character takes at font size 11, and the margin around a label in its box. */
    private static final double CHAR_PX = 6.5, LABEL_MARGIN_PX = 2;
    private static final int LEFT = 70;
    private static final int TOP = 44;
    private static final int ROW = 26;
    private static final int ROW_GAP = 4;

    private SvgTimeline() {
    }

    /** The SVG document; {@code title} (e.g. the schedule name) heads it, followed by the figures. */
    public static String render(SimResult result, String title) {
        Schedule schedule = result.schedule();
        int ranks = schedule.ranks();
        double makespan = result.makespan();
        boolean stagePrefix = schedule.virtualStages() > 1;
        int plotWidth = plotWidth(result, stagePrefix);
        double scale = makespan > 0 ? plotWidth / makespan : 1;
        double t0 = result.start();
        boolean thinned = result.events().size() > MAX_BOXES;
        int stride = rankStride(result);
        int[] row = new int[ranks];                       // the row of each rank drawn, -1 for one left out
        int rows = 0;
        for (int r = 0; r < ranks; r++) row[r] = r % stride == 0 || r == ranks - 1 ? rows++ : -1;
        int plotHeight = rows * (ROW + ROW_GAP);
        int width = LEFT + plotWidth + 20;
        int height = TOP + plotHeight + 70;
        StringBuilder svg = new StringBuilder(256 + Math.min(result.events().size(), MAX_BOXES) * 160);
        svg.append("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"").append(width).append("\" height=\"").append(height)
                .append("\" viewBox=\"0 0 ").append(width).append(' ').append(height)
                .append("\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n");
        svg.append("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
        String heading = title + " \u2014 P=" + ranks + (schedule.virtualStages() > 1 ? ", V=" + schedule.virtualStages() : "")
                + ", M=" + schedule.microbatches() + ", makespan " + AsciiGrid.number(makespan) + ", bubble "
                + String.format(Locale.ROOT, "%.1f%%", 100 * result.bubbleFraction())
                + (!thinned ? "" : stride > 1 ? "; drawn: every " + ordinal(stride) + " rank (" + rows + " of " + ranks
                + "), no comm bars" : "; drawn: no comm bars");
        svg.append("<text x=\"").append(LEFT).append("\" y=\"24\" font-size=\"15\" font-weight=\"bold\">")
                .append(escape(heading)).append("</text>\n");
        for (int r = 0; r < ranks; r++) {
            if (row[r] < 0) continue;
            int y = TOP + row[r] * (ROW + ROW_GAP);
            svg.append("<text x=\"").append(LEFT - 8).append("\" y=\"").append(y + ROW / 2 + 4)
                    .append("\" text-anchor=\"end\">rank ").append(r).append("</text>\n");
            svg.append("<rect x=\"").append(LEFT).append("\" y=\"").append(y).append("\" width=\"").append(plotWidth)
                    .append("\" height=\"").append(ROW).append("\" fill=\"#eeeeee\"/>\n");
        }
        for (TimedAction e : result.events()) {
            Action a = e.action();
            boolean thin = a.kind().isComm();
            if (row[e.rank()] < 0 || (thin && thinned)) continue;
            double x = LEFT + (e.start() - t0) * scale;
            double w = Math.max(e.duration() * scale, thin ? 1 : 0.5);
            int y = TOP + row[e.rank()] * (ROW + ROW_GAP);
            svg.append("<rect x=\"").append(fmt(x)).append("\" y=\"").append(thin ? y + ROW - 5 : y).append("\" width=\"")
                    .append(fmt(w)).append("\" height=\"").append(thin ? 5 : ROW).append("\" fill=\"").append(color(a.kind()))
                    .append("\" stroke=\"white\" stroke-width=\"0.5\"><title>").append(a).append(" on rank ").append(e.rank())
                    .append(": ").append(AsciiGrid.number(e.start())).append(" to ").append(AsciiGrid.number(e.end()))
                    .append("</title></rect>\n");
            String text = boxLabel(a, stagePrefix);
            if (!thin && !text.isEmpty() && w >= CHAR_PX * text.length() + LABEL_MARGIN_PX) {
                svg.append("<text x=\"").append(fmt(x + w / 2)).append("\" y=\"").append(y + ROW / 2 + 4)
                        .append("\" text-anchor=\"middle\" fill=\"white\">").append(text).append("</text>\n");
            }
        }
        int axisY = TOP + plotHeight + 4;
        svg.append("<line x1=\"").append(LEFT).append("\" y1=\"").append(axisY).append("\" x2=\"").append(LEFT + plotWidth)
                .append("\" y2=\"").append(axisY).append("\" stroke=\"black\"/>\n");
        double step = tickStep(makespan);
        for (double t = 0; t <= makespan * (1 + 1e-9) && step > 0; t += step) {
            double x = LEFT + t * scale;
            svg.append("<line x1=\"").append(fmt(x)).append("\" y1=\"").append(axisY).append("\" x2=\"").append(fmt(x))
                    .append("\" y2=\"").append(axisY + 4).append("\" stroke=\"black\"/>");
            svg.append("<text x=\"").append(fmt(x)).append("\" y=\"").append(axisY + 16).append("\" text-anchor=\"middle\">")
                    .append(AsciiGrid.number(t)).append("</text>\n");
        }
        svg.append("<text x=\"").append(LEFT + plotWidth).append("\" y=\"").append(axisY + 30)
                .append("\" text-anchor=\"end\">time</text>\n");
        int legendY = axisY + 44;
        int x = LEFT;
        String[][] legend = {{"F", "forward"}, {"B", "backward"}, {"I", "input grad"}, {"W", "weight grad"},
                {"SEND_F", "comm"}, {"", "idle"}};
        for (String[] item : legend) {
            String fill = item[0].isEmpty() ? "#eeeeee" : color(ActionKind.valueOf(item[0]));
            svg.append("<rect x=\"").append(x).append("\" y=\"").append(legendY - 10).append("\" width=\"12\" height=\"12\" fill=\"")
                    .append(fill).append("\"/><text x=\"").append(x + 16).append("\" y=\"").append(legendY).append("\">")
                    .append(item[1]).append("</text>\n");
            x += 30 + 7 * item[1].length();
        }
        return svg.append("</svg>\n").toString();
    }

    /**
     * The plot's width in px: {@link #MIN_PLOT_WIDTH}, or as wide as it takes for the shortest labelled action
     * to hold the longest label, at most {@link #MAX_PLOT_WIDTH}.
     */
    static int plotWidth(SimResult result, boolean stagePrefix) {
        double makespan = result.makespan();
        if (makespan <= 0) return MIN_PLOT_WIDTH;
        double shortest = Double.POSITIVE_INFINITY;
        int longestLabel = 0;
        for (TimedAction e : result.events()) {
            String text = boxLabel(e.action(), stagePrefix);
            if (e.action().kind().isComm() || text.isEmpty() || e.duration() <= 0) continue;
            shortest = Math.min(shortest, e.duration());
            longestLabel = Math.max(longestLabel, text.length());
        }
        if (shortest == Double.POSITIVE_INFINITY) return MIN_PLOT_WIDTH;
        double needed = makespan / shortest * (CHAR_PX * longestLabel + LABEL_MARGIN_PX + 0.5);
        return (int) Math.ceil(Math.max(MIN_PLOT_WIDTH, Math.min(MAX_PLOT_WIDTH, needed)));
    }

    /**
     * 1 where every action fits in {@link #MAX_BOXES}; else the least k for which every k-th rank's compute actions
     * (and the last rank's) do, counted from the timeline itself.
     */
    static int rankStride(SimResult result) {
        if (result.events().size() <= MAX_BOXES) return 1;
        int ranks = result.schedule().ranks();
        long[] perRank = new long[ranks];
        for (TimedAction e : result.events()) if (!e.action().kind().isComm()) perRank[e.rank()]++;
        for (int k = 1; k < ranks; k++) {
            long boxes = 0;
            for (int r = 0; r < ranks; r++) if (r % k == 0 || r == ranks - 1) boxes += perRank[r];
            if (boxes <= MAX_BOXES) return k;
        }
        return ranks;
    }

    /** 2nd, 3rd, 4th, 11th, 21st. */
    private static String ordinal(int n) {
        int tens = n % 100, ones = n % 10;
        String suffix = tens >= 11 && tens <= 13 ? "th" : ones == 1 ? "st" : ones == 2 ? "nd" : ones == 3 ? "rd" : "th";
        return n + suffix;
    }

    /** The text inside an action's box: its microbatch, after its stage where ranks hold several ({@code 3:12}). */
    private static String boxLabel(Action a, boolean stagePrefix) {
        return a.hasMicrobatch() ? (stagePrefix ? a.stage() + ":" : "") + a.microbatch() : "";
    }

    static String color(ActionKind kind) {
        return switch (kind) {
            case F -> "#4e79a7";
            case B -> "#59a14f";
            case I -> "#5fb8a8";
            case W -> "#9c6fb6";
            case REDUCE_GRAD -> "#f28e2b";
            case OPTIMIZER_STEP -> "#e15759";
            default -> "#8c8c8c";
        };
    }

    private static double tickStep(double span) {
        if (span <= 0) return 0;
        double raw = span / 10;
        double magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
        for (double m : new double[]{1, 2, 5, 10}) {
            if (raw <= m * magnitude) return m * magnitude;
        }
        return 10 * magnitude;
    }

    private static String fmt(double v) {
        return String.format(Locale.ROOT, "%.2f", v);
    }

    private static String escape(String s) {
        StringBuilder out = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '<' -> out.append("&lt;");
                case '>' -> out.append("&gt;");
                case '&' -> out.append("&amp;");
                case '"' -> out.append("&quot;");
                default -> out.append(c);
            }
        }
        return out.toString();
    }
}

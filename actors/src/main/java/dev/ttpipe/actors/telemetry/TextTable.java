package dev.ttpipe.actors.telemetry;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Aligned plain-text tables and the compact numbers in them, as the CLI prints them ({@code simulate},
 * {@code tune}): columns two spaces apart, numeric cells right-aligned, trailing blanks dropped.
 */
public final class TextTable {
    private TextTable() {
    }

    /**
     * The header and rows, one line each. A cell is right-aligned when it starts with a digit and sits in
     * neither the first nor the last column; every other cell is left-aligned.
     */
    public static String render(String[] header, List<String[]> rows) {
        int[] width = new int[header.length];
        for (int c = 0; c < header.length; c++) width[c] = header[c].length();
        for (String[] row : rows) for (int c = 0; c < row.length; c++) width[c] = Math.max(width[c], row[c].length());
        StringBuilder text = new StringBuilder();
        List<String[]> all = new ArrayList<>();
        all.add(header);
        all.addAll(rows);
        for (String[] row : all) {
            StringBuilder line = new StringBuilder();
            for (int c = 0; c < row.length; c++) {
                if (c > 0) line.append("  ");
                boolean numeric = c > 0 && row != header && !row[c].isEmpty() && Character.isDigit(row[c].charAt(0))
                        && c < row.length - 1;
                String cell = row[c];
                String pad = " ".repeat(width[c] - cell.length());
                line.append(numeric ? pad + cell : cell + pad);
            }
            text.append(line.toString().stripTrailing()).append('\n');
        }
        return text.toString();
    }

    /** {@code v} as an integer when it is one, else with at most four decimals and no trailing zeros. */
    public static String num(double v) {
        if (v == Math.rint(v) && Math.abs(v) < 1e12) return Long.toString((long) v);
        String s = String.format(Locale.ROOT, "%.4f", v);
        s = s.replaceAll("0+$", "");
        return s.endsWith(".") ? s.substring(0, s.length() - 1) : s;
    }
}

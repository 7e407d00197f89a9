package dev.ttpipe.schedules;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.Reader;
import java.io.StringReader;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;

/**
 * Schedules as CSV, in the notation of torch.distributed.pipelining's schedule CSVs: line r is
 * rank r's row, each cell one action in text form ({@code 0F0}, {@code 1SEND_B3}). Both torch
 * formats read: compute only, and with communication actions. Empty cells (torch writes them for
 * idle steps) are skipped; blank lines after the last row are ignored.
 *
 * <p>{@code read(write(s))} equals {@code s} for every schedule.
 */
public final class ScheduleCsv {
    private ScheduleCsv() {
    }

    /** Reads a schedule; {@code sourceName} (a file name) names it and prefixes every error. */
    public static Schedule read(String text, String sourceName) {
        return read(new StringReader(text), sourceName, 0);
    }

    /** Reads a schedule; {@code sourceName} (a file name) names it and prefixes every error. */
    public static Schedule read(Reader in, String sourceName) {
        return read(in, sourceName, 0);
    }

    /**
     * Reads a schedule that must have {@code ranks} rows ({@code ranks <= 0}: any number).
     *
     * @throws ScheduleException naming source, line and column on a syntax error, or the source
     *                           and the problem when the rows do not form a schedule
     */
    public static Schedule read(Reader in, String sourceName, int ranks) {
        List<List<Action>> rows = new ArrayList<>();
        int blankRun = 0;
        try (BufferedReader lines = new BufferedReader(in)) {
            String line;
            int lineNo = 0;
            while ((line = lines.readLine()) != null) {
                lineNo++;
                if (lineNo == 1 && !line.isEmpty() && line.charAt(0) == '\uFEFF') line = line.substring(1);
                if (line.isBlank()) {
                    blankRun++;
                    continue;
                }
                for (; blankRun > 0; blankRun--) rows.add(List.of());
                rows.add(parseRow(line, lineNo, sourceName));
            }
        } catch (IOException e) {
            throw new UncheckedIOException("reading schedule " + sourceName, e);
        }
        if (rows.isEmpty()) throw new ScheduleException(sourceName + ": no schedule rows; expected one line of actions per rank");
        if (ranks > 0 && rows.size() != ranks) {
            throw new ScheduleException(sourceName + ": " + rows.size() + " rows (one per rank), expected " + ranks + " ranks");
        }
        return Schedule.of(sourceName, rows);
    }

    /** The schedule as CSV: one line per rank, actions separated by commas, "\n" line ends. */
    public static String write(Schedule schedule) {
        StringBuilder out = new StringBuilder(schedule.size() * 6);
        for (List<Action> row : schedule.rows()) {
            for (int i = 0; i < row.size(); i++) {
                if (i > 0) out.append(',');
                out.append(row.get(i));
            }
            out.append('\n');
        }
        return out.toString();
    }

    private static List<Action> parseRow(String line, int lineNo, String source) {
        List<Action> row = new ArrayList<>();
        int start = 0;
        while (start <= line.length()) {
            int end = line.indexOf(',', start);
            if (end < 0) end = line.length();
            String cell = line.substring(start, end).strip();
            if (cell.length() >= 2 && cell.charAt(0) == '"' && cell.charAt(cell.length() - 1) == '"') {
                cell = cell.substring(1, cell.length() - 1).strip();
            }
            if (!cell.isEmpty()) {
                try {
                    row.add(Action.parse(cell));
                } catch (ScheduleException e) {
                    int column = start + 1;
                    while (column <= line.length() && Character.isWhitespace(line.charAt(column - 1))) column++;
                    throw new ScheduleException(source + ":" + lineNo + ":" + column + ": " + e.getMessage());
                }
            }
            start = end + 1;
        }
        return row;
    }
}

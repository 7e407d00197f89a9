package dev.ttpipe.actors.telemetry;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * Prose fitted to a width, as the CLI prints summaries and help: lines break at spaces only (never
 * inside a word, a path or a number, nor between a number and its unit: {@code 27.3 KiB}), and the lines
 * after the first hang {@code indent} columns further in than the first line's own leading spaces. A word
 * longer than the width stands alone on its line. Each line of a multi-line text is wrapped on its own;
 * spacing inside a line that needs no break is kept.
 */
public final class TextWrap {
    /** Units that stay on the line of the number before them. */
    private static final Set<String> UNITS = Set.of("B", "KiB", "MiB", "GiB", "TiB", "kB", "KB", "MB", "GB", "TB", "ns", "us",
            "ms", "s", "min", "h", "ms/MiB", "us/MiB", "MB/s", "GB/s", "Gb/s", "tok/s", "tokens/s", "GFLOPS", "TFLOPS", "px", "%");

    private TextWrap() {
    }

    /** {@code text} wrapped to {@code width} columns, lines joined with {@code '\n'} (no newline at the end). */
    public static String wrap(String text, int width, int indent) {
        return String.join("\n", lines(text, width, indent));
    }

    /** The lines of {@code text} wrapped to {@code width} columns (see the class comment). */
    public static List<String> lines(String text, int width, int indent) {
        List<String> out = new ArrayList<>();
        for (String line : text.split("\n", -1)) wrapLine(line.stripTrailing(), width, indent, false, out);
        return out;
    }

    /**
     * A line that holds a shell command (after a label such as {@code resume with: }), wrapped so that it still
     * pastes into a shell: every line but the last ends with {@code " \"}, and no break falls inside a quoted
     * argument or between a flag and its value. Leading spaces stay, as in {@link #wrap}.
     */
    public static String wrapCommand(String command, int width, int indent) {
        String line = command.stripTrailing();
        if (line.length() <= width) return line;
        // a flag and its value stay on one line: the space between them is held by a no-break space while wrapping
        String held = line.replaceAll("((?:^| )--?[A-Za-z][\\w-]*) (?=[^- ])", "$1\u00a0");
        List<String> out = new ArrayList<>();
        wrapLine(held, width - 2, indent, true, out);
        return String.join(" \\\n", out).replace('\u00a0', ' ');
    }

    /** Whether the space at {@code i} sits between a number and its unit ({@code 4.0 KiB;}). */
    private static boolean unitFollows(String line, int i) {
        if (i == 0 || !Character.isDigit(line.charAt(i - 1))) return false;
        int end = i + 1;
        while (end < line.length() && line.charAt(end) != ' ') end++;
        String next = line.substring(i + 1, end).replaceAll("[,;:.)]+$", "");
        return UNITS.contains(next);
    }

    private static void wrapLine(String line, int width, int indent, boolean shell, List<String> out) {
        if (line.length() <= width) {
            out.add(line);
            return;
        }
        int lead = 0;
        while (lead < line.length() && line.charAt(lead) == ' ') lead++;
        // a deep indent on a narrow width would leave no room: hang at most half the width in
        String hanging = " ".repeat(Math.min(lead + indent, width / 2));
        StringBuilder current = new StringBuilder(line.substring(0, lead));
        boolean empty = true;
        int i = lead;
        while (i < line.length()) {
            int wordStart = i;
            while (wordStart < line.length() && line.charAt(wordStart) == ' ') wordStart++;
            int wordEnd = wordStart;
            char quote = 0;
            for (; wordEnd < line.length() && (quote != 0 || line.charAt(wordEnd) != ' ' || unitFollows(line, wordEnd)); wordEnd++) {
                char c = line.charAt(wordEnd);
                if (shell && (c == '\'' || c == '"')) quote = quote == 0 ? c : quote == c ? 0 : quote;
            }
            if (wordStart == wordEnd) break;
            if (empty) {
                current.append(line, wordStart, wordEnd);
                empty = false;
            } else if (current.length() + (wordEnd - i) <= width) {
                current.append(line, i, wordEnd);
            } else {
                out.add(current.toString());
                current.setLength(0);
                current.append(hanging).append(line, wordStart, wordEnd);
            }
            i = wordEnd;
        }
        out.add(current.toString());
    }
}

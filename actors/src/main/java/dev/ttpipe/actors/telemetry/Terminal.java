package dev.ttpipe.actors.telemetry;

import java.io.Console;
import java.io.PrintStream;

/**
 * Where a person reads what the CLI prints: whether standard output is a terminal, and how many columns
 * a line may take. {@code TTPIPE_COLUMNS} says so outright, terminal or not ({@code ttpipe launch} sets it
 * for its workers: its own width less the {@code [rank N] } in front of their lines); else a terminal's width
 * is {@code COLUMNS} when the shell exports it, else 80; a file or a pipe (a log) gets 80, so logs read well
 * in any viewer. Nothing here runs {@code stty} or opens the tty.
 */
public final class Terminal {
    /** The environment variable that sets the width outright. */
    public static final String COLUMNS_ENV = "TTPIPE_COLUMNS";
    /** The width of a log, and of a terminal that does not say. */
    public static final int DEFAULT_COLUMNS = 80;
    /** The narrowest width anything is laid out for. */
    static final int MIN_COLUMNS = 40;

    private Terminal() {
    }

    /**
     * Whether standard input and output are an interactive terminal (not a file, a pipe, or a dumb terminal).
     * From JDK 22 {@link System#console()} is there when they are redirected too; its {@code isTerminal()} says.
     */
    public static boolean isTerminal() {
        Console console = System.console();
        if (console == null || "dumb".equals(System.getenv("TERM"))) return false;
        try {
            return (Boolean) Console.class.getMethod("isTerminal").invoke(console);
        } catch (ReflectiveOperationException before22) {
            return true;                         // JDK 17 to 21: a console is a terminal
        }
    }

    /** The columns a line of standard output may take: see the class comment. */
    public static int columns() {
        String set = System.getenv(COLUMNS_ENV);
        if (set != null) return columns(set);
        return isTerminal() ? columns(System.getenv("COLUMNS")) : DEFAULT_COLUMNS;
    }

    /**
     * Prints {@code text} and a newline, each of its lines wrapped at spaces to {@link #columns()} with the lines
     * after the first indented by two: a summary line a person reads, in a terminal or a log.
     */
    public static void printWrapped(PrintStream out, String text) {
        out.println(TextWrap.wrap(text, columns(), 2));
    }

    /** {@code COLUMNS}'s (or {@code TTPIPE_COLUMNS}'s) value as a width: at least {@link #MIN_COLUMNS}, 80 when absent or not a number. */
    static int columns(String value) {
        if (value == null) return DEFAULT_COLUMNS;
        try {
            return Math.max(MIN_COLUMNS, Integer.parseInt(value.trim()));
        } catch (NumberFormatException e) {
            return DEFAULT_COLUMNS;
        }
    }
}

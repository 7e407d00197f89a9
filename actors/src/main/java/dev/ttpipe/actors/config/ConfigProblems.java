package dev.ttpipe.actors.config;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Collects problems while a config is read and checked, so that all of them are reported at once.
 * Knows where each key came from: a line of the YAML file, or a command-line flag that overrode it.
 */
public final class ConfigProblems {
    private final String file;
    private final Map<String, Integer> lines = new HashMap<>();
    private final Map<String, String> flags = new HashMap<>();
    private final List<String> problems = new ArrayList<>();
    private final List<String> notes = new ArrayList<>();
    private final Set<String> known = new TreeSet<>();
    private final Map<String, Looked> looked = new HashMap<>();

    public ConfigProblems(String file) {
        this.file = file;
    }

    public String file() {
        return file;
    }

    void recordLine(String keyPath, int line) {
        if (line > 0) lines.put(keyPath, line);                // a section --set added is on no line
    }

    /** A key some section read (asked for, given or not), list indices written {@code []}. */
    void recordKnown(String keyPath) {
        known.add(keyPath.replaceAll("\\[\\d+]", "[]"));
    }

    /** Every key path the sections read so far (see {@link ConfigLoader#acceptedKeys()}). */
    Set<String> known() {
        return Collections.unmodifiableSet(known);
    }

    /** Marks a key as set by a command-line flag: later problems with it name the flag. */
    public void recordFlag(String keyPath, String flag) {
        flags.put(keyPath, flag);
        looked.remove(keyPath);
    }

    /** The relative path {@code given} under {@code keyPath} is in none of {@code places} (the working directory, the config's folder). */
    void recordLooked(String keyPath, String given, List<Path> places) {
        looked.put(keyPath, new Looked(given, List.copyOf(places)));
    }

    private record Looked(String given, List<Path> places) {
    }

    /**
     * The error for a relative path in the file that was found nowhere, naming every place looked:
     * {@code file:line: key: 'given' given, expected WHAT; looked for A (from the working directory), then B (beside
     * the config)}; null when the path was found, absolute or given by a flag.
     */
    public String notFound(String keyPath, String expected) {
        Looked l = looked.get(keyPath);
        if (l == null) return null;
        StringBuilder sb = new StringBuilder(where(keyPath)).append(": ").append(show(l.given())).append(" given, expected ")
                .append(expected).append("; looked for ");
        String[] what = {" (from the working directory)", " (beside the config)"};
        for (int i = 0; i < l.places().size(); i++) {
            sb.append(i == 0 ? "" : ", then ").append(l.places().get(i)).append(i < what.length ? what[i] : "");
        }
        return oneLine(sb.toString());
    }

    /** The keys set by command-line flags: key path -> flag. */
    public Map<String, String> flags() {
        return new TreeMap<>(flags);
    }

    /** Whether the YAML or a flag gave this key (not a default). */
    public boolean given(String keyPath) {
        return lines.containsKey(keyPath) || flags.containsKey(keyPath);
    }

    /**
     * Where a key's value came from, for {@code --print-config}: the flag that set it ({@code --max-steps}, {@code --set}),
     * {@code file:line}, or null (a default, or derived from other keys).
     */
    public String origin(String keyPath) {
        String flag = flags.get(keyPath);
        if (flag != null) return flag;
        Integer line = lines.get(keyPath);
        return line == null ? null : file + ":" + line;
    }

    /** Where a key came from, as a message prefix: {@code file:line: key.path} or {@code --flag (key.path)}. */
    public String where(String keyPath) {
        String flag = flags.get(keyPath);
        if (Overrides.FLAG.equals(flag)) return flag + " " + keyPath;
        if (flag != null) return flag + " (" + keyPath + ")";
        Integer line = lineOf(keyPath);
        return file + (line == null ? "" : ":" + line) + ": " + keyPath;
    }

    private Integer lineOf(String keyPath) {
        for (String k = keyPath; ; ) {
            Integer line = lines.get(k);
            if (line != null) return line;
            int dot = k.lastIndexOf('.');
            if (dot < 0) return null;
            k = k.substring(0, dot);
        }
    }

    /** Adds {@code where(keyPath): message}. */
    public void add(String keyPath, String message) {
        problems.add(oneLine(where(keyPath) + ": " + message));
    }

    /** Adds {@code where(keyPath): value given, expected ...}. */
    public void add(String keyPath, Object given, String expected) {
        problems.add(oneLine(where(keyPath) + ": " + show(given) + " given, expected " + expected));
    }

    /** Something the user should know that is not a problem ({@code socket_type: mpi} read as aeron). */
    public void note(String keyPath, String message) {
        String n = oneLine(where(keyPath) + ": " + message);
        if (!notes.contains(n)) notes.add(n);
    }

    public List<String> notes() {
        return notes;
    }

    void addRaw(String line) {
        problems.add(oneLine(line));
    }

    /**
     * {@code text} with its control characters written as escapes ({@code \n}, {@code \t}, {@code \u0000}):
     * a value given in the file may hold a line break (a quoted {@code "1\n2"}), and a problem is one line.
     */
    static String oneLine(String text) {
        StringBuilder out = null;
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (!Character.isISOControl(c) && c != '\u2028' && c != '\u2029') {
                if (out != null) out.append(c);
                continue;
            }
            if (out == null) out = new StringBuilder(text.length() + 8).append(text, 0, i);
            switch (c) {
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> out.append(String.format("\\u%04x", (int) c));
            }
        }
        return out == null ? text : out.toString();
    }

    public boolean isEmpty() {
        return problems.isEmpty();
    }

    public List<String> problems() {
        return problems;
    }

    public void throwIfAny() {
        if (!problems.isEmpty()) throw new ConfigException(problems);
    }

    static String show(Object value) {
        if (value instanceof String) return "'" + value + "'";
        return String.valueOf(value);
    }
}

package dev.ttpipe.actors.config;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

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

    public ConfigProblems(String file) {
        this.file = file;
    }

    public String file() {
        return file;
    }

    void recordLine(String keyPath, int line) {
        lines.put(keyPath, line);
    }

    /** Marks a key as set by a command-line flag: later problems with it name the flag. */
    public void recordFlag(String keyPath, String flag) {
        flags.put(keyPath, flag);
    }

    /** The keys set by command-line flags: key path -> flag. */
    public java.util.Map<String, String> flags() {
        return new java.util.TreeMap<>(flags);
    }

    /** Whether the YAML or a flag gave this key (not a default). */
    public boolean given(String keyPath) {
        return lines.containsKey(keyPath) || flags.containsKey(keyPath);
    }

    /** Where a key came from, as a message prefix: {@code file:line: key.path} or {@code --flag (key.path)}. */
    public String where(String keyPath) {
        String flag = flags.get(keyPath);
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
        problems.add(where(keyPath) + ": " + message);
    }

    /** Adds {@code where(keyPath): value given, expected ...}. */
    public void add(String keyPath, Object given, String expected) {
        problems.add(where(keyPath) + ": " + show(given) + " given, expected " + expected);
    }

    /** Something the user should know that is not a problem ({@code socket_type: mpi} read as aeron). */
    public void note(String keyPath, String message) {
        String n = where(keyPath) + ": " + message;
        if (!notes.contains(n)) notes.add(n);
    }

    public List<String> notes() {
        return notes;
    }

    void addRaw(String line) {
        problems.add(line);
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

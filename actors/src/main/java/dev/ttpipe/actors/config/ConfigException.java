package dev.ttpipe.actors.config;

import java.util.List;

/**
 * A config (or flag) the user must fix. Carries every problem found, one line each, in the form
 * {@code file:line: key.path: value given, what was expected}. Maps to exit code 2.
 */
public final class ConfigException extends RuntimeException {
    private final List<String> problems;

    public ConfigException(List<String> problems) {
        super(String.join(System.lineSeparator(), problems));
        this.problems = List.copyOf(problems);
    }

    public ConfigException(String problem) {
        this(List.of(problem));
    }

    public List<String> problems() {
        return problems;
    }
}

package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.ConfigLoader;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The docs say what the code does: every config key that docs/configuration.md lists is one the loader
 * accepts, and every {@code ttpipe} command line in README.md and docs/ (in code blocks and in backticks) is
 * one the CLI parses: the command exists and takes every option written. (A parse, not a run: {@link DocsExamplesTest},
 * behind {@code -Pdocs-examples}, runs them.)
 */
class DocsTest {
    static final Path ROOT = Path.of("..").toAbsolutePath().normalize();
    /** A backticked name at the start of a table row's first cell, or after ", " in it. */
    static final Pattern KEY = Pattern.compile("`([a-z_][a-z0-9_.\\[\\]]*)`");
    static final Pattern COMMAND = Pattern.compile("(?:\\./)?ttpipe ((?:[a-z]+)(?: [^`|#\\n]*)?)");
    static final Set<String> SECTIONS = Set.of("training_config", "transformer_config", "device_config", "multihost_config",
            "rank_bindings", "eval_config", "telemetry");

    @Test
    void everyKeyInTheConfigurationReferenceIsOneTheLoaderKnows() throws IOException {
        Set<String> known = ConfigLoader.acceptedKeys();
        List<String> unknown = new ArrayList<>();
        String section = null;
        int rows = 0;
        for (String line : Files.readAllLines(ROOT.resolve("docs/configuration.md"))) {
            if (line.startsWith("## ") || line.startsWith("### ")) {
                String first = line.replaceFirst("^#+ ", "").split("[ (]")[0];
                if (line.startsWith("## ")) section = SECTIONS.contains(first) ? first : null;
                else if (section != null) section = section.replaceFirst("\\..*", "") + "." + first;
                continue;
            }
            if (!line.startsWith("| `") || line.contains("...")) continue;
            String cell = line.substring(1, line.indexOf('|', 1));
            Matcher m = KEY.matcher(cell);
            while (m.find()) {
                String key = m.group(1);
                String full = key.contains(".") && SECTIONS.contains(key.split("\\.")[0]) || section == null ? key
                        : (section.equals("rank_bindings") ? "rank_bindings[]." + key : section + "." + key);
                rows++;
                if (!known.contains(full) && !known.contains(key)) unknown.add(full);
            }
        }
        assertTrue(rows > 100, "read " + rows + " keys from docs/configuration.md");
        assertTrue(unknown.isEmpty(), "docs/configuration.md names keys the loader does not accept: " + unknown);
    }

    /** README.md, then every page of docs/ (not the measurement pages) in name order. */
    static List<Path> pages() throws IOException {
        List<Path> pages = new ArrayList<>(List.of(ROOT.resolve("README.md")));
        try (Stream<Path> s = Files.list(ROOT.resolve("docs"))) {
            s.filter(p -> p.toString().endsWith(".md")).sorted().forEach(pages::add);
        }
        return pages;
    }

    @Test
    void everyCommandLineInTheDocsParses() throws IOException {
        List<String> bad = new ArrayList<>();
        int parsed = 0;
        for (Path page : pages()) {
            boolean code = false;
            for (String line : Files.readAllLines(page)) {
                if (line.startsWith("```")) {
                    code = !code;
                    continue;
                }
                List<String> commands = new ArrayList<>();
                if (code) {
                    String l = line.strip();
                    boolean output = l.matches("^(\\./)?ttpipe [a-z]+:.*");      // what ttpipe prints ("ttpipe watchdog: ...")
                    if (!output && (l.startsWith("./ttpipe ") || l.startsWith("ttpipe "))) commands.add(l.replaceFirst("^(\\./)?ttpipe ", ""));
                } else {
                    Matcher m = Pattern.compile("`(?:\\./)?ttpipe ([^`]+)`").matcher(line);
                    while (m.find()) commands.add(m.group(1));
                }
                for (String c : commands) {
                    String problem = parse(c, code);
                    parsed++;
                    if (problem != null) bad.add(ROOT.relativize(page) + ": ttpipe " + c + "  ->  " + problem);
                }
            }
        }
        assertTrue(parsed > 30, "found " + parsed + " command lines");
        assertTrue(bad.isEmpty(), bad.size() + " command lines do not parse:\n" + String.join("\n", bad));
    }

    /**
     * Null when {@code line} parses as a ttpipe command line, else why not. A synopsis (a placeholder in capitals
     * such as CONFIG, alternatives, optional parts) is not a command line; a mention in running text (not in a
     * code block) may leave out required parts, but what it writes must exist.
     */
    static String parse(String line, boolean codeBlock) {
        String l = line.replaceAll("\\s+#.*$", "").replaceAll("\\s*\\\\$", "").strip();
        if (l.contains("...") || l.contains("|") || l.contains("[")) return null;
        if (Pattern.compile("(^|[ =])[A-Z][A-Z0-9_]*($|[ ,])").matcher(l).find()) return null;
        List<String> args = parseArgs(l);
        if (args.isEmpty() || args.stream().anyMatch(a -> a.equals(">") || a.equals("&&") || a.equals(";"))) {
            return args.isEmpty() ? "empty" : null;
        }
        StringWriter err = new StringWriter();
        CommandLine cl = Main.newCommandLine(new PrintWriter(new StringWriter()), new PrintWriter(err));
        try {
            cl.parseArgs(args.toArray(new String[0]));
            return null;
        } catch (CommandLine.MissingParameterException e) {
            return codeBlock ? e.getMessage() : null;
        } catch (CommandLine.ParameterException e) {
            return e.getMessage();
        }
    }

    /** A command line's words after {@code ttpipe}, as a shell splits them (quotes kept together, then dropped). */
    static List<String> parseArgs(String line) {
        String l = line.strip().replaceFirst("^(\\./)?ttpipe ", "");
        List<String> args = new ArrayList<>();
        Matcher m = Pattern.compile("\"([^\"]*)\"|'([^']*)'|(\\S+)").matcher(l);
        while (m.find()) args.add(m.group(1) != null ? m.group(1) : m.group(2) != null ? m.group(2) : m.group(3));
        return args;
    }
}

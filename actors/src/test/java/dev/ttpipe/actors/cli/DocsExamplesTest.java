package dev.ttpipe.actors.cli;

import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Runs every command example in README.md and docs/ (each complete {@code ttpipe} line of a code block) the
 * way a user would: as its own process, page by page in order in a scratch directory that holds
 * {@code configs/} (so a page's later examples find what its earlier ones wrote, such as {@code runs/a}). An
 * example passes when it exits 0, or is still working after {@code ttpipe.docs.timeout} seconds (default 30;
 * it is then stopped: training examples run for minutes); it fails when it exits otherwise, with its last
 * lines. An example that needs what the scratch directory cannot give (hardware, a running job, a run of
 * the reader's own) says so in its comment, {@code # ... (needs ...)}, and is listed, not run. docs/walkthrough.md
 * is one shell session (here-docs, a background job, a signal): {@link WalkthroughTest} runs it, in the default run.
 *
 * <p>Tagged {@code docs-examples}: {@code mvn -B test -pl actors -am -Pdocs-examples} (about 6 minutes on 2
 * cores). {@link DocsTest} parses the same lines in the default run.
 */
@Tag("docs-examples")
class DocsExamplesTest {
    static final Pattern NEEDS = Pattern.compile("#.*\\(needs ([^)]*)\\)");

    record Example(Path page, String line) {
    }

    static List<Example> examples() throws IOException {
        List<Example> out = new ArrayList<>();
        for (Path page : DocsTest.pages()) {
            if (page.equals(WalkthroughTest.PAGE)) continue;      // a shell session of its own: WalkthroughTest runs it
            boolean code = false;
            for (String line : Files.readAllLines(page)) {
                if (line.startsWith("```")) {
                    code = !code;
                    continue;
                }
                String l = line.strip();
                if (!code || !l.matches("^(\\./)?ttpipe [a-z]+( .*)?$") || l.matches("^(\\./)?ttpipe [a-z]+:.*")) continue;
                String command = l.replaceAll("\\s+#.*$", "");
                // A synopsis (CONFIG, [--flag], a | b, ...) is not an example.
                if (command.contains("...") || command.contains("|") || command.contains("[")
                        || Pattern.compile("(^|[ =])[A-Z][A-Z0-9_]*($|[ ,])").matcher(command).find()) {
                    continue;
                }
                out.add(new Example(page, l));
            }
        }
        return out;
    }

    @Test
    void everyCommandExampleInTheDocsRuns(@TempDir Path scratch) throws Exception {
        int timeout = Integer.getInteger("ttpipe.docs.timeout", 30);
        List<String> report = new ArrayList<>();
        List<String> failed = new ArrayList<>();
        int ran = 0;
        Path page = null;
        Path dir = null;
        for (Example e : examples()) {
            String where = DocsTest.ROOT.relativize(e.page()).toString();
            Matcher needs = NEEDS.matcher(e.line());
            if (needs.find()) {
                report.add(String.format(Locale.ROOT, "%-22s not run (needs %s): %s", where, needs.group(1), e.line()));
                continue;
            }
            if (!e.page().equals(page)) {
                page = e.page();
                dir = scratchFor(scratch, where);
            }
            String outcome = run(dir, DocsTest.parseArgs(e.line().replaceAll("\\s+#.*$", "")), timeout);
            ran++;
            report.add(String.format(Locale.ROOT, "%-22s %s: %s", where, outcome.lines().findFirst().orElse(""), e.line()));
            if (outcome.startsWith("exit ") && !outcome.startsWith("exit 0")) failed.add(where + ": " + e.line() + "\n" + outcome);
        }
        report.forEach(System.out::println);
        assertTrue(ran > 30, "ran " + ran + " examples");
        assertTrue(failed.isEmpty(), failed.size() + " examples failed:\n" + String.join("\n\n", failed));
    }

    /** A page's scratch directory: {@code configs/} of the checkout, and {@code ../shared} when it is there. */
    private static Path scratchFor(Path scratch, String page) throws IOException {
        Path base = scratch.resolve(page.replace('/', '-'));
        Path dir = Files.createDirectories(base.resolve("ttpipe"));
        Files.createSymbolicLink(dir.resolve("configs"), DocsTest.ROOT.resolve("configs"));
        Path shared = DocsTest.ROOT.resolveSibling("shared");
        if (Files.isDirectory(shared)) Files.createSymbolicLink(base.resolve("shared"), shared);
        return dir;
    }

    /** "exit N in S s" (with the last lines when N is not 0), or "still running after T s, stopped". */
    private static String run(Path dir, List<String> args, int timeoutSeconds) throws Exception {
        List<String> cmd = TtpipeProcesses.command(args);
        Path log = Files.createTempFile(dir, "example", ".log");
        long start = System.nanoTime();
        Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
            p.descendants().forEach(ProcessHandle::destroy);
            p.destroy();
            if (!p.waitFor(20, TimeUnit.SECONDS)) p.destroyForcibly();
            return "still running after " + timeoutSeconds + " s, stopped";
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        String head = String.format(Locale.ROOT, "exit %d in %.1f s", p.exitValue(), seconds);
        if (p.exitValue() == 0) return head;
        List<String> lines = Files.readAllLines(log);
        return head + "\n  " + String.join("\n  ", lines.subList(Math.max(0, lines.size() - 8), lines.size()));
    }
}

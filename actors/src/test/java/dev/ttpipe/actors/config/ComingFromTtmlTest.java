package dev.ttpipe.actors.config;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * docs/coming-from-ttml.md lists the keys the config reader knows, and says true things about them: every key the
 * reader accepts ({@link ConfigLoader#acceptedKeys()}, taken from the reader as it reads) has a row; a row the page
 * marks <b>not read</b> is a key the reader does not accept, and every other row's key is one it does; every key the
 * page marks <b>refused</b> (and every key {@link EveryConfigKeyIsImplementedOrRefusedTest} refuses a value of) has
 * a row in the page's table of refusals; and each of those, loaded as the page gives it, is refused with the message
 * the page shows, on one line.
 */
class ComingFromTtmlTest {
    static final Path PAGE = Path.of("..").toAbsolutePath().normalize().resolve("docs/coming-from-ttml.md");
    /** A backticked key in a row's first cell. */
    static final Pattern KEY = Pattern.compile("`([a-z_][a-z0-9_.\\[\\]]*)`");

    @TempDir
    static Path dir;

    static List<KeyRow> keyRows;
    static List<Refusal> refusals;

    /** A row of the key tables: its keys (first cell) and what ttpipe does (last cell). */
    record KeyRow(List<String> keys, String ttpipe) {
        boolean notRead() {
            return ttpipe.startsWith("**not read**");
        }

        boolean refused() {
            return ttpipe.contains("**refused**");
        }
    }

    /** A row of the table of refusals: the key, the config given (one line of YAML), the message. */
    record Refusal(String key, String given, String message) {
    }

    @BeforeAll
    static void readThePage() throws IOException {
        String page = Files.readString(PAGE);
        int keys = page.indexOf("\n## Every key"), refused = page.indexOf("\n## Refusals and their messages"),
                after = page.indexOf("\n## ", refused + 1);
        assertTrue(keys >= 0 && refused > keys && after > refused, "the page's sections 'Every key' and 'Refusals and their messages'");
        keyRows = new ArrayList<>();
        for (List<String> cells : rows(page.substring(keys, refused))) {
            List<String> ks = new ArrayList<>();
            Matcher m = KEY.matcher(cells.get(0));
            while (m.find()) ks.add(m.group(1));
            keyRows.add(new KeyRow(ks, cells.get(cells.size() - 1)));
        }
        refusals = new ArrayList<>();
        for (List<String> cells : rows(page.substring(refused, after))) {
            assertEquals(3, cells.size(), "a refusal row is key | given | message: " + cells);
            refusals.add(new Refusal(unquoted(cells.get(0)), unquoted(cells.get(1)), unquoted(cells.get(2))));
        }
        assertTrue(keyRows.size() > 60 && refusals.size() > 20, keyRows.size() + " key rows, " + refusals.size() + " refusals");
    }

    /** The cells of every table row whose first cell starts with a backticked name. */
    static List<List<String>> rows(String text) {
        List<List<String>> out = new ArrayList<>();
        for (String line : text.split("\n")) {
            if (!line.startsWith("| `")) continue;
            List<String> cells = new ArrayList<>();
            for (String c : line.substring(1, line.lastIndexOf('|')).split(" \\| ")) cells.add(c.strip());
            out.add(cells);
        }
        return out;
    }

    static String unquoted(String cell) {
        assertTrue(cell.length() > 2 && cell.startsWith("`") && cell.endsWith("`"), "expected one `...` in the cell: " + cell);
        return cell.substring(1, cell.length() - 1);
    }

    static boolean isSection(String key, Set<String> keys) {
        return EveryConfigKeyIsImplementedOrRefusedTest.isSection(key, keys);
    }

    @Test
    void everyKeyTheReaderAcceptsHasARowAndEveryRowSaysWhetherTheReaderAcceptsIt() {
        SortedSet<String> accepted = ConfigLoader.acceptedKeys();
        Set<String> listed = new TreeSet<>();
        List<String> wrong = new ArrayList<>();
        for (KeyRow row : keyRows) {
            assertFalse(row.keys().isEmpty(), "a row without a key: " + row);
            for (String k : row.keys()) {
                listed.add(k);
                if (row.notRead() && accepted.contains(k)) wrong.add(k + ": the page says not read, the reader accepts it");
                if (!row.notRead() && !accepted.contains(k)) wrong.add(k + ": the page says it is read, the reader does not know it");
            }
        }
        List<String> missing = accepted.stream().filter(k -> !isSection(k, accepted) && !listed.contains(k)).toList();
        assertEquals(List.of(), missing, "keys the reader accepts that " + PAGE.getFileName() + " does not list");
        assertEquals(List.of(), wrong);
    }

    @Test
    void everyRefusedOrUnknownKeyHasARefusalRowAndEveryRefusalRowAKey() {
        Set<String> withRefusal = new TreeSet<>();
        refusals.forEach(r -> withRefusal.add(r.key()));
        Set<String> listed = new TreeSet<>();
        List<String> wrong = new ArrayList<>();
        for (KeyRow row : keyRows) {
            listed.addAll(row.keys());
            if ((row.refused() || row.notRead()) && row.keys().stream().noneMatch(withRefusal::contains)) {
                wrong.add(row.keys() + ": marked refused or not read, with no row in the table of refusals");
            }
            if (!row.refused() && !row.notRead() && row.keys().stream().anyMatch(withRefusal::contains)) {
                wrong.add(row.keys() + ": in the table of refusals, but its row does not say refused");
            }
        }
        for (String k : withRefusal) if (!listed.contains(k)) wrong.add(k + ": a refusal row for a key the key tables do not list");
        for (EveryConfigKeyIsImplementedOrRefusedTest.Row r : EveryConfigKeyIsImplementedOrRefusedTest.ROWS) {
            if (r.refusal() != null && !withRefusal.contains(r.key())) wrong.add(r.key() + ": the reader refuses values of it, the page shows none");
        }
        assertEquals(List.of(), wrong);
    }

    @Test
    void everyRefusalOfThePageIsTheReadersMessage() {
        List<String> failures = new ArrayList<>();
        for (Refusal r : refusals) {
            List<String> problems = problems(r.given());
            if (problems.isEmpty()) {
                failures.add(r.key() + ": '" + r.given() + "' loads");
                continue;
            }
            List<String> lines = problems.stream().filter(p -> p.contains(r.message())).toList();
            if (lines.isEmpty()) failures.add(r.key() + ": no problem says '" + r.message() + "': " + problems);
            for (String l : lines) {
                if (l.contains("\n")) failures.add(r.key() + ": more than one line: " + l);
                if (!l.startsWith("job.yaml:1: ")) failures.add(r.key() + ": does not name the file and line: " + l);
            }
        }
        if (!failures.isEmpty()) fail(failures.size() + " of " + refusals.size() + " refusals:\n" + String.join("\n", failures));
    }

    /** The problems of loading {@code yaml} as job.yaml in an empty folder (none: it loads). */
    static List<String> problems(String yaml) {
        try {
            ConfigValidator.validate(ConfigLoader.read(yaml, "job.yaml", dir));
            return List.of();
        } catch (ConfigException e) {
            return e.problems();
        }
    }
}

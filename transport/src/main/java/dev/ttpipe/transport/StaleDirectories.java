package dev.ttpipe.transport;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * Removes the Aeron directories that ttpipe processes killed with SIGKILL left behind (tens of MB
 * each in /dev/shm): only directories named as ttpipe names them ({@code ttpipe-aeron-<pid>-<8 hex>}),
 * owned by this user, whose process no longer exists. Never anything else.
 */
public final class StaleDirectories {
    static final Pattern NAME = Pattern.compile("ttpipe-aeron-(\\d+)-[0-9a-f]{8}");

    private StaleDirectories() {
    }

    /** Cleans /dev/shm and the temporary directory; returns what it removed. */
    public static List<Path> clean() {
        List<Path> removed = new ArrayList<>();
        for (Path base : List.of(Path.of("/dev/shm"), Path.of(System.getProperty("java.io.tmpdir")))) removed.addAll(clean(base));
        return removed;
    }

    /** Cleans one directory; returns what it removed. */
    public static List<Path> clean(Path base) {
        List<Path> removed = new ArrayList<>();
        if (!Files.isDirectory(base)) return removed;
        String me = System.getProperty("user.name");
        try (Stream<Path> s = Files.list(base)) {
            for (Path d : s.toList()) {
                Matcher m = NAME.matcher(d.getFileName().toString());
                if (!m.matches() || !Files.isDirectory(d)) continue;
                long pid;
                try {
                    pid = Long.parseLong(m.group(1));
                } catch (NumberFormatException e) {
                    continue;
                }
                if (ProcessHandle.of(pid).isPresent()) continue;              // its process still runs
                try {
                    if (!Files.getOwner(d).getName().equals(me)) continue;     // another user's
                } catch (IOException | UnsupportedOperationException e) {
                    continue;
                }
                if (deleteTree(d)) removed.add(d);
            }
        } catch (IOException ignored) {
            // nothing we may list
        }
        return removed;
    }

    private static boolean deleteTree(Path dir) {
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
            return true;
        } catch (IOException e) {
            return false;
        }
    }
}

package dev.ttpipe.transport;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Only ttpipe's own Aeron directories of processes that no longer exist are removed; nothing else. */
class StaleDirectoriesTest {
    @Test
    void removesOnlyTtpipeDirectoriesOfDeadProcesses(@TempDir Path base) throws Exception {
        long dead = 4_194_000;
        while (ProcessHandle.of(dead).isPresent()) dead++;
        Path stale = Files.createDirectories(base.resolve("ttpipe-aeron-" + dead + "-0badc0de"));
        Files.writeString(stale.resolve("cnc.dat"), "x");
        Path live = Files.createDirectories(base.resolve("ttpipe-aeron-" + ProcessHandle.current().pid() + "-0badc0de"));
        Path other = Files.createDirectories(base.resolve("aeron-" + dead + "-0badc0de"));
        Path lookalike = Files.createDirectories(base.resolve("ttpipe-aeron-" + dead + "-notahex"));
        List<Path> removed = StaleDirectories.clean(base);
        assertEquals(List.of(stale), removed);
        assertFalse(Files.exists(stale));
        assertTrue(Files.exists(live) && Files.exists(other) && Files.exists(lookalike));
    }
}

package dev.ttpipe.device.cpu;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The x86-64 levels read from /proc/cpuinfo are nested: a CPU that runs a level runs every level below it. */
class X86LevelTest {
    @Test
    void levelsAreNestedAndTheBaselineAlwaysRuns() {
        assertTrue(X86Level.supported("x86-64"));
        assertFalse(X86Level.supported("x86-64-v5"));
        boolean above = false;
        for (int i = X86Level.LEVELS.size() - 1; i >= 0; i--) {
            boolean runs = X86Level.supported(X86Level.LEVELS.get(i));
            if (above) assertTrue(runs, "a CPU that runs a higher level runs " + X86Level.LEVELS.get(i));
            above |= runs;
        }
        assertTrue(X86Level.supported(X86Level.highest()));
    }
}

package dev.ttpipe.actors.telemetry;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

class TerminalTest {

    @Test
    void aTerminalsWidthIsColumnsWithinReasonElseEighty() {
        assertEquals(132, Terminal.columns("132"));
        assertEquals(Terminal.MIN_COLUMNS, Terminal.columns("12"));
        assertEquals(80, Terminal.columns(null));
        assertEquals(80, Terminal.columns("wide"));
    }

    @Test
    void testsReadALogSoEightyColumns() {
        assertEquals(80, Terminal.columns(), "standard output under the test runner is not a terminal");
    }
}

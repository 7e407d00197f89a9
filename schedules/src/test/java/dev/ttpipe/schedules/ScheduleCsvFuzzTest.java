package dev.ttpipe.schedules;

import com.code_intelligence.jazzer.junit.FuzzTest;

import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;

/**
 * Any text given as a schedule CSV either reads as a schedule that writes back to itself and that
 * the validator can judge, or fails with a {@link ScheduleException} whose reason is one line: never
 * another exception, an out-of-memory error or a hang. Fuzzes for a few seconds in the default run
 * (longer with -Plong) and always replays the inputs under {@code ScheduleCsvFuzzTestInputs}.
 */
class ScheduleCsvFuzzTest {

    @FuzzTest
    void readsOnlySchedulesOrScheduleExceptions(byte[] input) {
        String text = new String(input, StandardCharsets.UTF_8);
        Schedule s;
        try {
            s = ScheduleCsv.read(text, "fuzz.csv");
        } catch (ScheduleException e) {
            assertOneLine(e.reason());
            return;
        }
        assertEquals(s, ScheduleCsv.read(ScheduleCsv.write(s), "again.csv"), "read(write(s)) differs from s");
        Validator.Result r = Validator.check(s);
        assertNotNull(r);
        if (!r.ok()) assertOneLine(r.reason());
    }

    private static void assertOneLine(String reason) {
        assertNotNull(reason);
        assertFalse(reason.contains("\n") || reason.contains("\r"), () -> "a reason of more than one line: " + reason);
    }
}

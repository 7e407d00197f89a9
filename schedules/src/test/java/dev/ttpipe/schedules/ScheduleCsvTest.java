package dev.ttpipe.schedules;

import org.junit.jupiter.api.Test;

import java.io.StringReader;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ScheduleCsvTest {

    @Test
    void writesOneLinePerRankInActionNotation() {
        Schedule s = Schedules.generate("1f1b", 2, 2, 1, null);
        assertEquals("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n", ScheduleCsv.write(s));
    }

    @Test
    void readsATorchComputeOnlyCsvWithEmptyCellsForIdleSteps() {
        String csv = "0F0,0F1,,0B0,,0B1\r\n,1F0,1B0,1F1,1B1,\r\n\r\n";
        Schedule s = ScheduleCsv.read(csv, "torch.csv");
        assertEquals("torch.csv", s.name());
        assertEquals(2, s.ranks());
        assertEquals(2, s.stages());
        assertEquals(2, s.microbatches());
        assertFalse(s.isLowered());
        assertEquals(Schedules.generate("1f1b", 2, 2, 1, null), s);
        Validator.validate(s);
    }

    @Test
    void readsATorchCsvWithCommunicationActions() {
        String csv = "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n";
        Schedule s = ScheduleCsv.read(csv, "comms.csv");
        assertTrue(s.isLowered());
        assertEquals(Lowering.lower(Schedules.generate("1f1b", 2, 1, 1, null)), s);
        Validator.validate(s);
    }

    @Test
    void infersTheStageLayoutOfVirtualStages() {
        Schedule s = ScheduleCsv.read(ScheduleCsv.write(Schedules.generate("interleaved", 2, 4, 3, null)), "i.csv");
        assertEquals(3, s.virtualStages());
        assertEquals(6, s.stages());
        assertEquals(1, s.rankOfStage(3));
        assertEquals(0, s.rankOfStage(4));
        assertEquals(List.of(0, 2, 4), Arrays.stream(s.stagesOfRank(0)).boxed().toList());
    }

    @Test
    void reportsSyntaxErrorsWithLineAndColumn() {
        ScheduleException e = assertThrows(ScheduleException.class,
                () -> ScheduleCsv.read("0F0,0B0\n1F0, 1Q0,1B0\n", "bad.csv"));
        assertTrue(e.getMessage().startsWith("bad.csv:2:6: bad action \"1Q0\""), e.getMessage());
    }

    @Test
    void rejectsAStageOnTwoRanks() {
        ScheduleException e = assertThrows(ScheduleException.class,
                () -> ScheduleCsv.read("0F0,0B0\n0F1,0B1\n", "twice.csv"));
        assertTrue(e.getMessage().contains("stage 0 appears on rank 0 and on rank 1"), e.getMessage());
    }

    @Test
    void rejectsAHugeStageNumberAsAGapWithoutAllocatingPerStage() {
        // found by ScheduleCsvFuzzTest: the per-stage arrays for stage 990999990 took 4 GB of heap
        ScheduleException e = assertThrows(ScheduleException.class,
                () -> ScheduleCsv.read("0F0,0F1,999999999F0,0B0,0B1\n", "huge.csv"));
        assertEquals("schedule huge.csv: stage 1 appears on no rank, but stage 999999999 does; stages must be numbered"
                + " 0..999999999 without gaps", e.reason());
    }

    @Test
    void rejectsAWrongNumberOfRanksWhenOneIsExpected() {
        ScheduleException e = assertThrows(ScheduleException.class,
                () -> ScheduleCsv.read(new StringReader("0F0,0B0\n"), "one.csv", 2));
        assertTrue(e.getMessage().contains("1 rows (one per rank), expected 2 ranks"), e.getMessage());
    }

    @Test
    void rejectsAnEmptyFile() {
        assertThrows(ScheduleException.class, () -> ScheduleCsv.read("\n\n", "empty.csv"));
    }
}

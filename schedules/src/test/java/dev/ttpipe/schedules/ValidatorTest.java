package dev.ttpipe.schedules;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ValidatorTest {

    private static ScheduleException rejected(String csv) {
        Schedule s = ScheduleCsv.read(csv, "hand.csv");
        ScheduleException e = assertThrows(ScheduleException.class, () -> Validator.validate(s));
        assertFalse(e.reason().contains("\n"), "the reason is one line: " + e.reason());
        assertTrue(e.getMessage().startsWith(e.reason()), e.getMessage());
        return e;
    }

    @Test
    void acceptsEveryGeneratedScheduleAndItsLowering() {
        for (String name : Schedules.names()) {
            Schedule s = Schedules.generate(name, 4, 8, Schedules.defaultVirtualStages(name), null);
            assertTrue(Validator.check(s).ok(), name + ": " + Validator.check(s).reason());
            assertTrue(Validator.check(Lowering.lower(s)).ok(), name + " lowered: " + Validator.check(Lowering.lower(s)).reason());
        }
    }

    @Test
    void rejectsAComputeOnlyCsvWithACyclicWaitMarkingTheFirstBlockedAction() {
        // rank 0 wants 1B0 before it sends 0F1; rank 1 wants 0F1 before it runs 1B0
        ScheduleException e = rejected("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
        assertTrue(e.reason().startsWith("hand.csv: deadlock, a cyclic wait: rank 1 blocks at step 0 (1F1) until rank 0 runs 0F1"),
                e.reason());
        assertTrue(e.reason().contains("rank 0 blocks at step 1 (0B0) until rank 1 runs 1B0"), e.reason());
        assertEquals("""
                step    0     1     2     3
                rank 0  0F0   0B0   0F1   0B1
                rank 1 [1F1]  1B1   1F0   1B0""", e.grid());
    }

    @Test
    void rejectsALoweredCsvWhoseReceivesComeBeforeTheSends() {
        ScheduleException e = rejected("0F0,0RECV_B0,0SEND_F0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n");
        assertTrue(e.reason().contains("deadlock"), e.reason());
        assertTrue(e.reason().contains("rank 1 blocks at step 0 (1RECV_F0) until rank 0 runs 0SEND_F0 (its step 2)"), e.reason());
        assertTrue(e.grid().contains("[1RECV_F0]"), e.grid());
    }

    @Test
    void rejectsABackwardBeforeItsForwardOnTheSameRank() {
        ScheduleException e = rejected("0B0,0F0\n");
        assertTrue(e.reason().contains("0B0 at step 0 needs 0F0, which rank 0 only runs later, at step 1"), e.reason());
        assertTrue(e.grid().contains("[0B0]"), e.grid());
    }

    @Test
    void rejectsDuplicatesAtTheSecondOccurrence() {
        ScheduleException e = rejected("0F0,0B0,0F0\n");
        assertTrue(e.reason().contains("0F0 appears twice: rank 0 runs it at steps 0 and 2"), e.reason());
        assertTrue(e.grid().contains("[0F0]"), e.grid());
    }

    @Test
    void rejectsAMicrobatchWithoutBackward() {
        assertTrue(rejected("0F0,0F1,0B0\n").reason().contains("stage 0 never runs a backward for microbatch 1"));
    }

    @Test
    void rejectsAMissingForwardOnAnotherStage() {
        assertTrue(rejected("0F0,0B0,0F1,0B1\n1F0,1B0,1B1\n").reason().contains("1B1 needs 1F1, which no rank runs"));
    }

    @Test
    void rejectsFullBackwardTogetherWithItsHalves() {
        assertTrue(rejected("0F0,0B0,0I0\n").reason().contains("0I0 and 0B0 are both scheduled"));
        assertTrue(rejected("0F0,0B0,0W0\n").reason().contains("0W0 and 0B0 are both scheduled"));
    }

    @Test
    void rejectsWeightGradientBeforeInputGradient() {
        assertTrue(rejected("0F0,0W0,0I0\n").reason().contains("0W0 at step 1 needs 0I0"));
        assertTrue(rejected("0F0,0I0\n").reason().contains("0I0 has no 0W0"));
    }

    @Test
    void rejectsASendWithoutItsReceive() {
        String reason = rejected("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                + "1RECV_F0,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n").reason();
        assertTrue(reason.contains("0SEND_F1 has no matching 1RECV_F1 on rank 1"), reason);
    }

    @Test
    void rejectsALoweredScheduleMissingAReceive() {
        String reason = rejected("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n").reason();
        assertTrue(reason.contains("1F0 needs 1RECV_F0 (its input comes from stage 0 on rank 0), which rank 1 never runs"), reason);
    }

    @Test
    void rejectsCommBetweenStagesOfOneRank() {
        String reason = rejected("0F0,0SEND_F0,1RECV_F0,1F0,1B0,0B0\n").reason();
        assertTrue(reason.contains("0SEND_F0 is not needed: stages 0 and 1 both live on rank 0"), reason);
    }

    @Test
    void rejectsSendsPastTheEndOfThePipeline() {
        assertTrue(rejected("0F0,0B0,0SEND_B0\n").reason().contains("there is no stage -1"));
    }

    @Test
    void checksGradientReductionAndOptimizerAfterAllWeightGradients() {
        assertTrue(Validator.check(ScheduleCsv.read("0F0,0F1,0B0,0I1,0W1,0REDUCE_GRAD,0OPTIMIZER_STEP\n", "ok.csv")).ok());
        assertTrue(rejected("0F0,0F1,0B0,0REDUCE_GRAD,0I1,0W1\n").reason().contains("0REDUCE_GRAD at step 3 needs 0W1"));
        assertTrue(rejected("0F0,0B0,0OPTIMIZER_STEP,0REDUCE_GRAD\n").reason().contains("0OPTIMIZER_STEP at step 2 needs 0REDUCE_GRAD"));
    }

    @Test
    void showsAWindowOfLongSchedulesAroundTheOffendingStep() {
        StringBuilder row = new StringBuilder();
        for (int m = 0; m < 40; m++) row.append("0F").append(m).append(",0B").append(m).append(',');
        row.append("0B3");
        ScheduleException e = rejected(row + "\n");
        assertTrue(e.grid().contains("[0B3]"), e.grid());
        assertTrue(e.grid().contains("..."), e.grid());
        assertTrue(e.grid().lines().allMatch(l -> l.length() < 300), e.grid());
    }

    @Test
    void checkReportsValidSchedulesAsOk() {
        Validator.Result result = Validator.check(Schedules.generate("gpipe", 3, 5, 1, null));
        assertTrue(result.ok());
        assertEquals("", result.reason());
    }
}

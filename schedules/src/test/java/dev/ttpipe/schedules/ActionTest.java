package dev.ttpipe.schedules;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ActionTest {

    @Test
    void parsesTheTorchNotation() {
        assertEquals(new Action(2, ActionKind.F, 0), Action.parse("2F0"));
        assertEquals(new Action(1, ActionKind.SEND_B, 3), Action.parse(" 1SEND_B3 "));
        assertEquals(new Action(12, ActionKind.RECV_F, 105), Action.parse("12RECV_F105"));
        assertEquals(new Action(0, ActionKind.REDUCE_GRAD), Action.parse("0REDUCE_GRAD"));
        assertEquals(new Action(3, ActionKind.OPTIMIZER_STEP, 1), Action.parse("3OPTIMIZER_STEP1"));
    }

    @Test
    void textFormRoundTripsForEveryKind() {
        for (ActionKind kind : ActionKind.values()) {
            Action a = new Action(7, kind, 11);
            assertEquals(a, Action.parse(a.toString()));
        }
        assertEquals("0REDUCE_GRAD", new Action(0, ActionKind.REDUCE_GRAD).toString());
        assertEquals("4W9", new Action(4, ActionKind.W, 9).toString());
    }

    @Test
    void rejectsMalformedActionsNamingTheText() {
        for (String bad : new String[]{"F0", "2X0", "2F", "2F0x", "", "2 F0", "-1F0", "2f0", "2UNSHARD"}) {
            ScheduleException e = assertThrows(ScheduleException.class, () -> Action.parse(bad), bad);
            assertTrue(e.getMessage().contains("\"" + bad.strip() + "\""), e.getMessage());
        }
        assertTrue(assertThrows(ScheduleException.class, () -> Action.parse("2F")).getMessage().contains("needs a microbatch"));
    }

    @Test
    void kindsKnowWhetherTheyComputeOrCommunicate() {
        assertTrue(ActionKind.W.isCompute());
        assertFalse(ActionKind.W.isComm());
        assertTrue(ActionKind.RECV_B.isComm());
        assertFalse(ActionKind.REDUCE_GRAD.isCompute() || ActionKind.REDUCE_GRAD.isComm());
    }

    @Test
    void computeActionsNeedAMicrobatch() {
        assertThrows(IllegalArgumentException.class, () -> new Action(0, ActionKind.F));
        assertThrows(IllegalArgumentException.class, () -> new Action(-1, ActionKind.F, 0));
    }
}

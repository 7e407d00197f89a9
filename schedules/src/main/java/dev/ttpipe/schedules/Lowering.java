package dev.ttpipe.schedules;

import java.util.ArrayList;
import java.util.List;

import static dev.ttpipe.schedules.ActionKind.RECV_B;
import static dev.ttpipe.schedules.ActionKind.RECV_F;
import static dev.ttpipe.schedules.ActionKind.SEND_B;
import static dev.ttpipe.schedules.ActionKind.SEND_F;

/**
 * Turns a compute-only schedule into one with explicit communication: wherever data crosses
 * ranks, a SEND right after the action that produces it and a RECV right before the action that
 * consumes it. Stages on the same rank hand data over without comm actions.
 *
 * <p>Since a SEND never blocks and a RECV waits for exactly what its consumer waited for before,
 * the lowered schedule runs exactly like the original: it validates if and only if the original
 * does, and simulates to the same timeline when SEND/RECV cost nothing.
 */
public final class Lowering {
    private Lowering() {
    }

    /**
     * The schedule with SEND/RECV pairs inserted; a schedule that is already lowered, or needs no
     * communication (one rank), is returned as is.
     */
    public static Schedule lower(Schedule schedule) {
        if (schedule.isLowered()) return schedule;
        int stages = schedule.stages();
        List<List<Action>> rows = new ArrayList<>(schedule.ranks());
        boolean inserted = false;
        for (int r = 0; r < schedule.ranks(); r++) {
            List<Action> row = schedule.row(r);
            List<Action> out = new ArrayList<>(row.size() * 2);
            for (Action a : row) {
                int s = a.stage();
                int m = a.microbatch();
                boolean forward = a.kind() == ActionKind.F;
                boolean inputGradient = a.kind() == ActionKind.B || a.kind() == ActionKind.I;
                boolean prevElsewhere = s > 0 && schedule.rankOfStage(s - 1) != r;
                boolean nextElsewhere = s < stages - 1 && schedule.rankOfStage(s + 1) != r;
                if (forward && prevElsewhere) out.add(new Action(s, RECV_F, m));
                if (inputGradient && nextElsewhere) out.add(new Action(s, RECV_B, m));
                out.add(a);
                if (forward && nextElsewhere) out.add(new Action(s, SEND_F, m));
                if (inputGradient && prevElsewhere) out.add(new Action(s, SEND_B, m));
            }
            inserted |= out.size() > row.size();
            rows.add(out);
        }
        return inserted ? Schedule.of(schedule.name(), rows) : schedule;
    }
}

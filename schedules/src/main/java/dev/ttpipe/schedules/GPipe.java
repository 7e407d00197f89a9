package dev.ttpipe.schedules;

import java.util.ArrayList;
import java.util.List;

/** GPipe: every rank runs all forwards, then all backwards, both in microbatch order. Peak activations M. */
final class GPipe {
    private GPipe() {
    }

    static Schedule generate(int ranks, int microbatches) {
        List<List<Action>> rows = new ArrayList<>(ranks);
        for (int r = 0; r < ranks; r++) {
            List<Action> row = new ArrayList<>(2 * microbatches);
            for (int m = 0; m < microbatches; m++) row.add(new Action(r, ActionKind.F, m));
            for (int m = 0; m < microbatches; m++) row.add(new Action(r, ActionKind.B, m));
            rows.add(row);
        }
        return Schedule.of("gpipe", rows);
    }
}

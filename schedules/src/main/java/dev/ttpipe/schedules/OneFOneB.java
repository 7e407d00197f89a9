package dev.ttpipe.schedules;

import java.util.ArrayList;
import java.util.List;

/**
 * 1F1B (PipeDream-flush): rank r runs {@code P-r-1} warm-up forwards, then alternates one forward
 * and one backward, then drains the remaining backwards. Rank r holds at most {@code min(P-r, M)}
 * activations; with equal stage costs the bubble fraction is {@code (P-1)/(M+P-1)}, as GPipe's.
 */
final class OneFOneB {
    private OneFOneB() {
    }

    static Schedule generate(int ranks, int microbatches) {
        List<List<Action>> rows = new ArrayList<>(ranks);
        for (int r = 0; r < ranks; r++) {
            List<Action> row = new ArrayList<>(2 * microbatches);
            int warmup = Math.min(ranks - r - 1, microbatches);
            for (int m = 0; m < warmup; m++) row.add(new Action(r, ActionKind.F, m));
            for (int k = 0; k + warmup < microbatches; k++) {
                row.add(new Action(r, ActionKind.F, warmup + k));
                row.add(new Action(r, ActionKind.B, k));
            }
            for (int m = microbatches - warmup; m < microbatches; m++) row.add(new Action(r, ActionKind.B, m));
            rows.add(row);
        }
        return Schedule.of("1f1b", rows);
    }
}

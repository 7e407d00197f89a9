package dev.ttpipe.schedules;

import java.util.ArrayList;
import java.util.List;

/**
 * ZB-H1 (Zero Bubble Pipeline Parallelism, Qi et al. 2024, arXiv 2401.10241): 1F1B with the
 * backward split into I (input gradient) and W (weight gradient). Rank r runs the same warm-up
 * and F/I alternation as 1F1B, but postpones its first r weight passes, so the W's fill the
 * bubbles at the end. Peak activations stay at most P per rank, as 1F1B's rank 0; with F = I = W
 * the idle time per rank is (P-1)F, a third of 1F1B's.
 */
final class ZeroBubbleH1 {
    private ZeroBubbleH1() {
    }

    static Schedule generate(int ranks, int microbatches) {
        List<List<Action>> rows = new ArrayList<>(ranks);
        for (int r = 0; r < ranks; r++) {
            List<Action> row = new ArrayList<>(3 * microbatches);
            int warmup = Math.min(ranks - r - 1, microbatches);
            int nextF = 0;
            int nextW = 0;
            for (; nextF < warmup; nextF++) row.add(new Action(r, ActionKind.F, nextF));
            for (int i = 0; i < microbatches; i++) {
                if (nextF < microbatches) row.add(new Action(r, ActionKind.F, nextF++));
                row.add(new Action(r, ActionKind.I, i));
                if (i >= r) row.add(new Action(r, ActionKind.W, nextW++));
            }
            for (; nextW < microbatches; nextW++) row.add(new Action(r, ActionKind.W, nextW));
            rows.add(row);
        }
        return Schedule.of("zb-h1", rows);
    }
}

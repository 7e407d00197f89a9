package dev.ttpipe.schedules;

import java.util.ArrayList;
import java.util.List;

/**
 * ZB-H2 (Zero Bubble Pipeline Parallelism, arXiv 2401.10241): trades memory for time. Rank r
 * warms up with {@code 2(P-r)-1} forwards, filling the start-up bubble, then runs I, F, W in turn,
 * postponing its first r weight passes into the drain as ZB-H1 does. Peak activations are at
 * most 2P per rank, twice 1F1B's. (The cost-driven {@code zb-greedy} with a 2P memory limit
 * usually does better on uneven costs.)
 */
final class ZeroBubbleH2 {
    private ZeroBubbleH2() {
    }

    static Schedule generate(int ranks, int microbatches) {
        List<List<Action>> rows = new ArrayList<>(ranks);
        for (int r = 0; r < ranks; r++) {
            List<Action> row = new ArrayList<>(3 * microbatches);
            int warmup = Math.min(2 * (ranks - r) - 1, microbatches);
            int nextF = 0;
            for (; nextF < warmup; nextF++) row.add(new Action(r, ActionKind.F, nextF));
            int nextW = 0;
            for (int i = 0; i < microbatches; i++) {
                row.add(new Action(r, ActionKind.I, i));
                if (nextF < microbatches) row.add(new Action(r, ActionKind.F, nextF++));
                if (i >= r) row.add(new Action(r, ActionKind.W, nextW++));
            }
            for (; nextW < microbatches; nextW++) row.add(new Action(r, ActionKind.W, nextW));
            rows.add(row);
        }
        return Schedule.of("zb-h2", rows);
    }
}

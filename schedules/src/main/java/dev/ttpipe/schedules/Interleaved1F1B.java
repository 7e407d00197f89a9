package dev.ttpipe.schedules;

import java.util.ArrayList;
import java.util.List;

/**
 * Interleaved 1F1B (Megatron-LM): rank r holds V model chunks, stages {@code r, r+P, r+2P, ...}.
 * Microbatches go through the chunks in groups of P: forward unit k of a rank is chunk {@code
 * (k/P) % V} of microbatch {@code (k/(P*V))*P + k%P}; backward units take the chunks in reverse.
 * Rank r warms up with {@code 2(P-r-1) + (V-1)P} forward units (all of them when M == P), then
 * alternates. With per-chunk costs F/V and B/V the idle time per rank is {@code (P-1)(F+B)/V}, V
 * times less than 1F1B. Needs M to be a multiple of P, like Megatron.
 */
final class Interleaved1F1B {
    private Interleaved1F1B() {
    }

    static Schedule generate(int ranks, int microbatches, int virtualStages) {
        if (microbatches % ranks != 0) {
            int lower = microbatches / ranks * ranks;
            throw new ScheduleException("interleaved needs the microbatch count to be a multiple of the " + ranks
                    + " pipeline ranks (Megatron's constraint), got " + microbatches + " microbatches; try "
                    + (lower > 0 ? lower + " or " : "") + (lower + ranks));
        }
        int total = microbatches * virtualStages;
        List<List<Action>> rows = new ArrayList<>(ranks);
        for (int r = 0; r < ranks; r++) {
            int warmup = microbatches == ranks ? total
                    : Math.min(total, 2 * (ranks - r - 1) + (virtualStages - 1) * ranks);
            List<Action> row = new ArrayList<>(2 * total);
            for (int k = 0; k < warmup; k++) row.add(unit(k, r, ranks, virtualStages, ActionKind.F));
            for (int k = 0; warmup + k < total; k++) {
                row.add(unit(warmup + k, r, ranks, virtualStages, ActionKind.F));
                row.add(unit(k, r, ranks, virtualStages, ActionKind.B));
            }
            for (int k = total - warmup; k < total; k++) row.add(unit(k, r, ranks, virtualStages, ActionKind.B));
            rows.add(row);
        }
        return Schedule.of("interleaved", rows);
    }

    private static Action unit(int k, int rank, int ranks, int virtualStages, ActionKind kind) {
        int group = k / ranks % virtualStages;
        int chunk = kind == ActionKind.F ? group : virtualStages - 1 - group;
        int microbatch = k / (ranks * virtualStages) * ranks + k % ranks;
        return new Action(chunk * ranks + rank, kind, microbatch);
    }
}

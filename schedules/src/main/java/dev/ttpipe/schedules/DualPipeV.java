package dev.ttpipe.schedules;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;

/**
 * DualPipeV (DeepSeek's "cut-in-half" DualPipe): 2P stages in a V, rank r holds stage r on the
 * way down and stage 2P-1-r on the way back up, so the last stage sits on rank 0 next to the
 * first. Each rank runs eight phases: forwards of the first chunk, forwards of both, zero-bubble
 * backwards of the second chunk, the main phase alternating F and B of both chunks, then the
 * drain, where part of the backwards are split into I and a deferred W that fills the bubbles.
 * Forward and backward of different chunks that DualPipeV overlaps run one after the other here.
 * Needs at least 2P microbatches.
 */
final class DualPipeV {
    private final int rank;
    private final int down;
    private final int up;
    private final List<Action> row = new ArrayList<>();
    private final ArrayDeque<Action> pendingWeights = new ArrayDeque<>();
    private int forwardDown;
    private int forwardUp;
    private int backwardDown;
    private int backwardUp;

    private DualPipeV(int rank, int ranks) {
        this.rank = rank;
        this.down = rank;
        this.up = 2 * ranks - 1 - rank;
    }

    static Schedule generate(int ranks, int microbatches) {
        if (microbatches < 2 * ranks) {
            throw new ScheduleException("dualpipev needs at least 2P = " + 2 * ranks + " microbatches for " + ranks
                    + " ranks, got " + microbatches);
        }
        List<List<Action>> rows = new ArrayList<>(ranks);
        for (int r = 0; r < ranks; r++) rows.add(new DualPipeV(r, ranks).row(ranks, microbatches));
        return Schedule.of("dualpipev", rows);
    }

    private List<Action> row(int ranks, int microbatches) {
        int r = rank;
        repeat(2 * (ranks - r - 1), () -> forward(down));
        repeat(r + 1, () -> {
            forward(down);
            forward(up);
        });
        repeat(ranks - r - 1, () -> {
            backward(up, true);
            weight();
            forward(up);
        });
        repeat(microbatches - 2 * ranks + r + 1, () -> {
            forward(down);
            backward(up, false);
            forward(up);
            backward(down, false);
        });
        repeat(ranks - r - 1, () -> {
            backward(up, false);
            forward(up);
            backward(down, false);
        });
        // the second half of the drain splits backwards, the first of them on the chunk given by parity
        int drain = r + 1;
        boolean split = false;
        for (int i = 0; i < drain; i++) {
            if (i == drain / 2 && r % 2 == 1) split = true;
            backward(up, split);
            if (i == drain / 2 && r % 2 == 0) split = true;
            backward(down, split);
        }
        repeat(ranks - r - 1, () -> {
            weight();
            backward(down, true);
        });
        while (!pendingWeights.isEmpty()) weight();
        return row;
    }

    private static void repeat(int times, Runnable body) {
        for (int i = 0; i < times; i++) body.run();
    }

    private void forward(int stage) {
        int m = stage == down ? forwardDown++ : forwardUp++;
        row.add(new Action(stage, ActionKind.F, m));
    }

    private void backward(int stage, boolean split) {
        int m = stage == down ? backwardDown++ : backwardUp++;
        if (split) {
            row.add(new Action(stage, ActionKind.I, m));
            pendingWeights.add(new Action(stage, ActionKind.W, m));
        } else {
            row.add(new Action(stage, ActionKind.B, m));
        }
    }

    private void weight() {
        row.add(pendingWeights.remove());
    }
}

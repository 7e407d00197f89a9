package dev.ttpipe.stages;

import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.ReduceOp;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;

/**
 * {@code y = x W^T + b} with W [out, in]. Under tensor parallelism it is Megatron's column-parallel
 * linear (W split by output rows; y comes out split on its last dim) or row-parallel linear (W split
 * by input columns; x arrives split, the partial products are all-reduced).
 *
 * <p>forward saves x; backwardInput computes dx = dy W and saves dy; backwardWeight computes
 * dW += dy^T x and db += sum(dy), then frees both.
 */
final class Linear {
    enum Split { NONE, COLUMN, ROW }

    private final StageContext c;
    private final Split split;
    final Param w;
    final Param b;
    private final Slots<Tensor> xs = new Slots<>();
    private final Slots<Tensor> dys = new Slots<>();

    Linear(StageContext c, String name, int in, int out, boolean bias, Split split, double std) {
        this.c = c;
        this.split = c.par.tp() ? split : Split.NONE;
        Layout wl = this.split == Split.COLUMN ? c.par.tpShard(0) : this.split == Split.ROW ? c.par.tpShard(1) : Layout.REPLICATED;
        this.w = c.normal(name + ".weight", Shape.of(out, in), wl, std);
        Layout bl = this.split == Split.COLUMN ? c.par.tpShard(0) : Layout.REPLICATED;
        this.b = bias ? c.constant(name + ".bias", Shape.of(out), bl, 0f) : null;
    }

    /** W as a matmul with {@code other} takes it (rounded to bf16 once per optimizer step when other is BF16). */
    private Tensor weight(Tensor other) {
        return w.matmulValue(other.dtype());
    }

    Tensor forward(Micro m, Tensor x) {
        Ops ops = c.ops;
        Tensor y;
        if (split == Split.ROW) {
            try (Tensor partial = ops.linear(x, weight(x), null)) {
                y = ops.allReduce(partial, c.par.tpAxis(), ReduceOp.SUM);
            }
            if (b != null) {
                Tensor yb = ops.add(y, b.value());
                y.close();
                y = yb;
            }
        } else {
            y = ops.linear(x, weight(x), b == null ? null : b.value());
        }
        if (m.stash()) xs.put(m.mb(), c.keep(x));
        return y;
    }

    /** dx = dy W; saves dy for {@link #backwardWeight}. A column-parallel dx is left as a partial sum. */
    Tensor backwardInputPartial(Micro m, Tensor dy) {
        dys.put(m.mb(), c.keep(dy));
        return c.ops.matmul(dy, weight(dy), false, false);
    }

    /** Adds dy W into {@code dxAcc} (for linears that share an input, such as q, k and v). */
    void backwardInputInto(Micro m, Tensor dy, Tensor dxAcc) {
        dys.put(m.mb(), c.keep(dy));
        c.ops.matmulInto(dxAcc, dy, weight(dy), false, false, 1f, 1f);
    }

    /** dx = dy W, complete (all-reduced over TP for a column-parallel linear). */
    Tensor backwardInput(Micro m, Tensor dy) {
        Tensor dx = backwardInputPartial(m, dy);
        if (split == Split.COLUMN) {
            c.ops.allReduceInPlace(dx, c.par.tpAxis(), ReduceOp.SUM);
        }
        return dx;
    }

    boolean columnParallel() {
        return split == Split.COLUMN;
    }

    void backwardWeight(Micro m) {
        try (Tensor x = xs.remove(m.mb()); Tensor dy = dys.remove(m.mb())) {
            Ops ops = c.ops;
            int in = x.shape().last(), out = dy.shape().last();
            try (Tensor x2 = ops.reshape(x, Shape.of((int) x.shape().rows(), in));
                 Tensor dy2 = ops.reshape(dy, Shape.of((int) dy.shape().rows(), out))) {
                boolean acc = w.markWritten();
                ops.matmulInto(w.grad(), dy2, x2, true, false, 1f, acc ? 1f : 0f);
                if (b != null) {
                    boolean accB = b.markWritten();
                    ops.sumRows(dy2, b.grad(), accB);
                }
            }
        }
    }

    int saved() {
        return xs.live();
    }

    void dropSaved() {
        xs.drain().forEach(Tensor::close);
        dys.drain().forEach(Tensor::close);
    }
}

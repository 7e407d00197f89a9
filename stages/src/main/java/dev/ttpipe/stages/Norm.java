package dev.ttpipe.stages;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.NormOutput;
import dev.ttpipe.device.Placement;
import dev.ttpipe.device.ReduceOp;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;

/**
 * LayerNorm (gamma, beta) for GPT-2 or RMSNorm (gamma) for Llama, over the last dimension, with the
 * model's epsilon. forward saves x, mean and rstd; backwardInput saves dy; backwardWeight accumulates
 * dgamma/dbeta.
 *
 * <p>A norm over the heads of q or k (Qwen3) sees, under tensor parallelism, only its device's heads:
 * each device's dgamma is then a part of the sum, which backwardWeight all-reduces over the TP axis
 * before it joins the accumulator (the gain itself is replicated).
 */
final class Norm {
    private final StageContext c;
    private final boolean rms;
    private final float eps;
    /** The input's rows are split over the TP axis (heads of a column-parallel projection). */
    private final boolean rowsSplitOverTp;
    final Param gamma;
    final Param beta;
    private final Slots<Saved> saved = new Slots<>();

    private record Saved(Tensor x, Tensor mean, Tensor rstd, Tensor[] dy) {
        void close() {
            x.close();
            if (mean != null) mean.close();
            rstd.close();
            if (dy[0] != null) dy[0].close();
        }
    }

    Norm(StageContext c, String name, int dim, boolean rms) {
        this(c, name, dim, rms, false);
    }

    /** {@code rowsSplitOverTp}: an RMSNorm over the heads of a column-parallel projection (see the class comment). */
    Norm(StageContext c, String name, int dim, boolean rms, boolean rowsSplitOverTp) {
        this.c = c;
        this.rms = rms;
        this.eps = c.spec.normEps();
        this.rowsSplitOverTp = rowsSplitOverTp && c.par.tp();
        this.gamma = c.constant(name + ".gamma", Shape.of(dim), Layout.REPLICATED, 1f);
        this.beta = rms ? null : c.constant(name + ".beta", Shape.of(dim), Layout.REPLICATED, 0f);
    }

    Tensor forward(Micro m, Tensor x) {
        NormOutput o = rms ? c.ops.rmsNorm(x, gamma.value(), eps) : c.ops.layerNorm(x, gamma.value(), beta.value(), eps);
        if (m.stash()) {
            saved.put(m.mb(), new Saved(c.keep(x), o.mean(), o.rstd(), new Tensor[1]));
        } else {
            o.closeSaved();
        }
        return o.y();
    }

    Tensor backwardInput(Micro m, Tensor dy) {
        Saved s = saved.get(m.mb());
        s.dy[0] = c.keep(dy);
        return rms ? c.ops.rmsNormBackwardInput(dy, s.x, gamma.value(), s.rstd)
                : c.ops.layerNormBackwardInput(dy, s.x, gamma.value(), s.mean, s.rstd);
    }

    void backwardWeight(Micro m) {
        Saved s = saved.remove(m.mb());
        try {
            boolean accG = gamma.markWritten();
            if (rms && rowsSplitOverTp) {
                rmsGammaOverTpHeads(s, accG);
            } else if (rms) {
                c.ops.rmsNormBackwardWeight(s.dy[0], s.x, s.rstd, gamma.grad(), accG);
            } else {
                boolean accB = beta.markWritten();
                if (accG != accB) throw new IllegalStateException("gamma and beta gradients out of step");
                c.ops.layerNormBackwardWeight(s.dy[0], s.x, s.mean, s.rstd, gamma.grad(), beta.grad(), accG);
                if (Mutation.on(Mutation.SCALE_LAYERNORM_DGAMMA)) c.ops.scaleInPlace(gamma.grad(), 1.001f);
            }
        } finally {
            s.close();
        }
    }

    /** dgamma of heads split over TP: each device's part of the sum, all-reduced over the TP axis, then into the accumulator. */
    private void rmsGammaOverTpHeads(Saved s, boolean accumulate) {
        Tensor acc = gamma.grad();
        Layout partial = acc.layout().with(c.par.tpAxis(), Placement.PARTIAL);
        try (Tensor part = c.ops.zeros(gamma.shape(), partial, DType.FP32)) {
            c.ops.rmsNormBackwardWeight(s.dy[0], s.x, s.rstd, part, false);
            c.ops.allReduceInPlace(part, c.par.tpAxis(), ReduceOp.SUM);
            if (accumulate) c.ops.addInPlace(acc, part, 1f);
            else c.ops.copyInto(acc, part);
        }
    }

    void dropSaved() {
        saved.drain().forEach(Saved::close);
    }
}

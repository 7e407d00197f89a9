package dev.ttpipe.stages;

import dev.ttpipe.device.Layout;
import dev.ttpipe.device.NormOutput;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;

/**
 * LayerNorm (gamma, beta) for GPT-2 or RMSNorm (gamma) for Llama, over the last dimension.
 * forward saves x, mean and rstd; backwardInput saves dy; backwardWeight accumulates dgamma/dbeta.
 */
final class Norm {
    static final float EPS = 1e-5f;

    private final StageContext c;
    private final boolean rms;
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
        this.c = c;
        this.rms = rms;
        this.gamma = c.constant(name + ".gamma", Shape.of(dim), Layout.REPLICATED, 1f);
        this.beta = rms ? null : c.constant(name + ".beta", Shape.of(dim), Layout.REPLICATED, 0f);
    }

    Tensor forward(Micro m, Tensor x) {
        NormOutput o = rms ? c.ops.rmsNorm(x, gamma.value(), EPS) : c.ops.layerNorm(x, gamma.value(), beta.value(), EPS);
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
            if (rms) {
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

    void dropSaved() {
        saved.drain().forEach(Saved::close);
    }
}

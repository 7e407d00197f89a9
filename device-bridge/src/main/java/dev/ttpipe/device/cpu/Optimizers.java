package dev.ttpipe.device.cpu;

import dev.ttpipe.device.AdamWParams;
import dev.ttpipe.device.SgdParams;

import java.nio.FloatBuffer;

/** AdamW and SGD updates on one device's pieces, with torch.optim's semantics, in place. */
final class Optimizers {
    private Optimizers() {
    }

    /**
     * g = grad * gradScale; param *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
     * param -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
     */
    static void adamw(Parallel par, FloatBuffer param, FloatBuffer grad, FloatBuffer m, FloatBuffer v, int n,
                      AdamWParams p) {
        float b1 = p.beta1();
        float b2 = p.beta2();
        float gs = p.gradScale();
        float decay = 1f - p.lr() * p.weightDecay();
        float stepSize = (float) (p.lr() / (1.0 - Math.pow(b1, p.step())));
        float bc2Sqrt = (float) Math.sqrt(1.0 - Math.pow(b2, p.step()));
        float eps = p.eps();
        if (CpuNative.active()) {
            long pa = CpuNative.address(param, n), ga = CpuNative.address(grad, n);
            long ma = CpuNative.address(m, n), va = CpuNative.address(v, n);
            par.range(n, Elementwise.GRAIN, (lo, hi) -> CpuNative.ttpipe_cpu_adamw(pa + 4L * lo, ga + 4L * lo, ma + 4L * lo,
                    va + 4L * lo, hi - lo, b1, b2, gs, decay, stepSize, bc2Sqrt, eps));
            return;
        }
        par.range(n, Elementwise.GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) {
                float g = grad.get(i) * gs;
                float mi = b1 * m.get(i) + (1f - b1) * g;
                float vi = b2 * v.get(i) + (1f - b2) * g * g;
                m.put(i, mi);
                v.put(i, vi);
                float denom = (float) Math.sqrt(vi) / bc2Sqrt + eps;
                param.put(i, param.get(i) * decay - stepSize * mi / denom);
            }
        });
    }

    /**
     * d = grad * gradScale + wd * param; with momentum: buf = d on step 1, else
     * buf = momentum buf + (1 - dampening) d; d = nesterov ? d + momentum buf : buf; param -= lr d.
     */
    static void sgd(Parallel par, FloatBuffer param, FloatBuffer grad, FloatBuffer buf, int n, SgdParams p) {
        float lr = p.lr();
        float mu = p.momentum();
        float damp = 1f - p.dampening();
        float wd = p.weightDecay();
        float gs = p.gradScale();
        boolean first = p.step() == 1;
        boolean nesterov = p.nesterov();
        par.range(n, Elementwise.GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) {
                float w = param.get(i);
                float d = grad.get(i) * gs + wd * w;
                if (mu != 0f) {
                    float b = first ? d : mu * buf.get(i) + damp * d;
                    buf.put(i, b);
                    d = nesterov ? d + mu * b : b;
                }
                param.put(i, w - lr * d);
            }
        });
    }
}

package dev.ttpipe.stages;

/**
 * Optimizer settings: AdamW (decoupled weight decay, bias correction) or SGD (torch semantics:
 * momentum with dampening, optional Nesterov, L2 weight decay), or NOOP (TTML's {@code NoOp}: the
 * step is counted and nothing is updated; forward, backward, gradient reduction and clipping still
 * run). Weight decay applies to matrices and embeddings only, as in nanoGPT.
 */
public record OptimizerSpec(Kind kind, double learningRate, double weightDecay, double beta1, double beta2,
                            double epsilon, double momentum, double dampening, boolean nesterov) {
    public enum Kind { ADAMW, SGD, NOOP }

    public static OptimizerSpec adamw(double lr, double weightDecay) {
        return new OptimizerSpec(Kind.ADAMW, lr, weightDecay, 0.9, 0.999, 1e-8, 0, 0, false);
    }

    /** TTML's NoOp optimizer: parameters never change. */
    public static OptimizerSpec noop() {
        return new OptimizerSpec(Kind.NOOP, 0, 0, 0.9, 0.999, 1e-8, 0, 0, false);
    }

    public static OptimizerSpec sgd(double lr, double momentum, boolean nesterov, double weightDecay) {
        return new OptimizerSpec(Kind.SGD, lr, weightDecay, 0.9, 0.999, 1e-8, momentum, 0, nesterov);
    }
}

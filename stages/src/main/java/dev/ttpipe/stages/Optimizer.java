package dev.ttpipe.stages;

import dev.ttpipe.device.AdamWParams;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.SgdParams;
import dev.ttpipe.device.Tensor;

import java.util.List;

/**
 * Updates one stage's parameters from their complete gradients with the device's AdamW or SGD
 * kernel, on every device's copy (NOOP: counts the step, updates nothing). {@code gradScale} folds in the global-norm clip factor. State
 * tensors (moments, momentum) are allocated on first use with the parameter's layout.
 */
public final class Optimizer {
    private final OptimizerSpec spec;
    private int steps;

    public Optimizer(OptimizerSpec spec) {
        this.spec = spec;
    }

    public OptimizerSpec spec() {
        return spec;
    }

    /** Optimizer steps taken so far. */
    public int steps() {
        return steps;
    }

    /** Continues from a checkpoint: the next step is step {@code steps + 1} (AdamW's bias correction uses it). */
    public void restoreSteps(int steps) {
        if (steps < 0) throw new IllegalArgumentException("optimizer steps " + steps + " < 0");
        this.steps = steps;
    }

    /** Global-norm clip factor from the stages' summed squares: min(1, maxNorm / (norm + 1e-6)). */
    public static double clipFactor(double sumSquares, double maxNorm) {
        double norm = Math.sqrt(sumSquares);
        return norm > maxNorm ? maxNorm / (norm + 1e-6) : 1.0;
    }

    /** Steps every parameter of {@code stage} that received a gradient, then ends the stage's step. */
    public void step(Stage stage, double lr, double gradScale) {
        step(stage.parameters(), lr, gradScale, stage.submesh().ops());   // the stage's ops: a profiled submesh sees these
        stage.endStep();
    }

    void step(List<Param> params, double lr, double gradScale) {
        step(params, lr, gradScale, null);
    }

    /** With {@code stageOps} null each parameter's own submesh's ops. */
    private void step(List<Param> params, double lr, double gradScale, Ops stageOps) {
        steps++;
        if (spec.kind() == OptimizerSpec.Kind.NOOP) return;
        for (Param p : params) {
            Tensor g = p.fullGrad();
            if (g == null) continue;
            p.changed();
            Ops ops = stageOps != null ? stageOps : p.value().submesh().ops();
            float wd = p.decays() ? (float) spec.weightDecay() : 0f;
            if (spec.kind() == OptimizerSpec.Kind.ADAMW) {
                if (p.expAvg == null) {
                    p.expAvg = ops.zeros(p.shape(), p.value().layout(), DType.FP32);
                    p.expAvgSq = ops.zeros(p.shape(), p.value().layout(), DType.FP32);
                }
                ops.adamw(p.value(), g, p.expAvg, p.expAvgSq, new AdamWParams((float) lr, (float) spec.beta1(),
                        (float) spec.beta2(), (float) spec.epsilon(), wd, steps, (float) gradScale));
            } else {
                if (spec.momentum() != 0 && p.expAvg == null) {
                    p.expAvg = ops.zeros(p.shape(), p.value().layout(), DType.FP32);
                }
                ops.sgd(p.value(), g, spec.momentum() != 0 ? p.expAvg : null, new SgdParams((float) lr,
                        (float) spec.momentum(), (float) spec.dampening(), wd, spec.nesterov(), steps, (float) gradScale));
            }
        }
    }
}

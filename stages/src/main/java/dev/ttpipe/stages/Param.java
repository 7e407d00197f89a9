package dev.ttpipe.stages;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.ReduceOp;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;

/**
 * A trainable parameter on a stage's submesh: its value, its gradient accumulator and optimizer
 * state. Gradients accumulate overwrite-on-first-write: the first contribution of a step writes the
 * accumulator (no zero-fill), later ones add to it; {@link #firstWrite()} says which is due.
 *
 * <p>With DDP the accumulator is a pending sum over the DDP axis (each device holds its own
 * microbatch shard's contribution) until {@link #reduce} all-reduces it.
 */
public final class Param implements AutoCloseable {
    private final String name;
    private final Tensor value;
    private final Layout gradLayout;
    private final boolean decay;
    private Tensor grad;
    private Tensor reducedGrad;
    private Tensor bf16Value;
    private boolean bf16Operand;
    private boolean gradWritten;
    Tensor expAvg;
    Tensor expAvgSq;

    Param(String name, Tensor value, Layout gradLayout, boolean decay) {
        this.name = name;
        this.value = value;
        this.gradLayout = gradLayout;
        this.decay = decay;
    }

    public String name() {
        return name;
    }

    public Tensor value() {
        return value;
    }

    public Shape shape() {
        return value.shape();
    }

    /**
     * The value as the operand of a matmul whose other operand is of {@code other}: the value itself for FP32; for BF16
     * the value rounded to bf16 once after each change (as a device keeps bf16 weights), the bits the matmul would
     * round it to on every call. Whoever writes the value calls {@link #changed()}.
     */
    public Tensor matmulValue(DType other) {
        if (other != DType.BF16) return value;
        bf16Operand = true;
        if (bf16Value == null) bf16Value = value.submesh().ops().typecast(value, DType.BF16);
        return bf16Value;
    }

    /** Makes the bf16 copy now if a matmul has taken this parameter in bf16 before (a memory plan counts it as held). */
    public void roundForMatmuls() {
        if (bf16Operand) matmulValue(DType.BF16);
    }

    /** The value was written (an optimizer step, a load): drops its bf16 copy. */
    public void changed() {
        if (bf16Value != null) {
            bf16Value.close();
            bf16Value = null;
        }
    }

    /** The first AdamW moment (SGD: the momentum buffer) on the host, or null before the optimizer's first step. */
    public float[] expAvgToHost() {
        return expAvg == null ? null : expAvg.toHost();
    }

    /** The second AdamW moment on the host, or null. */
    public float[] expAvgSqToHost() {
        return expAvgSq == null ? null : expAvgSq.toHost();
    }

    /**
     * Overwrites the value, and the optimizer moments where given (null: left as they are, or
     * dropped when {@code dropMissingMoments}), from logical host values laid out on this
     * parameter's devices as its value is (replicated or sharded).
     */
    public void load(float[] newValue, float[] newExpAvg, float[] newExpAvgSq, boolean dropMissingMoments) {
        var ops = value.submesh().ops();
        try (Tensor t = ops.fromHost(newValue, value.shape(), value.layout(), DType.FP32)) {
            ops.copyInto(value, t);
        }
        changed();
        expAvg = loadMoment(expAvg, newExpAvg, dropMissingMoments);
        expAvgSq = loadMoment(expAvgSq, newExpAvgSq, dropMissingMoments);
    }

    private Tensor loadMoment(Tensor current, float[] values, boolean dropMissing) {
        if (values == null) {
            if (dropMissing && current != null) {
                current.close();
                return null;
            }
            return current;
        }
        var ops = value.submesh().ops();
        Tensor t = ops.fromHost(values, value.shape(), value.layout(), DType.FP32);
        if (current != null) current.close();
        return t;
    }

    /** Whether weight decay applies (matrices and embeddings; not biases and norm gains, as nanoGPT). */
    public boolean decays() {
        return decay;
    }

    /** The accumulator, allocated on first use. */
    public Tensor grad() {
        if (grad == null) {
            grad = value.submesh().ops().zeros(value.shape(), gradLayout, DType.FP32);
        }
        return grad;
    }

    /** True when the next contribution must overwrite (the first of this step). */
    public boolean firstWrite() {
        return !gradWritten;
    }

    /** Records that a contribution was written; returns whether it had to accumulate. */
    public boolean markWritten() {
        boolean accumulate = gradWritten;
        gradWritten = true;
        return accumulate;
    }

    public boolean hasGrad() {
        return gradWritten;
    }

    /** Completes the gradient: all-reduces the DDP partial sums. Idempotent within a step. */
    public void reduce(Parallelism par) {
        if (!gradWritten || reducedGrad != null) return;
        Ops ops = value.submesh().ops();
        reducedGrad = par.ddp() ? ops.allReduce(grad, par.ddpAxis(), ReduceOp.SUM) : null;
    }

    /** The complete gradient of this step (after {@link #reduce}); null when nothing was written. */
    public Tensor fullGrad() {
        if (!gradWritten) return null;
        return reducedGrad != null ? reducedGrad : grad;
    }

    /** Replaces this step's complete gradient (after {@link #reduce}) by {@code values}: a tied copy's summed gradient. */
    public void replaceFullGrad(float[] values) {
        Tensor target = fullGrad();
        if (target == null) throw new IllegalStateException(name + ": no gradient this step to replace");
        Ops ops = value.submesh().ops();
        try (Tensor t = ops.fromHost(values, value.shape(), target.layout(), DType.FP32)) {
            ops.copyInto(target, t);
        }
    }

    /** Ends the step: the next contribution overwrites the accumulator. */
    public void clearGrad() {
        gradWritten = false;
        if (reducedGrad != null) {
            reducedGrad.close();
            reducedGrad = null;
        }
    }

    @Override
    public void close() {
        changed();
        value.close();
        if (grad != null) grad.close();
        if (reducedGrad != null) reducedGrad.close();
        if (expAvg != null) expAvg.close();
        if (expAvgSq != null) expAvgSq.close();
    }

    @Override
    public String toString() {
        return name + value.shape();
    }
}

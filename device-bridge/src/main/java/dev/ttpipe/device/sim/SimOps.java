package dev.ttpipe.device.sim;

import dev.ttpipe.device.AdamWParams;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.ReduceOp;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.device.SgdParams;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.spi.CheckedOps;
import dev.ttpipe.device.spi.DeviceMemory;
import dev.ttpipe.device.spi.LocalPiecesOps;
import dev.ttpipe.device.spi.MatmulDims;
import dev.ttpipe.device.spi.MeshTensor;
import dev.ttpipe.device.spi.Sharding;

import java.nio.ByteBuffer;
import java.util.List;

/**
 * The sim backend's kernels: no math, only time. Matmul-like ops cost their flops
 * ({@code 2 * batch * m * n * k} of one device's pieces), memory-bound ops the bytes of one
 * device's pieces read and written, collectives the bytes one device moves over its links (ring
 * algorithms: all_gather and reduce_scatter (n - 1) pieces, all_reduce 2 (n - 1) / n of the
 * tensor). Devices of a submesh work in parallel, so a submesh's op time is one device's.
 */
final class SimOps extends CheckedOps implements LocalPiecesOps {
    private final SimSubmesh sub;
    private final SimCosts costs;
    private final List<DeviceMemory> memories;

    SimOps(SimSubmesh sub, SimCosts costs) {
        super(sub);
        this.sub = sub;
        this.costs = costs;
        this.memories = sub.accounting();
    }

    @Override
    protected boolean isOwnTensor(Tensor t) {
        return t instanceof SimTensor;
    }

    @Override
    protected MeshTensor allocate(Shape shape, Layout layout, DType dtype) {
        sub.simMesh().requireOpen();
        long bytes = Sharding.localShape(shape, layout, sub.shape()).numel() * dtype.bytes();
        DeviceMemory.allocateAll(memories, bytes);
        return new SimTensor(sub, shape, layout, dtype, new SimStorage(memories, bytes));
    }

    @Override
    protected MeshTensor view(MeshTensor base, Shape shape, Layout layout) {
        base.storage().retain();
        return new SimTensor(sub, shape, layout, base.dtype(), (SimStorage) base.storage());
    }

    private void memoryBound(MeshTensor... touched) {
        double bytes = 0;
        for (MeshTensor t : touched) if (t != null) bytes += t.bytesPerDevice();
        long end = sub.enqueue(costs.memorySeconds(bytes));
        for (MeshTensor t : touched) touched(t, end);
    }

    /** Link time for {@code bytes}; {@code written}: the tensor the transfer fills. */
    private void link(double bytes, MeshTensor written) {
        touched(written, sub.enqueue(costs.linkSeconds(bytes)));
    }

    /**
     * Stamps {@code t}'s memory with the end of an op that touched it: a submesh that adopts it waits
     * for that, not for whatever this queue runs later. Inputs are stamped too (reads end there as
     * well), which can only make an adopter wait longer, never too little.
     */
    private static void touched(MeshTensor t, long end) {
        if (t != null) ((SimStorage) t.storage()).touchedUntil(end);
    }

    // ---- creation and movement ---------------------------------------------------------------------

    @Override
    protected void writeHostKernel(MeshTensor t, float[] data) {
        link(t.bytesPerDevice(), t);
    }

    @Override
    protected void writeHostIntsKernel(MeshTensor t, int[] data) {
        link(t.bytesPerDevice(), t);
    }

    @Override
    protected void writeLocalKernel(MeshTensor t, float[][] pieces) {
        link(t.bytesPerDevice(), t);
    }

    /** Nothing to copy (no values); costs the bytes over the host link, as {@code fromHostLocal}. */
    @Override
    public Tensor fromLocalBytes(ByteBuffer src, Shape shape, Layout layout, DType dtype) {
        MeshTensor out = allocateForLocalBytes(src, shape, layout, dtype);
        link(out.bytesPerDevice(), out);
        return out;
    }

    /** Null: sim pieces hold no bytes to write in place (a transport uses {@link #fromLocalBytes}). */
    @Override
    public Tensor allocateLocal(Shape shape, Layout layout, DType dtype) {
        return null;
    }

    @Override
    protected void fillKernel(MeshTensor t, float value) {
        memoryBound(t);
    }

    @Override
    protected void copyKernel(MeshTensor dst, MeshTensor src) {
        memoryBound(dst, src);
    }

    @Override
    protected void permuteKernel(MeshTensor out, MeshTensor x, int[] dims) {
        memoryBound(out, x);
    }

    /** Moves the accounting (nothing to copy); later work here waits for the tensor's producer. */
    @Override
    protected MeshTensor adoptKernel(MeshTensor t) {
        // The tensor is ready when the sender's queue has run the last op that touched it (which may
        // still be ahead: ops return before their modeled time has passed). Work the sender queued
        // since must not delay the receiver.
        long readyAt = ((SimStorage) t.storage()).readyAt();
        MeshTensor moved = moveHere(t, memories);
        if (moved == null) {
            moved = allocate(t.shape(), t.layout(), t.dtype());
            t.close();
        }
        touched(moved, readyAt);
        sub.waitFor(readyAt);
        return moved;
    }

    // ---- compute-bound -------------------------------------------------------------------------------

    @Override
    protected void matmulKernel(MeshTensor out, MeshTensor a, MeshTensor b, boolean ta, boolean tb, float alpha,
                                float beta) {
        long end = sub.enqueue(costs.computeSeconds(MatmulDims.of(a.localShape(), ta, b.localShape(), tb).flops()));
        touched(out, end);
        touched(a, end);
        touched(b, end);
    }

    // ---- memory-bound --------------------------------------------------------------------------------

    @Override
    protected void embeddingKernel(MeshTensor out, MeshTensor ids, MeshTensor table) {
        memoryBound(ids, out, out); // ids read, rows gathered, output written
    }

    @Override
    protected void embeddingBackwardKernel(MeshTensor ids, MeshTensor dOut, MeshTensor dTable, boolean accumulate) {
        memoryBound(ids, dOut, dOut, dTable);
    }

    @Override
    protected void layerNormKernel(MeshTensor y, MeshTensor mean, MeshTensor rstd, MeshTensor x, MeshTensor gamma,
                                   MeshTensor beta, float eps) {
        memoryBound(y, mean, rstd, x, gamma, beta);
    }

    @Override
    protected void layerNormBackwardInputKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, MeshTensor gamma,
                                                MeshTensor mean, MeshTensor rstd) {
        memoryBound(dx, dy, x, gamma, mean, rstd);
    }

    @Override
    protected void layerNormBackwardWeightKernel(MeshTensor dy, MeshTensor x, MeshTensor mean, MeshTensor rstd,
                                                 MeshTensor dGamma, MeshTensor dBeta, boolean accumulate) {
        memoryBound(dy, x, mean, rstd, dGamma, dBeta);
    }

    @Override
    protected void rmsNormKernel(MeshTensor y, MeshTensor rstd, MeshTensor x, MeshTensor gamma, float eps) {
        memoryBound(y, rstd, x, gamma);
    }

    @Override
    protected void rmsNormBackwardInputKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, MeshTensor gamma,
                                              MeshTensor rstd) {
        memoryBound(dx, dy, x, gamma, rstd);
    }

    @Override
    protected void rmsNormBackwardWeightKernel(MeshTensor dy, MeshTensor x, MeshTensor rstd, MeshTensor dGamma,
                                               boolean accumulate) {
        memoryBound(dy, x, rstd, dGamma);
    }

    @Override
    protected void softmaxKernel(MeshTensor y, MeshTensor x, float scale, boolean causal) {
        memoryBound(y, x);
    }

    @Override
    protected void softmaxBackwardKernel(MeshTensor dx, MeshTensor y, MeshTensor dy, float scale) {
        memoryBound(dx, y, dy);
    }

    @Override
    protected void activationKernel(MeshTensor out, MeshTensor x, Activation f) {
        memoryBound(out, x);
    }

    @Override
    protected void activationBackwardKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, Activation f) {
        memoryBound(dx, dy, x);
    }

    @Override
    protected void ropeKernel(MeshTensor out, MeshTensor x, RopeFrequencies frequencies, boolean inverse) {
        memoryBound(out, x);
    }

    @Override
    protected void binaryKernel(MeshTensor out, MeshTensor a, MeshTensor b, Binary op) {
        memoryBound(out, a, b);
    }

    @Override
    protected void scaleKernel(MeshTensor out, MeshTensor a, float s) {
        memoryBound(out, a);
    }

    @Override
    protected void axpyKernel(MeshTensor a, MeshTensor b, float alpha) {
        memoryBound(a, a, b);
    }

    @Override
    protected void sumRowsKernel(MeshTensor x, MeshTensor out, boolean accumulate) {
        memoryBound(x, out);
    }

    @Override
    protected void sumKernel(MeshTensor out, MeshTensor x, int dim) {
        memoryBound(out, x);
    }

    /** NaN (no values), after the queue has run the reduction. */
    @Override
    protected double sumSquaresKernel(MeshTensor x) {
        memoryBound(x);
        sub.synchronize();
        return Double.NaN;
    }

    @Override
    protected void repeatInterleaveKernel(MeshTensor out, MeshTensor x, int dim, int repeats) {
        memoryBound(out, x);
    }

    @Override
    protected void sumGroupsKernel(MeshTensor out, MeshTensor x, int dim, int groupSize) {
        memoryBound(out, x);
    }

    /**
     * A NaN sum over every target (ids are not stored), at once: the placeholder needs no wait, and a
     * wait here would idle the last stage's queue between each forward and its backward for as long as
     * the issuing thread takes to wake, which is the host's cost, not the modeled device's.
     */
    @Override
    protected LossOutput crossEntropyKernel(MeshTensor logits, MeshTensor targets, int ignoreIndex) {
        memoryBound(logits, targets);
        return new LossOutput(Double.NaN, targets.shape().numel());
    }

    @Override
    protected void crossEntropyBackwardKernel(MeshTensor dLogits, MeshTensor logits, MeshTensor targets,
                                              int ignoreIndex, float scale) {
        memoryBound(dLogits, logits, targets);
    }

    @Override
    protected void dropoutKernel(MeshTensor out, MeshTensor x, float p, long seed, long elementOffset) {
        memoryBound(out, x);
    }

    @Override
    protected void adamwKernel(MeshTensor param, MeshTensor grad, MeshTensor expAvg, MeshTensor expAvgSq,
                               AdamWParams p) {
        memoryBound(param, param, grad, expAvg, expAvg, expAvgSq, expAvgSq);
    }

    @Override
    protected void sgdKernel(MeshTensor param, MeshTensor grad, MeshTensor buf, SgdParams p) {
        memoryBound(param, param, grad, buf, buf);
    }

    // ---- collectives -----------------------------------------------------------------------------------

    @Override
    protected void allGatherKernel(MeshTensor out, MeshTensor x, int dim, int axis) {
        link((sub.shape().axisSize(axis) - 1) * (double) x.bytesPerDevice(), out);
    }

    @Override
    protected void reduceScatterKernel(MeshTensor out, MeshTensor x, int dim, int axis) {
        link((sub.shape().axisSize(axis) - 1) * (double) out.bytesPerDevice(), out);
    }

    @Override
    protected void allReduceKernel(MeshTensor out, MeshTensor x, int axis, ReduceOp op) {
        int n = sub.shape().axisSize(axis);
        link(2.0 * (n - 1) / n * x.bytesPerDevice(), out);
    }

    /** A socket's receive side: a tensor like {@code t} here (accounting only; thread-safe). */
    SimTensor allocateLike(SimTensor t) {
        return (SimTensor) allocate(t.shape(), t.layout(), t.dtype());
    }
}

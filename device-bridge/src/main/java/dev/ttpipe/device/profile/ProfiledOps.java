package dev.ttpipe.device.profile;

import dev.ttpipe.device.AdamWParams;
import dev.ttpipe.device.AttentionGrads;
import dev.ttpipe.device.AttentionOutput;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.NormOutput;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.ReduceOp;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.device.SgdParams;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.spi.MatmulDims;

import java.util.function.Supplier;

/**
 * {@link Ops} that times every call of the ops it wraps and records it in an {@link OpProfile} under
 * its kind (matmuls split into forward, backward-input, backward-weight and attention), with the
 * op's FLOPs (matmuls, attention) or the bytes it reads and writes (everything else, fp32 counted
 * as 4 bytes). Same thread-safety as the wrapped ops; the profile itself is single-threaded.
 */
final class ProfiledOps implements Ops {
    private final Ops ops;
    private final Submesh submesh;
    private final OpProfile profile;

    ProfiledOps(Ops ops, Submesh submesh, OpProfile profile) {
        this.ops = ops;
        this.submesh = submesh;
        this.profile = profile;
    }

    private <T> T timed(String kind, double flops, double bytes, Supplier<T> op) {
        long t0 = System.nanoTime();
        T r = op.get();
        profile.record(kind, System.nanoTime() - t0, flops, bytes);
        return r;
    }

    private void timed(String kind, double flops, double bytes, Runnable op) {
        long t0 = System.nanoTime();
        op.run();
        profile.record(kind, System.nanoTime() - t0, flops, bytes);
    }

    private static double b(Tensor... ts) {
        double s = 0;
        for (Tensor t : ts) if (t != null) s += t.localShape().numel() * 4.0;
        return s;
    }

    private static double b(Shape s) {
        return s.numel() * 4.0;
    }

    private static String matmulKind(Tensor a, boolean ta) {
        if (a.shape().rank() >= 4) return "attention matmuls (QK^T, PV, bwd)";
        return ta ? "matmul bwd weight (dy^T x)" : "matmul bwd input (dy W)";
    }

    private static double flops(Tensor a, boolean ta, Tensor b, boolean tb) {
        return MatmulDims.of(a.localShape(), ta, b.localShape(), tb).flops();
    }

    @Override
    public Submesh submesh() {
        return submesh;
    }

    @Override
    public Tensor fromHost(float[] data, Shape shape, Layout layout, DType dtype) {
        return timed("host transfers, alloc", 0, data.length * 4.0, () -> ops.fromHost(data, shape, layout, dtype));
    }

    @Override
    public Tensor fromHostInts(int[] data, Shape shape, Layout layout) {
        return timed("host transfers, alloc", 0, data.length * 4.0, () -> ops.fromHostInts(data, shape, layout));
    }

    @Override
    public Tensor fromHostLocal(float[][] pieces, Shape shape, Layout layout, DType dtype) {
        return timed("host transfers, alloc", 0, b(shape), () -> ops.fromHostLocal(pieces, shape, layout, dtype));
    }

    @Override
    public Tensor zeros(Shape shape, Layout layout, DType dtype) {
        return timed("host transfers, alloc", 0, b(shape), () -> ops.zeros(shape, layout, dtype));
    }

    @Override
    public Tensor full(Shape shape, Layout layout, DType dtype, float value) {
        return timed("host transfers, alloc", 0, b(shape), () -> ops.full(shape, layout, dtype, value));
    }

    @Override
    public Tensor copy(Tensor x) {
        return timed("copies, permutes", 0, 2 * b(x), () -> ops.copy(x));
    }

    @Override
    public void copyInto(Tensor dst, Tensor src) {
        timed("copies, permutes", 0, 2 * b(src), () -> ops.copyInto(dst, src));
    }

    @Override
    public Tensor typecast(Tensor x, DType dtype) {
        return timed("copies, permutes", 0, 2 * b(x), () -> ops.typecast(x, dtype));
    }

    @Override
    public Tensor reshape(Tensor x, Shape shape) {
        return ops.reshape(x, shape);                       // a view: nothing to time
    }

    @Override
    public Tensor adopt(Tensor t) {
        return timed("transport (adopt)", 0, b(t), () -> ops.adopt(t));
    }

    @Override
    public Tensor permute(Tensor x, int... dims) {
        return timed("copies, permutes", 0, 2 * b(x), () -> ops.permute(x, dims));
    }

    @Override
    public Tensor matmul(Tensor a, Tensor b, boolean transposeA, boolean transposeB) {
        return timed(matmulKind(a, transposeA), flops(a, transposeA, b, transposeB), 0,
                () -> ops.matmul(a, b, transposeA, transposeB));
    }

    @Override
    public void matmulInto(Tensor out, Tensor a, Tensor b, boolean transposeA, boolean transposeB, float alpha, float beta) {
        timed(matmulKind(a, transposeA), flops(a, transposeA, b, transposeB), 0,
                () -> ops.matmulInto(out, a, b, transposeA, transposeB, alpha, beta));
    }

    @Override
    public Tensor linear(Tensor x, Tensor w, Tensor bias) {
        return timed("matmul fwd (linear, + bias)", flops(x, false, w, true), 0, () -> ops.linear(x, w, bias));
    }

    @Override
    public AttentionOutput attention(Tensor q, Tensor k, Tensor v, float scale, boolean causal) {
        return timed("attention fwd (QK^T, softmax, PV)", attentionFlops(q, k, causal, 2), 0, () -> ops.attention(q, k, v, scale, causal));
    }

    @Override
    public AttentionGrads attentionBackward(Tensor q, Tensor k, Tensor v, AttentionOutput out, Tensor dO, float scale,
                                            boolean causal) {
        return timed("attention bwd", attentionFlops(q, k, causal, 4), 0,
                () -> ops.attentionBackward(q, k, v, out, dO, scale, causal));
    }

    /** {@code matmuls} products of [T, hd] x [hd, Tk] per (batch, head), only the unmasked half when causal. */
    private static double attentionFlops(Tensor q, Tensor k, boolean causal, int matmuls) {
        Shape s = q.localShape();
        int r = s.rank();
        double rows = s.numel() / s.dim(r - 1);
        double full = matmuls * 2.0 * rows * k.localShape().dim(r - 2) * s.dim(r - 1);
        return causal ? full / 2 : full;
    }

    @Override
    public Tensor embedding(Tensor ids, Tensor table) {
        return timed("embedding", 0, b(ids) * (1 + table.shape().last()), () -> ops.embedding(ids, table));
    }

    @Override
    public void embeddingBackward(Tensor ids, Tensor dOut, Tensor dTable, boolean accumulate) {
        timed("embedding", 0, b(ids, dOut) + b(dOut), () -> ops.embeddingBackward(ids, dOut, dTable, accumulate));
    }

    @Override
    public NormOutput layerNorm(Tensor x, Tensor gamma, Tensor beta, float eps) {
        return timed("layernorm fwd", 0, 2 * b(x), () -> ops.layerNorm(x, gamma, beta, eps));
    }

    @Override
    public Tensor layerNormBackwardInput(Tensor dy, Tensor x, Tensor gamma, Tensor mean, Tensor rstd) {
        return timed("layernorm bwd", 0, 3 * b(x), () -> ops.layerNormBackwardInput(dy, x, gamma, mean, rstd));
    }

    @Override
    public void layerNormBackwardWeight(Tensor dy, Tensor x, Tensor mean, Tensor rstd, Tensor dGamma, Tensor dBeta,
                                        boolean accumulate) {
        timed("layernorm bwd", 0, 2 * b(x), () -> ops.layerNormBackwardWeight(dy, x, mean, rstd, dGamma, dBeta, accumulate));
    }

    @Override
    public NormOutput rmsNorm(Tensor x, Tensor gamma, float eps) {
        return timed("rmsnorm fwd", 0, 2 * b(x), () -> ops.rmsNorm(x, gamma, eps));
    }

    @Override
    public Tensor rmsNormBackwardInput(Tensor dy, Tensor x, Tensor gamma, Tensor rstd) {
        return timed("rmsnorm bwd", 0, 3 * b(x), () -> ops.rmsNormBackwardInput(dy, x, gamma, rstd));
    }

    @Override
    public void rmsNormBackwardWeight(Tensor dy, Tensor x, Tensor rstd, Tensor dGamma, boolean accumulate) {
        timed("rmsnorm bwd", 0, 2 * b(x), () -> ops.rmsNormBackwardWeight(dy, x, rstd, dGamma, accumulate));
    }

    @Override
    public Tensor softmax(Tensor x, float scale, boolean causal) {
        return timed("attention softmax fwd", 0, 2 * b(x), () -> ops.softmax(x, scale, causal));
    }

    @Override
    public Tensor softmaxBackward(Tensor y, Tensor dy, float scale) {
        return timed("attention softmax bwd", 0, 3 * b(y), () -> ops.softmaxBackward(y, dy, scale));
    }

    @Override
    public Tensor gelu(Tensor x) {
        return timed("gelu/silu fwd", 0, 2 * b(x), () -> ops.gelu(x));
    }

    @Override
    public Tensor geluBackward(Tensor dy, Tensor x) {
        return timed("gelu/silu bwd", 0, 3 * b(x), () -> ops.geluBackward(dy, x));
    }

    @Override
    public Tensor silu(Tensor x) {
        return timed("gelu/silu fwd", 0, 2 * b(x), () -> ops.silu(x));
    }

    @Override
    public Tensor siluBackward(Tensor dy, Tensor x) {
        return timed("gelu/silu bwd", 0, 3 * b(x), () -> ops.siluBackward(dy, x));
    }

    @Override
    public Tensor rope(Tensor x, RopeFrequencies frequencies, boolean inverse) {
        return timed("rope", 0, 2 * b(x), () -> ops.rope(x, frequencies, inverse));
    }

    @Override
    public Tensor add(Tensor a, Tensor b) {
        return timed("elementwise (residual add, mul)", 0, b(a, b) + b(a), () -> ops.add(a, b));
    }

    @Override
    public Tensor mul(Tensor a, Tensor b) {
        return timed("elementwise (residual add, mul)", 0, b(a, b) + b(a), () -> ops.mul(a, b));
    }

    @Override
    public Tensor scale(Tensor a, float s) {
        return timed("elementwise (residual add, mul)", 0, 2 * b(a), () -> ops.scale(a, s));
    }

    @Override
    public void addInPlace(Tensor a, Tensor b, float alpha) {
        timed("elementwise (residual add, mul)", 0, b(a, b) + b(a), () -> ops.addInPlace(a, b, alpha));
    }

    @Override
    public void scaleInPlace(Tensor a, float s) {
        timed("elementwise (residual add, mul)", 0, 2 * b(a), () -> ops.scaleInPlace(a, s));
    }

    @Override
    public void sumRows(Tensor x, Tensor out, boolean accumulate) {
        timed("bias grads (sum of rows)", 0, b(x), () -> ops.sumRows(x, out, accumulate));
    }

    @Override
    public Tensor sum(Tensor x, int dim, boolean keepDim) {
        return timed("reductions", 0, b(x), () -> ops.sum(x, dim, keepDim));
    }

    @Override
    public double sumSquares(Tensor x) {
        return timed("grad norm (sum of squares)", 0, b(x), () -> ops.sumSquares(x));
    }

    @Override
    public Tensor repeatInterleave(Tensor x, int dim, int repeats) {
        return timed("copies, permutes", 0, b(x) * (1 + repeats), () -> ops.repeatInterleave(x, dim, repeats));
    }

    @Override
    public Tensor sumGroups(Tensor x, int dim, int groupSize) {
        return timed("copies, permutes", 0, b(x) * (1 + 1.0 / groupSize), () -> ops.sumGroups(x, dim, groupSize));
    }

    @Override
    public LossOutput crossEntropy(Tensor logits, Tensor targets, int ignoreIndex) {
        return timed("loss (cross-entropy)", 0, b(logits), () -> ops.crossEntropy(logits, targets, ignoreIndex));
    }

    @Override
    public Tensor crossEntropyBackward(Tensor logits, Tensor targets, int ignoreIndex, float scale) {
        return timed("loss (cross-entropy)", 0, 2 * b(logits), () -> ops.crossEntropyBackward(logits, targets, ignoreIndex, scale));
    }

    @Override
    public Tensor dropout(Tensor x, float p, long seed, long elementOffset) {
        return timed("dropout", 0, 2 * b(x), () -> ops.dropout(x, p, seed, elementOffset));
    }

    @Override
    public Tensor dropoutBackward(Tensor dy, float p, long seed, long elementOffset) {
        return timed("dropout", 0, 2 * b(dy), () -> ops.dropoutBackward(dy, p, seed, elementOffset));
    }

    @Override
    public void adamw(Tensor param, Tensor grad, Tensor expAvg, Tensor expAvgSq, AdamWParams p) {
        timed("optimizer", 0, 7 * b(param), () -> ops.adamw(param, grad, expAvg, expAvgSq, p));
    }

    @Override
    public void sgd(Tensor param, Tensor grad, Tensor momentumBuffer, SgdParams p) {
        timed("optimizer", 0, 3 * b(param), () -> ops.sgd(param, grad, momentumBuffer, p));
    }

    @Override
    public Tensor allGather(Tensor x, int dim, int axis) {
        return timed("collectives", 0, 2 * b(x), () -> ops.allGather(x, dim, axis));
    }

    @Override
    public Tensor reduceScatter(Tensor x, int dim, int axis) {
        return timed("collectives", 0, 2 * b(x), () -> ops.reduceScatter(x, dim, axis));
    }

    @Override
    public Tensor allReduce(Tensor x, int axis, ReduceOp op) {
        return timed("collectives", 0, 2 * b(x), () -> ops.allReduce(x, axis, op));
    }

    @Override
    public void allReduceInPlace(Tensor x, int axis, ReduceOp op) {
        timed("collectives", 0, 2 * b(x), () -> ops.allReduceInPlace(x, axis, op));
    }
}

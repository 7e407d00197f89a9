package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.AdamWParams;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.Placement;
import dev.ttpipe.device.ReduceOp;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.device.SgdParams;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.spi.CheckedOps;
import dev.ttpipe.device.spi.DeviceMemory;
import dev.ttpipe.device.spi.MeshTensor;
import dev.ttpipe.device.spi.Sharding;

import java.util.List;

import static dev.ttpipe.device.ttnn.Bridge.check;

/**
 * The ttnn backend's kernels: each is one call into the bridge library on the tensors' native
 * handles (arguments were checked by {@link CheckedOps}, the library checks them again and rejects
 * rather than crashes). Where a kernel needs to know where a device's piece sits in the logical
 * tensor (host transfers, vocab-parallel embedding, causal softmax or rope over a sharded
 * sequence, dropout, counting replicas once) it passes the layout as one placement code per mesh
 * axis ({@link #code}). Issued by one thread at a time (the submesh's), like every backend's ops:
 * the scratch out-arrays are reused.
 */
final class TtnnOps extends CheckedOps {
    private final TtnnSubmesh sub;
    private final TtnnMeshDevice mesh;
    private final List<DeviceMemory> memories;
    private final int n;
    private final long[] handleOut = new long[1];
    private final double[] doubleOut = new double[1];
    private final long[] longOut = new long[1];

    TtnnOps(TtnnSubmesh sub) {
        super(sub);
        this.sub = sub;
        this.mesh = sub.ttnnMesh();
        this.memories = sub.accounting();
        this.n = sub.shape().size();
    }

    /** TTPIPE_REPLICATE (-1), TTPIPE_PARTIAL (-2) or the sharded dim. */
    static int code(Placement p) {
        if (p instanceof Placement.Shard s) return s.dim();
        return p instanceof Placement.Partial ? -2 : -1;
    }

    /** TTPIPE_FP32, TTPIPE_BF16, TTPIPE_INT32. */
    static int code(DType d) {
        return switch (d) {
            case FP32 -> 0;
            case BF16 -> 1;
            case INT32 -> 2;
        };
    }

    private static long h(MeshTensor t) {
        return t == null ? 0L : ((TtnnTensor) t).handle();
    }

    private static int p0(MeshTensor t) {
        return code(t.layout().axis0());
    }

    private static int p1(MeshTensor t) {
        return code(t.layout().axis1());
    }

    private static int flag(boolean b) {
        return b ? 1 : 0;
    }

    // ---- memory ------------------------------------------------------------------------------------

    @Override
    protected boolean isOwnTensor(Tensor t) {
        return t instanceof TtnnTensor;
    }

    @Override
    protected MeshTensor allocate(Shape shape, Layout layout, DType dtype) {
        mesh.requireOpen();
        int[] local = Sharding.localShape(shape, layout, sub.shape()).toArray();
        long numel = 1;
        for (int d : local) numel *= d;
        long bytes = numel * dtype.bytes();
        DeviceMemory.allocateAll(memories, bytes);
        try {
            check(NativeBridge.ttpipe_tensor_alloc(sub.handle(), code(dtype), local.length, local, handleOut),
                    "ttpipe_tensor_alloc");
        } catch (RuntimeException e) {
            DeviceMemory.freeAll(memories, bytes);
            throw e;
        }
        return new TtnnTensor(sub, shape, layout, dtype, new TtnnStorage(memories, bytes), handleOut[0]);
    }

    @Override
    protected MeshTensor view(MeshTensor base, Shape shape, Layout layout) {
        int[] local = Sharding.localShape(shape, layout, sub.shape()).toArray();
        base.storage().retain();
        try {
            check(NativeBridge.ttpipe_tensor_view(h(base), local.length, local, handleOut), "ttpipe_tensor_view",
                    "reshape");
        } catch (RuntimeException e) {
            base.storage().release();
            throw e;
        }
        return new TtnnTensor(sub, shape, layout, base.dtype(), (TtnnStorage) base.storage(), handleOut[0]);
    }

    // ---- creation and movement ---------------------------------------------------------------------

    @Override
    protected void writeHostKernel(MeshTensor t, float[] data) {
        int[] dims = t.shape().toArray();
        check(NativeBridge.ttpipe_tensor_write(h(t), dims.length, dims, p0(t), p1(t), data, data.length),
                "ttpipe_tensor_write", "fromHost");
    }

    @Override
    protected void writeHostIntsKernel(MeshTensor t, int[] data) {
        int[] dims = t.shape().toArray();
        check(NativeBridge.ttpipe_tensor_write_ints(h(t), dims.length, dims, p0(t), p1(t), data, data.length),
                "ttpipe_tensor_write_ints", "fromHostInts");
    }

    @Override
    protected void writeLocalKernel(MeshTensor t, float[][] pieces) {
        for (int d = 0; d < n; d++) {
            check(NativeBridge.ttpipe_tensor_write_local(h(t), d, pieces[d], pieces[d].length),
                    "ttpipe_tensor_write_local", "fromHostLocal");
        }
    }

    @Override
    protected void fillKernel(MeshTensor t, float value) {
        check(NativeBridge.ttpipe_tensor_fill(h(t), value), "ttpipe_tensor_fill");
    }

    @Override
    protected void copyKernel(MeshTensor dst, MeshTensor src) {
        check(NativeBridge.ttpipe_tensor_copy(h(dst), h(src)), "ttpipe_tensor_copy");
    }

    @Override
    protected void permuteKernel(MeshTensor out, MeshTensor x, int[] dims) {
        check(NativeBridge.ttpipe_permute(h(out), h(x), dims.length, dims), "ttpipe_permute", "permute");
    }

    /** A device-to-device copy onto this submesh (the devices are distinct), then {@code t} is closed. */
    @Override
    protected MeshTensor adoptKernel(MeshTensor t) {
        MeshTensor copy = allocate(t.shape(), t.layout(), t.dtype());
        try {
            check(NativeBridge.ttpipe_tensor_copy(h(copy), h(t)), "ttpipe_tensor_copy", "adopt");
        } catch (RuntimeException e) {
            copy.close();
            throw e;
        }
        t.close();
        return copy;
    }

    // ---- matmul ------------------------------------------------------------------------------------

    @Override
    protected void matmulKernel(MeshTensor out, MeshTensor a, MeshTensor b, boolean transposeA, boolean transposeB,
                                float alpha, float beta) {
        check(NativeBridge.ttpipe_matmul(h(out), h(a), h(b), flag(transposeA), flag(transposeB), alpha, beta),
                "ttpipe_matmul");
    }

    // ---- embedding ---------------------------------------------------------------------------------

    @Override
    protected void embeddingKernel(MeshTensor out, MeshTensor ids, MeshTensor table) {
        check(NativeBridge.ttpipe_embedding(h(out), h(ids), h(table), p0(table), p1(table)), "ttpipe_embedding",
                "embedding");
    }

    @Override
    protected void embeddingBackwardKernel(MeshTensor ids, MeshTensor dOut, MeshTensor dTable, boolean accumulate) {
        check(NativeBridge.ttpipe_embedding_backward(h(ids), h(dOut), h(dTable), p0(dTable), p1(dTable),
                flag(accumulate)), "ttpipe_embedding_backward", "embeddingBackward");
    }

    // ---- normalisation -----------------------------------------------------------------------------

    @Override
    protected void layerNormKernel(MeshTensor y, MeshTensor mean, MeshTensor rstd, MeshTensor x, MeshTensor gamma,
                                   MeshTensor beta, float eps) {
        check(NativeBridge.ttpipe_layernorm(h(y), h(mean), h(rstd), h(x), h(gamma), h(beta), eps), "ttpipe_layernorm",
                "layerNorm");
    }

    @Override
    protected void layerNormBackwardInputKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, MeshTensor gamma,
                                                MeshTensor mean, MeshTensor rstd) {
        check(NativeBridge.ttpipe_layernorm_backward_input(h(dx), h(dy), h(x), h(gamma), h(mean), h(rstd)),
                "ttpipe_layernorm_backward_input", "layerNormBackwardInput");
    }

    @Override
    protected void layerNormBackwardWeightKernel(MeshTensor dy, MeshTensor x, MeshTensor mean, MeshTensor rstd,
                                                 MeshTensor dGamma, MeshTensor dBeta, boolean accumulate) {
        check(NativeBridge.ttpipe_layernorm_backward_weight(h(dy), h(x), h(mean), h(rstd), h(dGamma), h(dBeta),
                flag(accumulate)), "ttpipe_layernorm_backward_weight", "layerNormBackwardWeight");
    }

    @Override
    protected void rmsNormKernel(MeshTensor y, MeshTensor rstd, MeshTensor x, MeshTensor gamma, float eps) {
        check(NativeBridge.ttpipe_rmsnorm(h(y), h(rstd), h(x), h(gamma), eps), "ttpipe_rmsnorm", "rmsNorm");
    }

    @Override
    protected void rmsNormBackwardInputKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, MeshTensor gamma,
                                              MeshTensor rstd) {
        check(NativeBridge.ttpipe_rmsnorm_backward_input(h(dx), h(dy), h(x), h(gamma), h(rstd)),
                "ttpipe_rmsnorm_backward_input", "rmsNormBackwardInput");
    }

    @Override
    protected void rmsNormBackwardWeightKernel(MeshTensor dy, MeshTensor x, MeshTensor rstd, MeshTensor dGamma,
                                               boolean accumulate) {
        check(NativeBridge.ttpipe_rmsnorm_backward_weight(h(dy), h(x), h(rstd), h(dGamma), flag(accumulate)),
                "ttpipe_rmsnorm_backward_weight", "rmsNormBackwardWeight");
    }

    // ---- softmax, activations, rotary ----------------------------------------------------------------

    @Override
    protected void softmaxKernel(MeshTensor y, MeshTensor x, float scale, boolean causal) {
        check(NativeBridge.ttpipe_softmax(h(y), h(x), scale, flag(causal), p0(x), p1(x)), "ttpipe_softmax", "softmax");
    }

    @Override
    protected void softmaxBackwardKernel(MeshTensor dx, MeshTensor y, MeshTensor dy, float scale) {
        check(NativeBridge.ttpipe_softmax_backward(h(dx), h(y), h(dy), scale), "ttpipe_softmax_backward",
                "softmaxBackward");
    }

    @Override
    protected void activationKernel(MeshTensor out, MeshTensor x, Activation f) {
        if (f == Activation.GELU) check(NativeBridge.ttpipe_gelu(h(out), h(x)), "ttpipe_gelu", "gelu");
        else check(NativeBridge.ttpipe_silu(h(out), h(x)), "ttpipe_silu", "silu");
    }

    @Override
    protected void activationBackwardKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, Activation f) {
        if (f == Activation.GELU) {
            check(NativeBridge.ttpipe_gelu_backward(h(dx), h(dy), h(x)), "ttpipe_gelu_backward", "geluBackward");
        } else {
            check(NativeBridge.ttpipe_silu_backward(h(dx), h(dy), h(x)), "ttpipe_silu_backward", "siluBackward");
        }
    }

    @Override
    protected void ropeKernel(MeshTensor out, MeshTensor x, RopeFrequencies frequencies, boolean inverse) {
        if (frequencies.scaled()) {
            throw new DeviceException("rope: scaled frequencies (" + frequencies.scaling() + ") are not supported by the ttnn"
                    + " bridge, whose ttpipe_rope takes theta only; use the cpu backend for rope_scaling");
        }
        check(NativeBridge.ttpipe_rope(h(out), h(x), frequencies.theta(), flag(inverse), p0(x), p1(x)), "ttpipe_rope", "rope");
    }

    // ---- elementwise and reductions ------------------------------------------------------------------

    @Override
    protected void binaryKernel(MeshTensor out, MeshTensor a, MeshTensor b, Binary op) {
        if (op == Binary.ADD) check(NativeBridge.ttpipe_add(h(out), h(a), h(b)), "ttpipe_add");
        else check(NativeBridge.ttpipe_mul(h(out), h(a), h(b)), "ttpipe_mul");
    }

    @Override
    protected void scaleKernel(MeshTensor out, MeshTensor a, float s) {
        check(NativeBridge.ttpipe_scale(h(out), h(a), s), "ttpipe_scale");
    }

    @Override
    protected void axpyKernel(MeshTensor a, MeshTensor b, float alpha) {
        check(NativeBridge.ttpipe_add_scaled(h(a), h(b), alpha), "ttpipe_add_scaled", "addInPlace");
    }

    @Override
    protected void sumRowsKernel(MeshTensor x, MeshTensor out, boolean accumulate) {
        check(NativeBridge.ttpipe_sum_rows(h(x), h(out), flag(accumulate)), "ttpipe_sum_rows", "sumRows");
    }

    @Override
    protected void sumKernel(MeshTensor out, MeshTensor x, int dim) {
        check(NativeBridge.ttpipe_sum(h(out), h(x), dim), "ttpipe_sum", "sum");
    }

    @Override
    protected double sumSquaresKernel(MeshTensor x) {
        check(NativeBridge.ttpipe_sum_squares(h(x), p0(x), p1(x), doubleOut), "ttpipe_sum_squares", "sumSquares");
        return doubleOut[0];
    }

    @Override
    protected void repeatInterleaveKernel(MeshTensor out, MeshTensor x, int dim, int repeats) {
        check(NativeBridge.ttpipe_repeat_interleave(h(out), h(x), dim, repeats), "ttpipe_repeat_interleave",
                "repeatInterleave");
    }

    @Override
    protected void sumGroupsKernel(MeshTensor out, MeshTensor x, int dim, int groupSize) {
        check(NativeBridge.ttpipe_sum_groups(h(out), h(x), dim, groupSize), "ttpipe_sum_groups", "sumGroups");
    }

    // ---- loss ----------------------------------------------------------------------------------------

    @Override
    protected LossOutput crossEntropyKernel(MeshTensor logits, MeshTensor targets, int ignoreIndex) {
        check(NativeBridge.ttpipe_cross_entropy(h(logits), h(targets), ignoreIndex, p0(logits), p1(logits), doubleOut,
                longOut), "ttpipe_cross_entropy", "crossEntropy");
        return new LossOutput(doubleOut[0], longOut[0]);
    }

    @Override
    protected void crossEntropyBackwardKernel(MeshTensor dLogits, MeshTensor logits, MeshTensor targets,
                                              int ignoreIndex, float scale) {
        check(NativeBridge.ttpipe_cross_entropy_backward(h(dLogits), h(logits), h(targets), ignoreIndex, scale),
                "ttpipe_cross_entropy_backward", "crossEntropyBackward");
    }

    // ---- dropout ---------------------------------------------------------------------------------------

    @Override
    protected void dropoutKernel(MeshTensor out, MeshTensor x, float p, long seed, long elementOffset) {
        int[] dims = x.shape().toArray();
        check(NativeBridge.ttpipe_dropout(h(out), h(x), p, seed, elementOffset, dims.length, dims, p0(x), p1(x)),
                "ttpipe_dropout", "dropout");
    }

    // ---- optimizers ------------------------------------------------------------------------------------

    @Override
    protected void adamwKernel(MeshTensor param, MeshTensor grad, MeshTensor expAvg, MeshTensor expAvgSq,
                               AdamWParams p) {
        check(NativeBridge.ttpipe_adamw(h(param), h(grad), h(expAvg), h(expAvgSq), p.lr(), p.beta1(), p.beta2(),
                p.eps(), p.weightDecay(), p.step(), p.gradScale()), "ttpipe_adamw", "adamw");
    }

    @Override
    protected void sgdKernel(MeshTensor param, MeshTensor grad, MeshTensor buf, SgdParams p) {
        check(NativeBridge.ttpipe_sgd(h(param), h(grad), h(buf), p.lr(), p.momentum(), p.dampening(), p.weightDecay(),
                flag(p.nesterov()), p.step(), p.gradScale()), "ttpipe_sgd", "sgd");
    }

    // ---- collectives -------------------------------------------------------------------------------------

    @Override
    protected void allGatherKernel(MeshTensor out, MeshTensor x, int dim, int axis) {
        check(NativeBridge.ttpipe_all_gather(h(out), h(x), dim, axis), "ttpipe_all_gather", "allGather");
    }

    @Override
    protected void reduceScatterKernel(MeshTensor out, MeshTensor x, int dim, int axis) {
        check(NativeBridge.ttpipe_reduce_scatter(h(out), h(x), dim, axis), "ttpipe_reduce_scatter", "reduceScatter");
    }

    @Override
    protected void allReduceKernel(MeshTensor out, MeshTensor x, int axis, ReduceOp op) {
        check(NativeBridge.ttpipe_all_reduce(h(out), h(x), axis, op == ReduceOp.MEAN ? 1 : 0), "ttpipe_all_reduce",
                "allReduce");
    }

    /** Wraps a native tensor received on this submesh (a socket's receive side); its charge was taken at send. */
    TtnnTensor adoptReceived(long handle, Shape shape, Layout layout, DType dtype, long bytes) {
        return new TtnnTensor(sub, shape, layout, dtype, new TtnnStorage(memories, bytes), handle);
    }
}

package dev.ttpipe.device.cpu;

import dev.ttpipe.device.AdamWParams;
import dev.ttpipe.device.AttentionGrads;
import dev.ttpipe.device.AttentionOutput;
import dev.ttpipe.device.BFloat16;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.ReduceOp;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.device.SgdParams;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.spi.CheckedOps;
import dev.ttpipe.device.spi.DeviceMemory;
import dev.ttpipe.device.spi.LocalPiecesOps;
import dev.ttpipe.device.spi.MatmulDims;
import dev.ttpipe.device.spi.MeshTensor;
import dev.ttpipe.device.spi.Sharding;

import java.nio.ByteBuffer;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.util.List;
import java.util.function.IntConsumer;
import java.util.function.Supplier;

/**
 * The cpu backend's kernels: every op runs on each emulated device's pieces in turn (SPMD),
 * each kernel multi-threaded on the mesh's pool. Arguments were checked by {@link CheckedOps}.
 * BF16 pieces are staged through fp32 scratch ({@link Fp32Staging}).
 */
final class CpuOps extends CheckedOps implements LocalPiecesOps {
    private final CpuSubmesh sub;
    private final CpuMeshDevice mesh;
    private final Parallel par;
    private final MeshShape shape;
    private final int n;
    private final List<DeviceMemory> memories;
    private final Fp32Staging staging;

    CpuOps(CpuSubmesh sub) {
        super(sub);
        this.sub = sub;
        this.mesh = sub.cpuMesh();
        this.par = mesh.parallel();
        this.shape = sub.shape();
        this.n = shape.size();
        this.memories = sub.accounting();
        this.staging = new Fp32Staging(par);
    }

    // ---- memory ------------------------------------------------------------------------------------

    @Override
    protected boolean isOwnTensor(Tensor t) {
        return t instanceof CpuTensor;
    }

    @Override
    protected MeshTensor allocate(Shape s, Layout layout, DType dtype) {
        mesh.requireOpen();
        long bytes = Sharding.localShape(s, layout, shape).numel() * dtype.bytes();
        if (bytes > NativeAllocator.MAX_BYTES) {
            throw new DeviceException("allocate: a piece of " + s + " " + dtype + " with layout " + layout + " needs "
                    + bytes + " bytes per device, more than the cpu backend's " + NativeAllocator.MAX_BYTES
                    + "; shard it over more devices");
        }
        DeviceMemory.allocateAll(memories, bytes);
        CpuDevice[] devices = sub.cpuDevices();
        NativeBuffer[] pieces = new NativeBuffer[n];
        try {
            for (int d = 0; d < n; d++) pieces[d] = devices[d].allocator().take(bytes);
        } catch (RuntimeException | Error e) {
            for (int d = 0; d < n && pieces[d] != null; d++) devices[d].allocator().give(pieces[d]);
            DeviceMemory.freeAll(memories, bytes);
            throw e;
        }
        return new CpuTensor(sub, s, layout, dtype, new CpuStorage(mesh, devices, memories, bytes, pieces));
    }

    @Override
    protected MeshTensor view(MeshTensor base, Shape s, Layout layout) {
        base.storage().retain();
        return new CpuTensor(sub, s, layout, base.dtype(), (CpuStorage) base.storage());
    }

    /**
     * Runs device work: keeps the mesh from freeing its memory meanwhile (a concurrent close waits),
     * then converts staged BF16 results back.
     */
    private void run(Runnable work) {
        mesh.enter();
        try {
            work.run();
        } finally {
            try {
                staging.finish();
            } finally {
                mesh.exit();
            }
        }
    }

    /** {@link #run} for work with a result. */
    private <T> T call(Supplier<T> work) {
        mesh.enter();
        try {
            return work.get();
        } finally {
            try {
                staging.finish();
            } finally {
                mesh.exit();
            }
        }
    }

    /** Runs {@code body} for every device (see {@link #run}). */
    private void each(IntConsumer body) {
        run(() -> {
            for (int d = 0; d < n; d++) body.accept(d);
        });
    }

    /** Device d's piece of t, raw (either dtype), for {@link DirectKernels}. */
    private static DirectKernels.Arr arr(MeshTensor t, int d) {
        return DirectKernels.Arr.of((CpuTensor) t, d);
    }

    /** Device d's piece of t, raw: an FP32 tensor's, or a BF16 one's for a kernel that reads bf16 itself. */
    private static NativeBuffer piece(MeshTensor t, int d) {
        return ((CpuTensor) t).piece(d);
    }

    /** Whether every tensor given (nulls skipped) is FP32. */
    private static boolean fp32(MeshTensor... ts) {
        for (MeshTensor t : ts) if (t != null && t.dtype() != DType.FP32) return false;
        return true;
    }

    private FloatBuffer in(MeshTensor t, int d) {
        return staging.read((CpuTensor) t, d).floats;
    }

    private FloatBuffer out(MeshTensor t, int d) {
        return staging.write((CpuTensor) t, d).floats;
    }

    private FloatBuffer update(MeshTensor t, int d) {
        return staging.update((CpuTensor) t, d).floats;
    }

    private static IntBuffer ints(MeshTensor t, int d) {
        return ((CpuTensor) t).piece(d).ints;
    }

    private static int local(MeshTensor t) {
        return (int) t.localNumel();
    }

    private static int rows(MeshTensor t) {
        return (int) t.localShape().rows();
    }

    private int offset(MeshTensor t, int d, int dim) {
        return Sharding.offset(t.localShape(), t.layout(), shape, d, dim);
    }

    // ---- creation and movement ---------------------------------------------------------------------

    @Override
    protected void writeHostKernel(MeshTensor t, float[] data) {
        run(() -> HostCopy.write((CpuTensor) t, data));
    }

    @Override
    protected void writeHostIntsKernel(MeshTensor t, int[] data) {
        run(() -> HostCopy.writeInts((CpuTensor) t, data));
    }

    @Override
    protected void writeLocalKernel(MeshTensor t, float[][] pieces) {
        run(() -> HostCopy.writeLocal((CpuTensor) t, pieces));
    }

    @Override
    protected void fillKernel(MeshTensor t, float value) {
        CpuTensor c = (CpuTensor) t;
        int len = local(t);
        each(d -> {
            NativeBuffer b = c.piece(d);
            switch (t.dtype()) {
                case FP32 -> Elementwise.fill(par, b.floats, len, value);
                case BF16 -> {
                    short h = BFloat16.fromFloat(value);
                    for (int i = 0; i < len; i++) b.shorts.put(i, h);
                }
                case INT32 -> {
                    for (int i = 0; i < len; i++) b.ints.put(i, (int) value);
                }
            }
        });
    }

    @Override
    protected void copyKernel(MeshTensor dst, MeshTensor src) {
        CpuTensor o = (CpuTensor) dst;
        CpuTensor x = (CpuTensor) src;
        each(d -> Convert.copy(par, o.piece(d), o.dtype(), x.piece(d), x.dtype(), local(x)));
    }

    @Override
    protected void permuteKernel(MeshTensor out, MeshTensor x, int[] dims) {
        each(d -> Permute.permute(par, ((CpuTensor) out).piece(d), ((CpuTensor) x).piece(d), x.localShape().toArray(),
                dims, x.dtype().bytes()));
    }

    // ---- matmul ------------------------------------------------------------------------------------

    @Override
    protected void matmulKernel(MeshTensor out, MeshTensor a, MeshTensor b, boolean ta, boolean tb, float alpha,
                                float beta) {
        MatmulDims md = MatmulDims.of(a.localShape(), ta, b.localShape(), tb);
        int m = md.m();
        int nn = md.n();
        int k = md.k();
        int lda = ta ? m : k;
        int ldb = tb ? k : nn;
        if (a.dtype() == DType.BF16 || b.dtype() == DType.BF16) {
            matmulBf16Kernel(out, a, b, ta, tb, alpha, beta, md);
            return;
        }
        Gemm gemm = mesh.gemm();
        each(d -> {
            NativeBuffer av = staging.read((CpuTensor) a, d);
            NativeBuffer bv = staging.read((CpuTensor) b, d);
            NativeBuffer cv = beta == 0f ? staging.write((CpuTensor) out, d) : staging.update((CpuTensor) out, d);
            if (!md.batchedB() && !ta) {
                // [batch * m, k] @ [k, n]: one call
                gemm.sgemm(false, tb, md.batch() * m, nn, k, alpha, av, 0, lda, bv, 0, ldb, beta, cv, 0, nn);
                return;
            }
            for (int i = 0; i < md.batch(); i++) {
                gemm.sgemm(ta, tb, m, nn, k, alpha, av, i * m * k, lda, bv, md.batchedB() ? i * k * nn : 0, ldb,
                        beta, cv, i * m * nn, nn);
            }
        });
    }

    /**
     * With a BF16 operand the bias is added to the fp32 sums before they are rounded to out's dtype (once, where a
     * matmul then an add would round twice); otherwise the matmul, then the add.
     */
    @Override
    protected void linearKernel(MeshTensor out, MeshTensor x, MeshTensor w, MeshTensor bias) {
        if (bias == null || (x.dtype() != DType.BF16 && w.dtype() != DType.BF16)) {
            super.linearKernel(out, x, w, bias);
            return;
        }
        matmulBf16Kernel(out, x, w, false, true, 1f, 0f, MatmulDims.of(x.localShape(), false, w.localShape(), true), bias);
    }

    private void matmulBf16Kernel(MeshTensor out, MeshTensor a, MeshTensor b, boolean ta, boolean tb, float alpha,
                                  float beta, MatmulDims md) {
        matmulBf16Kernel(out, a, b, ta, tb, alpha, beta, md, null);
    }

    /**
     * A matmul with a BF16 operand multiplies in bf16 ({@link Bf16Gemm}): the other operand, if FP32, is
     * rounded to bf16; products are summed in fp32, {@code bias} (if any) added to each row, and the result stored
     * in {@code out}'s dtype.
     */
    private void matmulBf16Kernel(MeshTensor out, MeshTensor a, MeshTensor b, boolean ta, boolean tb, float alpha,
                                  float beta, MatmulDims md, MeshTensor bias) {
        int m = md.m();
        int nn = md.n();
        int k = md.k();
        int lda = ta ? m : k;
        int ldb = tb ? k : nn;
        Bf16Gemm gemm = mesh.bf16Gemm();
        boolean packed = gemm.packedOperands();
        boolean toBf16 = out.dtype() == DType.BF16;
        each(d -> {
            NativeBuffer av = staging.bf16Operand((CpuTensor) a, d, packed);
            NativeBuffer bv = staging.bf16Operand((CpuTensor) b, d, packed);
            NativeBuffer biasv = bias == null ? null : staging.read((CpuTensor) bias, d);
            int calls = !md.batchedB() && !ta ? 1 : md.batch();
            int rows = calls == 1 ? md.batch() * m : m;       // [batch * m, k] @ [k, n] in one call when B is shared
            if (toBf16) {
                // A BF16 result: each tile's fp32 sums (plus the bias) rounded to bf16 as soon as the tile is done
                CpuTensor o = (CpuTensor) out;
                for (int i = 0; i < calls; i++) {
                    gemm.gemmToBf16(ta, tb, rows, nn, k, alpha, av, i * m * k, lda, bv, md.batchedB() ? i * k * nn : 0, ldb,
                            beta, o.piece(d), i * m * nn, nn, biasv, o.device(d).allocator());
                }
                return;
            }
            NativeBuffer cv = beta == 0f ? staging.write((CpuTensor) out, d) : staging.update((CpuTensor) out, d);
            for (int i = 0; i < calls; i++) {
                gemm.gemm(ta, tb, rows, nn, k, alpha, av, i * m * k, lda, bv, md.batchedB() ? i * k * nn : 0, ldb,
                        beta, cv, i * m * nn, nn);
            }
            if (biasv != null) {
                Elementwise.binary(par, cv.floats, cv.floats, biasv.floats, local(out), local(bias), false);
            }
        });
    }

    // ---- embedding ---------------------------------------------------------------------------------

    @Override
    protected void embeddingKernel(MeshTensor out, MeshTensor ids, MeshTensor table) {
        int count = local(ids);
        int dim = table.localShape().dim(1);
        run(() -> {
            checkIds("embedding", ids, table.shape().dim(0), Integer.MIN_VALUE);
            for (int d = 0; d < n; d++) {
                Embedding.forward(par, out(out, d), ints(ids, d), in(table, d), count, dim, offset(table, d, 0),
                        table.localShape().dim(0));
            }
        });
    }

    @Override
    protected void embeddingBackwardKernel(MeshTensor ids, MeshTensor dOut, MeshTensor dTable, boolean accumulate) {
        int count = local(ids);
        int dim = dTable.localShape().dim(1);
        run(() -> {
            checkIds("embeddingBackward", ids, dTable.shape().dim(0), Integer.MIN_VALUE);
            for (int d = 0; d < n; d++) {
                Embedding.backward(par, ints(ids, d), in(dOut, d), accumulate ? update(dTable, d) : out(dTable, d),
                        count, dim, offset(dTable, d, 0), dTable.localShape().dim(0), accumulate);
            }
        });
    }

    /** Every id (other than {@code ignore}) must lie in [0, v): checked on every device before any write. */
    private void checkIds(String op, MeshTensor ids, int v, int ignore) {
        for (int d = 0; d < n; d++) {
            IntBuffer b = ints(ids, d);
            int len = local(ids);
            for (int i = 0; i < len; i++) {
                int id = b.get(i);
                if ((id < 0 || id >= v) && id != ignore) idOutOfRange(op, ids, d, i, id, v, ignore);
            }
        }
    }

    private void idOutOfRange(String op, MeshTensor ids, int d, int i, int id, int v, int ignore) {
        LocalPiece lp = new LocalPiece(ids.shape(), ids.localShape(), ids.layout(), shape, d);
        int len = Math.max(1, lp.rowLength());
        long position = lp.globalIndex(i / len) + i % len;
        String what = op.startsWith("crossEntropy") ? "target" : "id";
        throw new DeviceException(op + ": " + what + " " + id + " at position " + position + " of " + ids.shape()
                + " is outside [0, " + v + ")" + (ignore == Integer.MIN_VALUE ? "" : " and is not the ignore index "
                + ignore));
    }

    // ---- normalisation -----------------------------------------------------------------------------

    @Override
    protected void layerNormKernel(MeshTensor y, MeshTensor mean, MeshTensor rstd, MeshTensor x, MeshTensor gamma,
                                   MeshTensor beta, float eps) {
        int r = rows(x);
        int dim = x.localShape().last();
        if (DirectKernels.applies(y.dtype(), x.dtype()) && fp32(mean, rstd, gamma, beta)) {
            each(d -> DirectKernels.layerNorm(par, arr(y, d), piece(mean, d), piece(rstd, d), arr(x, d), piece(gamma, d),
                    beta == null ? null : piece(beta, d), r, dim, eps));
            return;
        }
        each(d -> Norms.layerNorm(par, out(y, d), out(mean, d), out(rstd, d), in(x, d), in(gamma, d),
                beta == null ? null : in(beta, d), r, dim, eps));
    }

    @Override
    protected void layerNormBackwardInputKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, MeshTensor gamma,
                                                MeshTensor mean, MeshTensor rstd) {
        int r = rows(x);
        int dim = x.localShape().last();
        if (DirectKernels.applies(dx.dtype(), dy.dtype(), x.dtype()) && fp32(gamma, mean, rstd)) {
            each(d -> DirectKernels.layerNormBackwardInput(par, arr(dx, d), arr(dy, d), arr(x, d), piece(gamma, d),
                    piece(mean, d), piece(rstd, d), r, dim));
            return;
        }
        each(d -> Norms.layerNormBackwardInput(par, out(dx, d), in(dy, d), in(x, d), in(gamma, d), in(mean, d),
                in(rstd, d), r, dim));
    }

    @Override
    protected void layerNormBackwardWeightKernel(MeshTensor dy, MeshTensor x, MeshTensor mean, MeshTensor rstd,
                                                 MeshTensor dGamma, MeshTensor dBeta, boolean accumulate) {
        int r = rows(x);
        int dim = x.localShape().last();
        if (dGamma != null && dBeta != null && DirectKernels.applies(dy.dtype(), x.dtype())
                && fp32(mean, rstd, dGamma, dBeta)) {
            each(d -> DirectKernels.layerNormBackwardWeight(par, arr(dy, d), arr(x, d), piece(mean, d), piece(rstd, d),
                    piece(dGamma, d), piece(dBeta, d), r, dim, accumulate));
            return;
        }
        each(d -> Norms.layerNormBackwardWeight(par, in(dy, d), in(x, d), in(mean, d), in(rstd, d),
                dGamma == null ? null : accumulate ? update(dGamma, d) : out(dGamma, d),
                dBeta == null ? null : accumulate ? update(dBeta, d) : out(dBeta, d), r, dim, accumulate));
    }

    @Override
    protected void rmsNormKernel(MeshTensor y, MeshTensor rstd, MeshTensor x, MeshTensor gamma, float eps) {
        int r = rows(x);
        int dim = x.localShape().last();
        each(d -> Norms.rmsNorm(par, out(y, d), out(rstd, d), in(x, d), in(gamma, d), r, dim, eps));
    }

    @Override
    protected void rmsNormBackwardInputKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, MeshTensor gamma,
                                              MeshTensor rstd) {
        int r = rows(x);
        int dim = x.localShape().last();
        each(d -> Norms.rmsNormBackwardInput(par, out(dx, d), in(dy, d), in(x, d), in(gamma, d), in(rstd, d), r, dim));
    }

    @Override
    protected void rmsNormBackwardWeightKernel(MeshTensor dy, MeshTensor x, MeshTensor rstd, MeshTensor dGamma,
                                               boolean accumulate) {
        int r = rows(x);
        int dim = x.localShape().last();
        each(d -> Norms.rmsNormBackwardWeight(par, in(dy, d), in(x, d), in(rstd, d),
                accumulate ? update(dGamma, d) : out(dGamma, d), r, dim, accumulate));
    }

    // ---- softmax, activations, rotary --------------------------------------------------------------

    @Override
    protected void softmaxKernel(MeshTensor y, MeshTensor x, float scale, boolean causal) {
        int r = rows(x);
        int tk = x.localShape().last();
        int rank = x.shape().rank();
        int tqLocal = rank >= 2 ? x.localShape().dim(rank - 2) : 1;
        int tqGlobal = rank >= 2 ? x.shape().dim(rank - 2) : 1;
        each(d -> Softmax.forward(par, out(y, d), in(x, d), r, tk, scale, causal, tqLocal, tqGlobal,
                rank >= 2 ? offset(x, d, rank - 2) : 0));
    }

    @Override
    protected void softmaxBackwardKernel(MeshTensor dx, MeshTensor y, MeshTensor dy, float scale) {
        int r = rows(y);
        int dim = y.localShape().last();
        each(d -> Softmax.backward(par, out(dx, d), in(y, d), in(dy, d), r, dim, scale));
    }

    @Override
    protected void activationKernel(MeshTensor out, MeshTensor x, Activation f) {
        int len = local(x);
        if (DirectKernels.applies(out.dtype(), x.dtype())) {
            each(d -> DirectKernels.activation(par, f == Activation.GELU, arr(out, d), arr(x, d), len));
            return;
        }
        each(d -> {
            NativeBuffer o = staging.write((CpuTensor) out, d), a = staging.read((CpuTensor) x, d);
            if (f == Activation.GELU) Elementwise.gelu(par, o, a, len);
            else Elementwise.silu(par, o, a, len);
        });
    }

    @Override
    protected void activationBackwardKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, Activation f) {
        int len = local(x);
        if (DirectKernels.applies(dx.dtype(), dy.dtype(), x.dtype())) {
            each(d -> DirectKernels.activationBackward(par, f == Activation.GELU, arr(dx, d), arr(dy, d), arr(x, d), len));
            return;
        }
        each(d -> {
            NativeBuffer o = staging.write((CpuTensor) dx, d), g = staging.read((CpuTensor) dy, d);
            NativeBuffer a = staging.read((CpuTensor) x, d);
            if (f == Activation.GELU) Elementwise.geluBackward(par, o, g, a, len);
            else Elementwise.siluBackward(par, o, g, a, len);
        });
    }

    @Override
    protected void ropeKernel(MeshTensor out, MeshTensor x, RopeFrequencies frequencies, boolean inverse) {
        int hd = x.shape().dim(3);
        float[][] table = mesh.rope().table(frequencies, x.shape().dim(2), hd);
        int r = rows(x);
        int tLocal = x.localShape().dim(2);
        each(d -> Rope.apply(par, out(out, d), in(x, d), r, tLocal, offset(x, d, 2), hd, table, inverse));
    }

    // ---- elementwise and reductions ------------------------------------------------------------------

    @Override
    protected void binaryKernel(MeshTensor out, MeshTensor a, MeshTensor b, Binary op) {
        int len = local(a);
        int lenB = local(b);
        if (lenB > 0 && len % lenB == 0 && DirectKernels.applies(out.dtype(), a.dtype(), b.dtype())) {
            each(d -> DirectKernels.binary(par, arr(out, d), arr(a, d), arr(b, d), len, lenB, op == Binary.MUL));
            return;
        }
        each(d -> Elementwise.binary(par, out(out, d), in(a, d), in(b, d), len, lenB, op == Binary.MUL));
    }

    @Override
    protected void scaleKernel(MeshTensor out, MeshTensor a, float s) {
        int len = local(a);
        each(d -> Elementwise.scale(par, out(out, d), in(a, d), len, s));
    }

    @Override
    protected void axpyKernel(MeshTensor a, MeshTensor b, float alpha) {
        int len = local(a);
        each(d -> Elementwise.axpy(par, update(a, d), in(b, d), len, alpha));
    }

    @Override
    protected void sumRowsKernel(MeshTensor x, MeshTensor out, boolean accumulate) {
        int r = rows(x);
        int cols = x.localShape().last();
        if (DirectKernels.applies(x.dtype()) && fp32(out)) {
            each(d -> DirectKernels.sumRows(par, arr(x, d), piece(out, d), r, cols, accumulate));
            return;
        }
        each(d -> Reductions.sumRows(par, in(x, d), accumulate ? update(out, d) : out(out, d), r, cols, accumulate));
    }

    @Override
    protected void sumKernel(MeshTensor out, MeshTensor x, int dim) {
        int[] s = aroundDim(x.localShape(), dim);
        each(d -> Reductions.sum(par, out(out, d), in(x, d), s[0], s[1], s[2]));
    }

    @Override
    protected double sumSquaresKernel(MeshTensor x) {
        int len = local(x);
        return call(() -> {
            double total = 0;
            for (int d = 0; d < n; d++) {
                if (Sharding.holdsDistinctPiece(x.layout(), shape, d)) total += Reductions.sumSquares(par, in(x, d), len);
            }
            return total;
        });
    }

    @Override
    protected void repeatInterleaveKernel(MeshTensor out, MeshTensor x, int dim, int repeats) {
        int[] s = aroundDim(x.localShape(), dim);
        each(d -> Reductions.repeatInterleave(par, out(out, d), in(x, d), s[0], s[1], s[2], repeats));
    }

    @Override
    protected void sumGroupsKernel(MeshTensor out, MeshTensor x, int dim, int groupSize) {
        int[] s = aroundDim(x.localShape(), dim);
        each(d -> Reductions.sumGroups(par, out(out, d), in(x, d), s[0], s[1] / groupSize, groupSize, s[2]));
    }

    /** {outer, size of dim, inner} of a shape seen as [outer, dim, inner]. */
    private static int[] aroundDim(Shape s, int dim) {
        long outer = 1;
        long inner = 1;
        for (int i = 0; i < dim; i++) outer *= s.dim(i);
        for (int i = dim + 1; i < s.rank(); i++) inner *= s.dim(i);
        return new int[]{(int) outer, s.dim(dim), (int) inner};
    }

    // ---- loss ----------------------------------------------------------------------------------------

    @Override
    protected LossOutput crossEntropyKernel(MeshTensor logits, MeshTensor targets, int ignoreIndex) {
        int v = logits.shape().last();
        int r = rows(logits);
        return call(() -> {
            checkIds("crossEntropy", targets, v, ignoreIndex);
            double sum = 0;
            long count = 0;
            for (int d = 0; d < n; d++) {
                if (!Sharding.holdsDistinctPiece(logits.layout(), shape, d)) continue;
                IntBuffer t = ints(targets, d);
                sum += DirectKernels.applies(logits.dtype())
                        ? Softmax.crossEntropy(par, arr(logits, d), t, r, v, ignoreIndex)
                        : Softmax.crossEntropy(par, in(logits, d), t, r, v, ignoreIndex);
                for (int i = 0; i < r; i++) if (t.get(i) != ignoreIndex) count++;
            }
            return new LossOutput(sum, count);
        });
    }

    @Override
    protected void crossEntropyBackwardKernel(MeshTensor dLogits, MeshTensor logits, MeshTensor targets,
                                              int ignoreIndex, float scale) {
        int v = logits.shape().last();
        int r = rows(logits);
        run(() -> {
            checkIds("crossEntropyBackward", targets, v, ignoreIndex);
            boolean direct = DirectKernels.applies(dLogits.dtype(), logits.dtype());
            for (int d = 0; d < n; d++) {
                if (direct) {
                    Softmax.crossEntropyBackward(par, arr(dLogits, d), arr(logits, d), ints(targets, d), r, v, ignoreIndex,
                            scale);
                } else {
                    Softmax.crossEntropyBackward(par, out(dLogits, d), in(logits, d), ints(targets, d), r, v, ignoreIndex,
                            scale);
                }
            }
        });
    }

    // ---- dropout ---------------------------------------------------------------------------------------

    @Override
    protected void dropoutKernel(MeshTensor out, MeshTensor x, float p, long seed, long elementOffset) {
        each(d -> {
            LocalPiece lp = new LocalPiece(x.shape(), x.localShape(), x.layout(), shape, d);
            Elementwise.dropout(par, out(out, d), in(x, d), lp, p, seed, elementOffset);
        });
    }

    // ---- optimizers ------------------------------------------------------------------------------------

    @Override
    protected void adamwKernel(MeshTensor param, MeshTensor grad, MeshTensor expAvg, MeshTensor expAvgSq,
                               AdamWParams p) {
        int len = local(param);
        each(d -> Optimizers.adamw(par, update(param, d), in(grad, d), update(expAvg, d), update(expAvgSq, d), len, p));
    }

    @Override
    protected void sgdKernel(MeshTensor param, MeshTensor grad, MeshTensor buf, SgdParams p) {
        int len = local(param);
        each(d -> Optimizers.sgd(par, update(param, d), in(grad, d), buf == null ? null : update(buf, d), len, p));
    }

    // ---- fused attention ----------------------------------------------------------------------------------

    /**
     * {@link FlashAttention} when q, k and v are [..., T, hd] / [..., Tk, hd] with the same leading dims and
     * layout, T and hd whole on every device; anything else takes the composed default. What it keeps for
     * backward is the rows' log-sum-exp, [..., T, 1].
     */
    @Override
    public AttentionOutput attention(Tensor q, Tensor k, Tensor v, float scale, boolean causal) {
        if (!fusable("attention", q, k, v)) return super.attention(q, k, v, scale, causal);
        MeshTensor tq = (MeshTensor) q, tk = (MeshTensor) k, tv = (MeshTensor) v;
        int r = tq.shape().rank();
        int t = tq.shape().dim(r - 2), keys = tk.shape().dim(r - 2), hd = tq.shape().last();
        int lead = (int) (tq.localShape().numel() / ((long) t * hd));
        MeshTensor o = allocate(tq.shape(), tq.layout(), tq.dtype());
        MeshTensor lse;
        try {
            lse = allocate(tq.shape().with(r - 1, 1), tq.layout(), DType.FP32);
        } catch (RuntimeException | Error e) {
            o.close();
            throw e;
        }
        try {
            if (bf16Attention(tq, tk, tv, o)) {
                each(d -> FlashAttention.forwardBf16(par, mesh.bf16Gemm(), piece(o, d), staging.write((CpuTensor) lse, d),
                        piece(tq, d), piece(tk, d), piece(tv, d), lead, t, keys, hd, scale, causal));
            } else {
                each(d -> FlashAttention.forward(par, mesh.gemm(), staging.write((CpuTensor) o, d),
                        staging.write((CpuTensor) lse, d), staging.read((CpuTensor) tq, d), staging.read((CpuTensor) tk, d),
                        staging.read((CpuTensor) tv, d), lead, t, keys, hd, scale, causal));
            }
            return new AttentionOutput(o, lse);
        } catch (RuntimeException | Error e) {
            o.close();
            lse.close();
            throw e;
        }
    }

    @Override
    public AttentionGrads attentionBackward(Tensor q, Tensor k, Tensor v, AttentionOutput out, Tensor dO, float scale,
                                            boolean causal) {
        if (!fusable("attentionBackward", q, k, v)) return super.attentionBackward(q, k, v, out, dO, scale, causal);
        MeshTensor tq = (MeshTensor) q, tk = (MeshTensor) k, tv = (MeshTensor) v;
        MeshTensor to = floating("attentionBackward", "out", out.out());
        MeshTensor tl = floating("attentionBackward", "lse", out.saved());
        MeshTensor tdo = floating("attentionBackward", "dO", dO);
        int r = tq.shape().rank();
        int t = tq.shape().dim(r - 2), keys = tk.shape().dim(r - 2), hd = tq.shape().last();
        if (!to.shape().equals(tq.shape()) || !tdo.shape().equals(tq.shape()) || !tl.shape().equals(tq.shape().with(r - 1, 1))) {
            throw new DeviceException("attentionBackward: out " + to.shape() + ", saved " + tl.shape() + " and dO " + tdo.shape()
                    + " do not fit q " + tq.shape() + ": expected attention's outputs for this q and dO like q");
        }
        int lead = (int) (tq.localShape().numel() / ((long) t * hd));
        MeshTensor[] g = new MeshTensor[3];
        try {
            g[0] = allocate(tq.shape(), tq.layout(), tdo.dtype());
            g[1] = allocate(tk.shape(), tk.layout(), tdo.dtype());
            g[2] = allocate(tv.shape(), tv.layout(), tdo.dtype());
            if (bf16Attention(tq, tk, tv, to, tdo)) {
                each(d -> FlashAttention.backwardBf16(par, mesh.bf16Gemm(), piece(g[0], d), piece(g[1], d), piece(g[2], d),
                        piece(tq, d), piece(tk, d), piece(tv, d), piece(to, d), staging.read((CpuTensor) tl, d), piece(tdo, d),
                        lead, t, keys, hd, scale, causal));
            } else {
                each(d -> FlashAttention.backward(par, mesh.gemm(), staging.write((CpuTensor) g[0], d),
                        staging.write((CpuTensor) g[1], d), staging.write((CpuTensor) g[2], d), staging.read((CpuTensor) tq, d),
                        staging.read((CpuTensor) tk, d), staging.read((CpuTensor) tv, d), staging.read((CpuTensor) to, d),
                        staging.read((CpuTensor) tl, d), staging.read((CpuTensor) tdo, d), lead, t, keys, hd, scale, causal));
            }
            return new AttentionGrads(g[0], g[1], g[2]);
        } catch (RuntimeException | Error e) {
            for (MeshTensor x : g) if (x != null) x.close();
            throw e;
        }
    }

    /**
     * Whether fused attention runs in bf16 ({@link FlashAttention#forwardBf16}): every tensor BF16 and a bf16 GEMM on bf16
     * operands (oneDNN's on a CPU with avx512_bf16, else the fma engine). Otherwise (the sgemm engine) the pieces are
     * staged through fp32 as for any op.
     */
    private boolean bf16Attention(MeshTensor... ts) {
        for (MeshTensor x : ts) if (x.dtype() != DType.BF16) return false;
        return mesh.bf16Gemm().packedOperands();
    }

    /** {@code -Dttpipe.attention=composed}: the composed ops instead of {@link FlashAttention}, to compare the two. */
    private static final boolean FUSED_ATTENTION = !"composed".equals(System.getProperty("ttpipe.attention"));

    /** Whether {@link FlashAttention} can run q, k, v (checked as floating tensors of this submesh). */
    private boolean fusable(String op, Tensor q, Tensor k, Tensor v) {
        MeshTensor tq = floating(op, "q", q), tk = floating(op, "k", k), tv = floating(op, "v", v);
        if (!FUSED_ATTENTION) return false;
        int r = tq.shape().rank();
        if (r < 3 || tk.shape().rank() != r || !tv.shape().equals(tk.shape())) return false;
        if (tq.layout().hasPartial() || !tq.layout().equals(tk.layout()) || !tq.layout().equals(tv.layout())) return false;
        for (int i = 0; i < r - 2; i++) if (tq.shape().dim(i) != tk.shape().dim(i)) return false;
        return tq.shape().last() == tk.shape().last()
                && tq.localShape().dim(r - 1) == tq.shape().dim(r - 1) && tq.localShape().dim(r - 2) == tq.shape().dim(r - 2)
                && tk.localShape().dim(r - 2) == tk.shape().dim(r - 2);
    }

    // ---- collectives -------------------------------------------------------------------------------------

    /** The devices of each group along {@code axis}: element [g][j] is group g's device at position j. */
    private int[][] groups(int axis) {
        int size = shape.axisSize(axis);
        int count = n / size;
        int[][] g = new int[count][size];
        int gi = 0;
        for (int d = 0; d < n; d++) {
            if (Sharding.coord(shape, d).along(axis) != 0) continue;
            for (int j = 0; j < size; j++) g[gi][j] = Sharding.peer(shape, d, axis, j);
            gi++;
        }
        return g;
    }

    @Override
    protected void allGatherKernel(MeshTensor out, MeshTensor x, int dim, int axis) {
        int[] s = aroundDim(x.localShape(), dim);
        int innerBytes = s[1] * s[2] * x.dtype().bytes();
        run(() -> {
            for (int[] group : groups(axis)) {
                NativeBuffer[] outs = new NativeBuffer[group.length];
                NativeBuffer[] xs = new NativeBuffer[group.length];
                for (int j = 0; j < group.length; j++) {
                    outs[j] = ((CpuTensor) out).piece(group[j]);
                    xs[j] = ((CpuTensor) x).piece(group[j]);
                }
                Collectives.allGather(outs, xs, s[0], innerBytes);
            }
        });
    }

    @Override
    protected void reduceScatterKernel(MeshTensor out, MeshTensor x, int dim, int axis) {
        int[] s = aroundDim(out.localShape(), dim);
        run(() -> {
            for (int[] group : groups(axis)) {
                FloatBuffer[] outs = new FloatBuffer[group.length];
                FloatBuffer[] xs = new FloatBuffer[group.length];
                for (int j = 0; j < group.length; j++) {
                    xs[j] = in(x, group[j]);
                    outs[j] = out(out, group[j]);
                }
                Collectives.reduceScatter(par, outs, xs, s[0], s[1] * s[2]);
            }
        });
    }

    @Override
    protected void allReduceKernel(MeshTensor out, MeshTensor x, int axis, ReduceOp op) {
        int len = local(x);
        float post = op == ReduceOp.MEAN ? 1f / shape.axisSize(axis) : 1f;
        run(() -> {
            for (int[] group : groups(axis)) {
                FloatBuffer[] outs = new FloatBuffer[group.length];
                FloatBuffer[] xs = new FloatBuffer[group.length];
                for (int j = 0; j < group.length; j++) xs[j] = in(x, group[j]);
                for (int j = 0; j < group.length; j++) outs[j] = out(out, group[j]);
                Collectives.allReduce(par, outs, xs, len, post);
            }
        });
    }

    @Override
    protected MeshTensor adoptKernel(MeshTensor t) {
        MeshTensor moved = moveHere(t, memories);
        if (moved != null) return moved;
        CpuTensor copy = receive((CpuTensor) t);
        t.close();
        return copy;
    }

    /** One memcpy per device from {@code src} into the new tensor's native buffers. */
    @Override
    public Tensor fromLocalBytes(ByteBuffer src, Shape s, Layout layout, DType dtype) {
        MeshTensor out = allocateForLocalBytes(src, s, layout, dtype);
        int bytes = (int) out.bytesPerDevice();
        int at = src.position();
        return guard(out, () -> run(() -> {
            for (int d = 0; d < n; d++) ((CpuTensor) out).piece(d).bytes.put(0, src, at + d * bytes, bytes);
        }));
    }

    /**
     * Thread-safe: {@link #allocate} reads only final state, charges {@link DeviceMemory} (synchronized)
     * and takes buffers from the devices' {@link NativeAllocator}s (synchronized); a mesh that closes
     * meanwhile makes it throw. The pieces are whatever the allocator's cache held.
     */
    @Override
    public Tensor allocateLocal(Shape s, Layout layout, DType dtype) {
        return allocateForLocal(s, layout, dtype);
    }

    /** Copies {@code t}'s pieces into a new tensor on this submesh (a socket's receive side). */
    CpuTensor receive(CpuTensor t) {
        CpuTensor copy = (CpuTensor) allocate(t.shape(), t.layout(), t.dtype());
        int bytes = (int) t.bytesPerDevice();
        mesh.enter();
        try {
            for (int d = 0; d < n; d++) copy.piece(d).bytes.put(0, t.piece(d).bytes, 0, bytes);
            return copy;
        } catch (RuntimeException | Error e) {
            copy.close();
            throw e;
        } finally {
            mesh.exit();
        }
    }
}

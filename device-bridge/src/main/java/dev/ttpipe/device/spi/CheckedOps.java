package dev.ttpipe.device.spi;

import dev.ttpipe.device.AdamWParams;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
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

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.List;

/**
 * The front half of every backend's {@link Ops}: each public op checks its arguments (open, on
 * this submesh, dtypes, shapes, layouts), derives the output shape and layout with
 * {@link LayoutRules}, allocates the output, and hands validated tensors to the backend's kernel
 * (the {@code ...Kernel} methods). A kernel that throws gets its output freed. So the cpu, sim and
 * ttnn backends accept and reject exactly the same programs with exactly the same messages.
 *
 * <p>Kernels receive tensors whose shapes and layouts fit; they work on local pieces (see
 * {@link Sharding}) and must not allocate tensors of their own. Outputs they receive are
 * uninitialised unless stated.
 */
public abstract class CheckedOps implements Ops {
    /** Activation functions with a kernel of their own. */
    public enum Activation { GELU, SILU }

    /** Elementwise binary ops with trailing-dims broadcast of the second operand. */
    public enum Binary { ADD, MUL }

    private final Submesh submesh;

    protected CheckedOps(Submesh submesh) {
        this.submesh = submesh;
    }

    @Override
    public final Submesh submesh() {
        return submesh;
    }

    // ---- backend hooks ------------------------------------------------------------------------------

    /** Whether {@code t} is a tensor of this backend (the class check of {@link #arg}). */
    protected abstract boolean isOwnTensor(Tensor t);

    /**
     * A new tensor on this submesh, charged to its devices; contents undefined. Must be thread-safe
     * where the backend offers {@link LocalPiecesOps#allocateLocal} (which calls it from any thread).
     */
    protected abstract MeshTensor allocate(Shape shape, Layout layout, DType dtype);

    /** A tensor sharing {@code base}'s storage with a new shape and layout (same local element count). */
    protected abstract MeshTensor view(MeshTensor base, Shape shape, Layout layout);

    protected abstract void writeHostKernel(MeshTensor t, float[] data);

    protected abstract void writeHostIntsKernel(MeshTensor t, int[] data);

    protected abstract void writeLocalKernel(MeshTensor t, float[][] pieces);

    protected abstract void fillKernel(MeshTensor t, float value);

    /** Same local shapes; converts between dtypes. */
    protected abstract void copyKernel(MeshTensor dst, MeshTensor src);

    protected abstract void permuteKernel(MeshTensor out, MeshTensor x, int[] dims);

    /**
     * Moves {@code t} (open, from another submesh of this mesh with this submesh's shape) onto this
     * submesh and closes it. Backends whose devices share host memory call {@link #moveHere}.
     */
    protected abstract MeshTensor adoptKernel(MeshTensor t);

    /** {@code out = alpha * op(a) @ op(b) + beta * out} on every device's pieces; beta = 0 ignores out. */
    protected abstract void matmulKernel(MeshTensor out, MeshTensor a, MeshTensor b, boolean transposeA,
                                         boolean transposeB, float alpha, float beta);

    /** Must reject ids outside [0, V) before writing anything. */
    protected abstract void embeddingKernel(MeshTensor out, MeshTensor ids, MeshTensor table);

    /** Must reject ids outside [0, V) before writing anything. */
    protected abstract void embeddingBackwardKernel(MeshTensor ids, MeshTensor dOut, MeshTensor dTable, boolean accumulate);

    /** {@code beta} may be null. */
    protected abstract void layerNormKernel(MeshTensor y, MeshTensor mean, MeshTensor rstd, MeshTensor x,
                                            MeshTensor gamma, MeshTensor beta, float eps);

    protected abstract void layerNormBackwardInputKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, MeshTensor gamma,
                                                         MeshTensor mean, MeshTensor rstd);

    /** Either of dGamma and dBeta may be null. */
    protected abstract void layerNormBackwardWeightKernel(MeshTensor dy, MeshTensor x, MeshTensor mean, MeshTensor rstd,
                                                          MeshTensor dGamma, MeshTensor dBeta, boolean accumulate);

    protected abstract void rmsNormKernel(MeshTensor y, MeshTensor rstd, MeshTensor x, MeshTensor gamma, float eps);

    protected abstract void rmsNormBackwardInputKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, MeshTensor gamma,
                                                       MeshTensor rstd);

    protected abstract void rmsNormBackwardWeightKernel(MeshTensor dy, MeshTensor x, MeshTensor rstd, MeshTensor dGamma,
                                                        boolean accumulate);

    protected abstract void softmaxKernel(MeshTensor y, MeshTensor x, float scale, boolean causal);

    protected abstract void softmaxBackwardKernel(MeshTensor dx, MeshTensor y, MeshTensor dy, float scale);

    protected abstract void activationKernel(MeshTensor out, MeshTensor x, Activation f);

    protected abstract void activationBackwardKernel(MeshTensor dx, MeshTensor dy, MeshTensor x, Activation f);

    protected abstract void ropeKernel(MeshTensor out, MeshTensor x, RopeFrequencies frequencies, boolean inverse);

    /** {@code out = a (op) b}, b broadcast over a's leading dims; {@code out} may be {@code a}. */
    protected abstract void binaryKernel(MeshTensor out, MeshTensor a, MeshTensor b, Binary op);

    /** {@code out = s * a}; {@code out} may be {@code a}. */
    protected abstract void scaleKernel(MeshTensor out, MeshTensor a, float s);

    /** {@code a += alpha * b}. */
    protected abstract void axpyKernel(MeshTensor a, MeshTensor b, float alpha);

    protected abstract void sumRowsKernel(MeshTensor x, MeshTensor out, boolean accumulate);

    /** out is x's shape without {@code dim} (or with it as 1: same memory order). */
    protected abstract void sumKernel(MeshTensor out, MeshTensor x, int dim);

    protected abstract double sumSquaresKernel(MeshTensor x);

    protected abstract void repeatInterleaveKernel(MeshTensor out, MeshTensor x, int dim, int repeats);

    protected abstract void sumGroupsKernel(MeshTensor out, MeshTensor x, int dim, int groupSize);

    /** Must reject targets outside [0, V) (other than the ignore index). */
    protected abstract LossOutput crossEntropyKernel(MeshTensor logits, MeshTensor targets, int ignoreIndex);

    /** Must reject targets outside [0, V) (other than the ignore index). */
    protected abstract void crossEntropyBackwardKernel(MeshTensor dLogits, MeshTensor logits, MeshTensor targets,
                                                       int ignoreIndex, float scale);

    /** Element i of the logical tensor uses mask entry {@code elementOffset + i}. */
    protected abstract void dropoutKernel(MeshTensor out, MeshTensor x, float p, long seed, long elementOffset);

    protected abstract void adamwKernel(MeshTensor param, MeshTensor grad, MeshTensor expAvg, MeshTensor expAvgSq,
                                        AdamWParams p);

    /** {@code buf} is null when momentum is 0. */
    protected abstract void sgdKernel(MeshTensor param, MeshTensor grad, MeshTensor buf, SgdParams p);

    protected abstract void allGatherKernel(MeshTensor out, MeshTensor x, int dim, int axis);

    protected abstract void reduceScatterKernel(MeshTensor out, MeshTensor x, int dim, int axis);

    /** {@code out} may be {@code x} (in place). */
    protected abstract void allReduceKernel(MeshTensor out, MeshTensor x, int axis, ReduceOp op);

    // ---- creation and movement ---------------------------------------------------------------------

    @Override
    public Tensor fromHost(float[] data, Shape shape, Layout layout, DType dtype) {
        String op = "fromHost";
        requireNonNull(op, "data", data);
        requireFloatType(op, dtype, "fromHostInts");
        Layout l = creatable(op, shape, layout);
        requireLength(op, data.length, shape);
        MeshTensor out = allocate(shape, l, dtype);
        return guard(out, () -> writeHostKernel(out, data));
    }

    @Override
    public Tensor fromHostInts(int[] data, Shape shape, Layout layout) {
        String op = "fromHostInts";
        requireNonNull(op, "data", data);
        Layout l = creatable(op, shape, layout);
        requireLength(op, data.length, shape);
        MeshTensor out = allocate(shape, l, DType.INT32);
        return guard(out, () -> writeHostIntsKernel(out, data));
    }

    @Override
    public Tensor fromHostLocal(float[][] pieces, Shape shape, Layout layout, DType dtype) {
        String op = "fromHostLocal";
        requireNonNull(op, "pieces", pieces);
        requireNonNull(op, "shape", shape);
        requireFloatType(op, dtype, null);
        Layout l = LayoutRules.normalize(op, shape, layout, submesh.shape());
        int n = submesh.shape().size();
        if (pieces.length != n) {
            throw new DeviceException(op + ": " + pieces.length + " pieces for a submesh of " + n + " devices");
        }
        long local = Sharding.localShape(shape, l, submesh.shape()).numel();
        for (int i = 0; i < n; i++) {
            if (pieces[i] == null || pieces[i].length != local) {
                throw new DeviceException(op + ": piece " + i + " has " + (pieces[i] == null ? "null" : pieces[i].length
                        + " elements") + ", the local shape " + Sharding.localShape(shape, l, submesh.shape())
                        + " of " + shape + " with layout " + l + " needs " + local);
            }
        }
        MeshTensor out = allocate(shape, l, dtype);
        return guard(out, () -> writeLocalKernel(out, pieces));
    }

    /**
     * For backends implementing {@link LocalPiecesOps}: checks {@code fromLocalBytes}'s arguments
     * (layout valid for the shape, no Partial on INT32, {@code src.remaining()} exactly the pieces'
     * total) and allocates the tensor; the backend then copies the pieces in (under {@link #guard}).
     */
    protected final MeshTensor allocateForLocalBytes(ByteBuffer src, Shape shape, Layout layout, DType dtype) {
        String op = "fromLocalBytes";
        requireNonNull(op, "src", src);
        requireNonNull(op, "shape", shape);
        requireNonNull(op, "dtype", dtype);
        Layout l = localLayout(op, shape, layout, dtype);
        long piece = Sharding.localShape(shape, l, submesh.shape()).numel() * dtype.bytes();
        long total = piece * submesh.shape().size();
        if (src.remaining() != total) {
            throw new DeviceException(op + ": " + src.remaining() + " bytes for " + shape + " " + dtype + " with layout "
                    + l + " on a submesh of " + submesh.shape().size() + " devices, which needs " + total
                    + " (" + piece + " per device)");
        }
        return allocate(shape, l, dtype);
    }

    /**
     * For backends implementing {@link LocalPiecesOps#allocateLocal}: checks its arguments as
     * {@link #allocateForLocalBytes} does and allocates the tensor, uninitialised. Thread-safe where
     * the backend's {@link #allocate} is (the checks touch no state).
     */
    protected final MeshTensor allocateForLocal(Shape shape, Layout layout, DType dtype) {
        String op = "allocateLocal";
        requireNonNull(op, "shape", shape);
        requireNonNull(op, "dtype", dtype);
        return allocate(shape, localLayout(op, shape, layout, dtype), dtype);
    }

    /** The normalised layout of raw local pieces: any layout, Partial only for float types. */
    private Layout localLayout(String op, Shape shape, Layout layout, DType dtype) {
        return dtype == DType.INT32 ? creatable(op, shape, layout) : LayoutRules.normalize(op, shape, layout, submesh.shape());
    }

    @Override
    public Tensor zeros(Shape shape, Layout layout, DType dtype) {
        String op = "zeros";
        requireNonNull(op, "shape", shape);
        requireNonNull(op, "dtype", dtype);
        Layout l = LayoutRules.normalize(op, shape, layout, submesh.shape());
        if (dtype == DType.INT32) l = creatable(op, shape, layout);
        MeshTensor out = allocate(shape, l, dtype);
        return guard(out, () -> fillKernel(out, 0f));
    }

    @Override
    public Tensor full(Shape shape, Layout layout, DType dtype, float value) {
        String op = "full";
        requireNonNull(op, "dtype", dtype);
        Layout l = creatable(op, shape, layout);
        MeshTensor out = allocate(shape, l, dtype);
        return guard(out, () -> fillKernel(out, value));
    }

    @Override
    public Tensor copy(Tensor x) {
        MeshTensor src = arg("copy", "x", x);
        MeshTensor out = allocate(src.shape(), src.layout(), src.dtype());
        return guard(out, () -> copyKernel(out, src));
    }

    @Override
    public void copyInto(Tensor dst, Tensor src) {
        String op = "copyInto";
        MeshTensor d = arg(op, "dst", dst);
        MeshTensor s = arg(op, "src", src);
        sameShape(op, d, s);
        LayoutRules.same(op, d.shape(), d.layout(), s.shape(), s.layout());
        copyKernel(d, s);
    }

    @Override
    public Tensor typecast(Tensor x, DType dtype) {
        MeshTensor src = arg("typecast", "x", x);
        requireNonNull("typecast", "dtype", dtype);
        if (dtype == DType.INT32) LayoutRules.requireNoPartial("typecast", src.layout());
        MeshTensor out = allocate(src.shape(), src.layout(), dtype);
        return guard(out, () -> copyKernel(out, src));
    }

    @Override
    public Tensor reshape(Tensor x, Shape shape) {
        String op = "reshape";
        MeshTensor src = arg(op, "x", x);
        requireNonNull(op, "shape", shape);
        if (shape.numel() != src.shape().numel()) {
            throw new DeviceException(op + ": cannot view " + src.shape() + " (" + src.shape().numel() + " elements) as "
                    + shape + " (" + shape.numel() + " elements)");
        }
        Layout l = LayoutRules.reshape(op, src.shape(), src.layout(), shape, submesh.shape());
        l = LayoutRules.normalize(op, shape, l, submesh.shape());
        return view(src, shape, l);
    }

    @Override
    public Tensor adopt(Tensor t) {
        String op = "adopt";
        if (t == null) throw new DeviceException(op + ": tensor is null");
        if (t.submesh() == submesh) return arg(op, "t", t);
        if (!isOwnTensor(t) || t.submesh().mesh() != submesh.mesh()) {
            throw new DeviceException(op + ": the tensor must come from a submesh of the same mesh ("
                    + submesh.mesh().backend() + " " + submesh.mesh().shape() + ")");
        }
        MeshTensor m = (MeshTensor) t;
        if (m.isClosed()) throw new DeviceException(op + ": tensor " + m.shape() + " is closed");
        if (!m.submesh().shape().equals(submesh.shape())) {
            throw new DeviceException(op + ": tensor " + m.shape() + " lives on " + m.submesh().describe()
                    + ", whose shape differs from " + submesh.describe());
        }
        return adoptKernel(m);
    }

    /**
     * For backends whose devices share host memory: hands {@code t}'s storage to this submesh
     * (the accounting moves, nothing is copied) and closes {@code t}. Returns null, changing
     * nothing, if views share t's storage (then the backend copies).
     */
    protected final MeshTensor moveHere(MeshTensor t, List<DeviceMemory> here) {
        if (!t.storage().moveAccounting(here)) return null;
        MeshTensor moved = view(t, t.shape(), t.layout());
        t.close();
        return moved;
    }

    @Override
    public Tensor permute(Tensor x, int... dims) {
        String op = "permute";
        MeshTensor src = arg(op, "x", x);
        requireNonNull(op, "dims", dims);
        int rank = src.shape().rank();
        int[] norm = new int[dims.length];
        boolean[] seen = new boolean[rank];
        boolean ok = dims.length == rank;
        for (int i = 0; ok && i < rank; i++) {
            int d = dims[i] < 0 ? dims[i] + rank : dims[i];
            ok = d >= 0 && d < rank && !seen[d];
            if (ok) {
                seen[d] = true;
                norm[i] = d;
            }
        }
        if (!ok) {
            throw new DeviceException(op + ": dims " + Arrays.toString(dims) + " are not a permutation of the "
                    + rank + " dims of " + src.shape());
        }
        int[] outDims = new int[rank];
        for (int i = 0; i < rank; i++) outDims[i] = src.shape().dim(norm[i]);
        Shape outShape = Shape.of(outDims);
        MeshTensor out = allocate(outShape, LayoutRules.permute(src.layout(), norm), src.dtype());
        return guard(out, () -> permuteKernel(out, src, norm));
    }

    // ---- matmul ------------------------------------------------------------------------------------

    @Override
    public Tensor matmul(Tensor a, Tensor b, boolean transposeA, boolean transposeB) {
        String op = "matmul";
        MeshTensor ta = floating(op, "a", a);
        MeshTensor tb = floating(op, "b", b);
        Shape outShape = matmulShape(op, ta.shape(), transposeA, tb.shape(), transposeB);
        Layout l = LayoutRules.matmul(op, ta.shape(), ta.layout(), transposeA, tb.shape(), tb.layout(), transposeB);
        MeshTensor out = allocate(outShape, l, ta.dtype());
        return guard(out, () -> matmulKernel(out, ta, tb, transposeA, transposeB, 1f, 0f));
    }

    @Override
    public void matmulInto(Tensor out, Tensor a, Tensor b, boolean transposeA, boolean transposeB, float alpha,
                           float beta) {
        String op = "matmulInto";
        MeshTensor to = floating(op, "out", out);
        MeshTensor ta = floating(op, "a", a);
        MeshTensor tb = floating(op, "b", b);
        Shape outShape = matmulShape(op, ta.shape(), transposeA, tb.shape(), transposeB);
        Layout l = LayoutRules.matmul(op, ta.shape(), ta.layout(), transposeA, tb.shape(), tb.layout(), transposeB);
        expectOut(op, to, outShape, l);
        if (to.storage() == ta.storage() || to.storage() == tb.storage()) {
            throw new DeviceException(op + ": out shares memory with an input");
        }
        matmulKernel(to, ta, tb, transposeA, transposeB, alpha, beta);
    }

    @Override
    public Tensor linear(Tensor x, Tensor w, Tensor bias) {
        String op = "linear";
        MeshTensor tx = floating(op, "x", x);
        MeshTensor tw = floating(op, "w", w);
        if (tx.shape().rank() < 2 || tw.shape().rank() != 2 || tx.shape().last() != tw.shape().dim(1)) {
            throw new DeviceException(op + ": x " + tx.shape() + " and w " + tw.shape()
                    + " do not fit: expected x [..., in] (rank >= 2) and w [out, in]");
        }
        Shape outShape = tx.shape().with(-1, tw.shape().dim(0));
        Layout l = LayoutRules.matmul(op, tx.shape(), tx.layout(), false, tw.shape(), tw.layout(), true);
        MeshTensor tbias = null;
        if (bias != null) {
            tbias = floating(op, "bias", bias);
            if (!tbias.shape().equals(Shape.of(tw.shape().dim(0)))) {
                throw new DeviceException(op + ": bias " + tbias.shape() + " does not fit w " + tw.shape()
                        + ": expected [" + tw.shape().dim(0) + "]");
            }
            LayoutRules.broadcast(op, outShape, l, tbias.shape(), tbias.layout(), false);
        }
        MeshTensor out = allocate(outShape, l, tx.dtype());
        MeshTensor b = tbias;
        return guard(out, () -> linearKernel(out, tx, tw, b));
    }

    /**
     * {@code out = x w^T (+ bias)}: the matmul, then the bias added to its result (both rounded to out's dtype). A
     * backend may fuse the two.
     */
    protected void linearKernel(MeshTensor out, MeshTensor x, MeshTensor w, MeshTensor bias) {
        matmulKernel(out, x, w, false, true, 1f, 0f);
        if (bias != null) binaryKernel(out, out, bias, Binary.ADD);
    }

    // ---- embedding ---------------------------------------------------------------------------------

    @Override
    public Tensor embedding(Tensor ids, Tensor table) {
        String op = "embedding";
        MeshTensor ti = ints(op, "ids", ids);
        MeshTensor tt = floating(op, "table", table);
        if (tt.shape().rank() != 2) {
            throw new DeviceException(op + ": table " + tt.shape() + " must be [V, D] (ids " + ti.shape() + ")");
        }
        Layout l = LayoutRules.embedding(op, ti.shape(), ti.layout(), tt.shape(), tt.layout());
        Shape outShape = append(ti.shape(), tt.shape().dim(1));
        MeshTensor out = allocate(outShape, LayoutRules.normalize(op, outShape, l, submesh.shape()), tt.dtype());
        return guard(out, () -> embeddingKernel(out, ti, tt));
    }

    @Override
    public void embeddingBackward(Tensor ids, Tensor dOut, Tensor dTable, boolean accumulate) {
        String op = "embeddingBackward";
        MeshTensor ti = ints(op, "ids", ids);
        MeshTensor tdo = floating(op, "dOut", dOut);
        MeshTensor tdt = floating(op, "dTable", dTable);
        if (tdt.shape().rank() != 2 || !tdo.shape().equals(append(ti.shape(), tdt.shape().dim(1)))) {
            throw new DeviceException(op + ": ids " + ti.shape() + ", dOut " + tdo.shape() + " and dTable "
                    + tdt.shape() + " do not fit: expected dOut [..., D] for ids [...] and dTable [V, D]");
        }
        LayoutRules.embeddingBackward(op, ti.shape(), ti.layout(), tdo.layout(), tdt.layout());
        embeddingBackwardKernel(ti, tdo, tdt, accumulate);
    }

    // ---- normalisation -----------------------------------------------------------------------------

    @Override
    public NormOutput layerNorm(Tensor x, Tensor gamma, Tensor beta, float eps) {
        String op = "layerNorm";
        MeshTensor tx = rowInput(op, x);
        MeshTensor tg = rowParam(op, "gamma", gamma, tx);
        MeshTensor tb = beta == null ? null : rowParam(op, "beta", beta, tx);
        MeshTensor y = allocate(tx.shape(), tx.layout(), tx.dtype());
        MeshTensor mean = null;
        MeshTensor rstd = null;
        try {
            mean = allocate(statsShape(tx.shape()), tx.layout(), DType.FP32);
            rstd = allocate(statsShape(tx.shape()), tx.layout(), DType.FP32);
            layerNormKernel(y, mean, rstd, tx, tg, tb, eps);
            return new NormOutput(y, mean, rstd);
        } catch (RuntimeException | Error e) {
            closeAll(y, mean, rstd);
            throw e;
        }
    }

    @Override
    public Tensor layerNormBackwardInput(Tensor dy, Tensor x, Tensor gamma, Tensor mean, Tensor rstd) {
        String op = "layerNormBackwardInput";
        MeshTensor tx = rowInput(op, x);
        MeshTensor tdy = likeX(op, "dy", dy, tx);
        MeshTensor tg = rowParam(op, "gamma", gamma, tx);
        MeshTensor tm = stats(op, "mean", mean, tx);
        MeshTensor tr = stats(op, "rstd", rstd, tx);
        MeshTensor dx = allocate(tx.shape(), tx.layout(), tdy.dtype());
        return guard(dx, () -> layerNormBackwardInputKernel(dx, tdy, tx, tg, tm, tr));
    }

    @Override
    public void layerNormBackwardWeight(Tensor dy, Tensor x, Tensor mean, Tensor rstd, Tensor dGamma, Tensor dBeta,
                                        boolean accumulate) {
        String op = "layerNormBackwardWeight";
        MeshTensor tx = rowInput(op, x);
        MeshTensor tdy = likeX(op, "dy", dy, tx);
        MeshTensor tm = stats(op, "mean", mean, tx);
        MeshTensor tr = stats(op, "rstd", rstd, tx);
        MeshTensor tdg = dGamma == null ? null : rowGrad(op, "dGamma", dGamma, tx);
        MeshTensor tdb = dBeta == null ? null : rowGrad(op, "dBeta", dBeta, tx);
        if (tdg == null && tdb == null) return;
        layerNormBackwardWeightKernel(tdy, tx, tm, tr, tdg, tdb, accumulate);
    }

    @Override
    public NormOutput rmsNorm(Tensor x, Tensor gamma, float eps) {
        String op = "rmsNorm";
        MeshTensor tx = rowInput(op, x);
        MeshTensor tg = rowParam(op, "gamma", gamma, tx);
        MeshTensor y = allocate(tx.shape(), tx.layout(), tx.dtype());
        MeshTensor rstd = null;
        try {
            rstd = allocate(statsShape(tx.shape()), tx.layout(), DType.FP32);
            rmsNormKernel(y, rstd, tx, tg, eps);
            return new NormOutput(y, null, rstd);
        } catch (RuntimeException | Error e) {
            closeAll(y, rstd);
            throw e;
        }
    }

    @Override
    public Tensor rmsNormBackwardInput(Tensor dy, Tensor x, Tensor gamma, Tensor rstd) {
        String op = "rmsNormBackwardInput";
        MeshTensor tx = rowInput(op, x);
        MeshTensor tdy = likeX(op, "dy", dy, tx);
        MeshTensor tg = rowParam(op, "gamma", gamma, tx);
        MeshTensor tr = stats(op, "rstd", rstd, tx);
        MeshTensor dx = allocate(tx.shape(), tx.layout(), tdy.dtype());
        return guard(dx, () -> rmsNormBackwardInputKernel(dx, tdy, tx, tg, tr));
    }

    @Override
    public void rmsNormBackwardWeight(Tensor dy, Tensor x, Tensor rstd, Tensor dGamma, boolean accumulate) {
        String op = "rmsNormBackwardWeight";
        MeshTensor tx = rowInput(op, x);
        MeshTensor tdy = likeX(op, "dy", dy, tx);
        MeshTensor tr = stats(op, "rstd", rstd, tx);
        MeshTensor tdg = rowGrad(op, "dGamma", dGamma, tx);
        rmsNormBackwardWeightKernel(tdy, tx, tr, tdg, accumulate);
    }

    // ---- softmax, activations, rotary ----------------------------------------------------------------

    @Override
    public Tensor softmax(Tensor x, float scale, boolean causal) {
        String op = "softmax";
        MeshTensor tx = rowInput(op, x);
        if (causal && tx.shape().rank() < 2) {
            throw new DeviceException(op + ": causal softmax needs x [..., Tq, Tk], got " + tx.shape());
        }
        MeshTensor y = allocate(tx.shape(), tx.layout(), tx.dtype());
        return guard(y, () -> softmaxKernel(y, tx, scale, causal));
    }

    @Override
    public Tensor softmaxBackward(Tensor y, Tensor dy, float scale) {
        String op = "softmaxBackward";
        MeshTensor ty = rowInput(op, y);
        MeshTensor tdy = likeX(op, "dy", dy, ty);
        MeshTensor dx = allocate(ty.shape(), ty.layout(), tdy.dtype());
        return guard(dx, () -> softmaxBackwardKernel(dx, ty, tdy, scale));
    }

    @Override
    public Tensor gelu(Tensor x) {
        return activation("gelu", x, Activation.GELU);
    }

    @Override
    public Tensor geluBackward(Tensor dy, Tensor x) {
        return activationBackward("geluBackward", dy, x, Activation.GELU);
    }

    @Override
    public Tensor silu(Tensor x) {
        return activation("silu", x, Activation.SILU);
    }

    @Override
    public Tensor siluBackward(Tensor dy, Tensor x) {
        return activationBackward("siluBackward", dy, x, Activation.SILU);
    }

    private Tensor activation(String op, Tensor x, Activation f) {
        MeshTensor tx = floating(op, "x", x);
        LayoutRules.requireNoPartial(op, tx.layout());
        MeshTensor out = allocate(tx.shape(), tx.layout(), tx.dtype());
        return guard(out, () -> activationKernel(out, tx, f));
    }

    private Tensor activationBackward(String op, Tensor dy, Tensor x, Activation f) {
        MeshTensor tx = floating(op, "x", x);
        LayoutRules.requireNoPartial(op, tx.layout());
        MeshTensor tdy = likeX(op, "dy", dy, tx);
        MeshTensor dx = allocate(tx.shape(), tx.layout(), tdy.dtype());
        return guard(dx, () -> activationBackwardKernel(dx, tdy, tx, f));
    }

    @Override
    public Tensor rope(Tensor x, RopeFrequencies frequencies, boolean inverse) {
        String op = "rope";
        if (frequencies == null) throw new DeviceException(op + ": frequencies is null");
        MeshTensor tx = floating(op, "x", x);
        if (tx.shape().rank() != 4 || tx.shape().last() % 2 != 0) {
            throw new DeviceException(op + ": x must be [B, H, T, hd] with an even hd, got " + tx.shape());
        }
        LayoutRules.requireWholeLastDim(op, tx.shape(), tx.layout());
        MeshTensor out = allocate(tx.shape(), tx.layout(), tx.dtype());
        return guard(out, () -> ropeKernel(out, tx, frequencies, inverse));
    }

    // ---- elementwise and reductions ------------------------------------------------------------------

    @Override
    public Tensor add(Tensor a, Tensor b) {
        return binary("add", a, b, Binary.ADD);
    }

    @Override
    public Tensor mul(Tensor a, Tensor b) {
        return binary("mul", a, b, Binary.MUL);
    }

    private Tensor binary(String op, Tensor a, Tensor b, Binary kind) {
        MeshTensor ta = floating(op, "a", a);
        MeshTensor tb = floating(op, "b", b);
        Shape sa = ta.shape();
        Shape sb = tb.shape();
        boolean fits = sb.rank() <= sa.rank();
        for (int i = 1; fits && i <= sb.rank(); i++) fits = sb.dim(-i) == sa.dim(-i);
        if (!fits) {
            throw new DeviceException(op + ": shapes " + sa + " and " + sb
                    + " do not broadcast: b must have a's shape or a's trailing dims");
        }
        Layout l = LayoutRules.broadcast(op, sa, ta.layout(), sb, tb.layout(), kind == Binary.MUL);
        MeshTensor out = allocate(sa, l, ta.dtype());
        return guard(out, () -> binaryKernel(out, ta, tb, kind));
    }

    @Override
    public Tensor scale(Tensor a, float s) {
        MeshTensor ta = floating("scale", "a", a);
        MeshTensor out = allocate(ta.shape(), ta.layout(), ta.dtype());
        return guard(out, () -> scaleKernel(out, ta, s));
    }

    @Override
    public void addInPlace(Tensor a, Tensor b, float alpha) {
        String op = "addInPlace";
        MeshTensor ta = floating(op, "a", a);
        MeshTensor tb = floating(op, "b", b);
        sameShape(op, ta, tb);
        LayoutRules.same(op, ta.shape(), ta.layout(), tb.shape(), tb.layout());
        axpyKernel(ta, tb, alpha);
    }

    @Override
    public void scaleInPlace(Tensor a, float s) {
        MeshTensor ta = floating("scaleInPlace", "a", a);
        scaleKernel(ta, ta, s);
    }

    @Override
    public void sumRows(Tensor x, Tensor out, boolean accumulate) {
        String op = "sumRows";
        MeshTensor tx = floating(op, "x", x);
        MeshTensor to = floating(op, "out", out);
        requireRank(op, tx, 1);
        Shape expected = Shape.of(tx.shape().last());
        expectOut(op, to, expected, LayoutRules.sumRows(tx.shape(), tx.layout()));
        sumRowsKernel(tx, to, accumulate);
    }

    @Override
    public Tensor sum(Tensor x, int dim, boolean keepDim) {
        String op = "sum";
        MeshTensor tx = floating(op, "x", x);
        int d = dimIndex(op, tx.shape(), dim);
        Shape outShape = keepDim ? tx.shape().with(d, 1) : remove(tx.shape(), d);
        Layout l = LayoutRules.reduceDim(tx.layout(), d, keepDim);
        MeshTensor out = allocate(outShape, l, tx.dtype());
        return guard(out, () -> sumKernel(out, tx, d));
    }

    @Override
    public double sumSquares(Tensor x) {
        String op = "sumSquares";
        MeshTensor tx = floating(op, "x", x);
        LayoutRules.requireNoPartial(op, tx.layout());
        return sumSquaresKernel(tx);
    }

    @Override
    public Tensor repeatInterleave(Tensor x, int dim, int repeats) {
        String op = "repeatInterleave";
        MeshTensor tx = floating(op, "x", x);
        int d = dimIndex(op, tx.shape(), dim);
        if (repeats < 1) throw new DeviceException(op + ": repeats " + repeats + " must be >= 1 (x " + tx.shape() + ")");
        Shape outShape = tx.shape().with(d, Math.multiplyExact(tx.shape().dim(d), repeats));
        MeshTensor out = allocate(outShape, LayoutRules.repeatInterleave(tx.layout()), tx.dtype());
        return guard(out, () -> repeatInterleaveKernel(out, tx, d, repeats));
    }

    @Override
    public Tensor sumGroups(Tensor x, int dim, int groupSize) {
        String op = "sumGroups";
        MeshTensor tx = floating(op, "x", x);
        int d = dimIndex(op, tx.shape(), dim);
        if (groupSize < 1 || tx.localShape().dim(d) % groupSize != 0) {
            int axis = tx.layout().axisSharding(d);
            throw new DeviceException(op + ": group size " + groupSize + " does not divide dim " + d + " of "
                    + tx.shape() + (axis < 0 ? "" : " (local size " + tx.localShape().dim(d) + " on mesh axis " + axis + ")"));
        }
        Shape outShape = tx.shape().with(d, tx.shape().dim(d) / groupSize);
        MeshTensor out = allocate(outShape, LayoutRules.normalize(op, outShape, tx.layout(), submesh.shape()), tx.dtype());
        return guard(out, () -> sumGroupsKernel(out, tx, d, groupSize));
    }

    // ---- loss ----------------------------------------------------------------------------------------

    @Override
    public LossOutput crossEntropy(Tensor logits, Tensor targets, int ignoreIndex) {
        String op = "crossEntropy";
        MeshTensor tl = rowInput(op, logits);
        MeshTensor tt = targets(op, targets, tl);
        return crossEntropyKernel(tl, tt, ignoreIndex);
    }

    @Override
    public Tensor crossEntropyBackward(Tensor logits, Tensor targets, int ignoreIndex, float scale) {
        String op = "crossEntropyBackward";
        MeshTensor tl = rowInput(op, logits);
        MeshTensor tt = targets(op, targets, tl);
        MeshTensor out = allocate(tl.shape(), tl.layout(), tl.dtype());
        return guard(out, () -> crossEntropyBackwardKernel(out, tl, tt, ignoreIndex, scale));
    }

    private MeshTensor targets(String op, Tensor targets, MeshTensor logits) {
        MeshTensor tt = ints(op, "targets", targets);
        if (!tt.shape().equals(statsShape(logits.shape()))) {
            throw new DeviceException(op + ": logits " + logits.shape() + " and targets " + tt.shape()
                    + " do not fit: expected targets " + statsShape(logits.shape()));
        }
        if (!tt.layout().equals(LayoutRules.dropLastDim(logits.layout()))) {
            throw new DeviceException(op + ": logits layout " + logits.layout() + " and targets layout " + tt.layout()
                    + " differ (shapes " + logits.shape() + " and " + tt.shape() + ")");
        }
        return tt;
    }

    // ---- dropout -------------------------------------------------------------------------------------

    @Override
    public Tensor dropout(Tensor x, float p, long seed, long elementOffset) {
        return dropout("dropout", x, p, seed, elementOffset);
    }

    @Override
    public Tensor dropoutBackward(Tensor dy, float p, long seed, long elementOffset) {
        return dropout("dropoutBackward", dy, p, seed, elementOffset);
    }

    private Tensor dropout(String op, Tensor x, float p, long seed, long elementOffset) {
        MeshTensor tx = floating(op, "x", x);
        if (!(p >= 0f && p < 1f)) throw new DeviceException(op + ": probability " + p + " must be in [0, 1)");
        if (elementOffset < 0) throw new DeviceException(op + ": element offset " + elementOffset + " must be >= 0");
        LayoutRules.requireNoPartial(op, tx.layout());
        MeshTensor out = allocate(tx.shape(), tx.layout(), tx.dtype());
        return guard(out, () -> dropoutKernel(out, tx, p, seed, elementOffset));
    }

    // ---- optimizers ----------------------------------------------------------------------------------

    @Override
    public void adamw(Tensor param, Tensor grad, Tensor expAvg, Tensor expAvgSq, AdamWParams p) {
        String op = "adamw";
        requireNonNull(op, "params", p);
        MeshTensor tp = floating(op, "param", param);
        MeshTensor tg = optimizerState(op, "grad", grad, tp);
        MeshTensor tm = optimizerState(op, "expAvg", expAvg, tp);
        MeshTensor tv = optimizerState(op, "expAvgSq", expAvgSq, tp);
        if (p.step() < 1) throw new DeviceException(op + ": step " + p.step() + " must be >= 1");
        distinct(op, tp, tg, tm, tv);
        adamwKernel(tp, tg, tm, tv, p);
    }

    @Override
    public void sgd(Tensor param, Tensor grad, Tensor momentumBuffer, SgdParams p) {
        String op = "sgd";
        requireNonNull(op, "params", p);
        MeshTensor tp = floating(op, "param", param);
        MeshTensor tg = optimizerState(op, "grad", grad, tp);
        MeshTensor tb = null;
        if (p.momentum() != 0f) {
            if (momentumBuffer == null) throw new DeviceException(op + ": momentum " + p.momentum() + " needs a momentum buffer");
            tb = optimizerState(op, "momentumBuffer", momentumBuffer, tp);
        }
        if (p.step() < 1) throw new DeviceException(op + ": step " + p.step() + " must be >= 1");
        distinct(op, tp, tg, tb);
        sgdKernel(tp, tg, tb, p);
    }

    private MeshTensor optimizerState(String op, String name, Tensor t, MeshTensor param) {
        MeshTensor s = floating(op, name, t);
        if (!s.shape().equals(param.shape())) {
            throw new DeviceException(op + ": param " + param.shape() + " and " + name + " " + s.shape() + " differ");
        }
        LayoutRules.same(op, param.shape(), param.layout(), s.shape(), s.layout());
        LayoutRules.requireNoPartial(op, s.layout());
        return s;
    }

    // ---- collectives ---------------------------------------------------------------------------------

    @Override
    public Tensor allGather(Tensor x, int dim, int axis) {
        String op = "allGather";
        MeshTensor tx = arg(op, "x", x);
        requireAxis(op, axis);
        int d = dimIndex(op, tx.shape(), dim);
        Layout l = LayoutRules.allGather(op, tx.shape(), tx.layout(), d, axis);
        MeshTensor out = allocate(tx.shape(), l, tx.dtype());
        return guard(out, () -> allGatherKernel(out, tx, d, axis));
    }

    @Override
    public Tensor reduceScatter(Tensor x, int dim, int axis) {
        String op = "reduceScatter";
        MeshTensor tx = floating(op, "x", x);
        requireAxis(op, axis);
        int d = dimIndex(op, tx.shape(), dim);
        Layout l = LayoutRules.reduceScatter(op, tx.shape(), tx.layout(), d, axis, submesh.shape());
        MeshTensor out = allocate(tx.shape(), l, tx.dtype());
        return guard(out, () -> reduceScatterKernel(out, tx, d, axis));
    }

    @Override
    public Tensor allReduce(Tensor x, int axis, ReduceOp op) {
        String name = "allReduce";
        MeshTensor tx = floating(name, "x", x);
        requireAxis(name, axis);
        requireNonNull(name, "op", op);
        Layout l = LayoutRules.allReduce(name, tx.shape(), tx.layout(), axis);
        MeshTensor out = allocate(tx.shape(), l, tx.dtype());
        return guard(out, () -> allReduceKernel(out, tx, axis, op));
    }

    @Override
    public void allReduceInPlace(Tensor x, int axis, ReduceOp op) {
        String name = "allReduceInPlace";
        MeshTensor tx = floating(name, "x", x);
        requireAxis(name, axis);
        requireNonNull(name, "op", op);
        Layout l = LayoutRules.allReduce(name, tx.shape(), tx.layout(), axis);
        allReduceKernel(tx, tx, axis, op);
        tx.relayout(l);
    }

    // ---- argument checks (for subclasses too) ---------------------------------------------------------

    /** {@code t} as this backend's tensor: not null, of this backend, on this submesh, not closed. */
    protected final MeshTensor arg(String op, String name, Tensor t) {
        if (t == null) throw new DeviceException(op + ": " + name + " is null");
        if (!isOwnTensor(t)) {
            throw new DeviceException(op + ": " + name + " is a " + t.getClass().getSimpleName()
                    + ", not a tensor of this backend");
        }
        MeshTensor m = (MeshTensor) t;
        if (m.isClosed()) throw new DeviceException(op + ": " + name + " " + m.shape() + " is closed");
        if (m.submesh() != submesh) {
            throw new DeviceException(op + ": " + name + " " + m.shape() + " lives on submesh " + m.submesh().index()
                    + ", the op runs on submesh " + submesh.index());
        }
        return m;
    }

    /** {@link #arg} that must be FP32 or BF16. */
    protected final MeshTensor floating(String op, String name, Tensor t) {
        MeshTensor m = arg(op, name, t);
        if (m.dtype() == DType.INT32) {
            throw new DeviceException(op + ": " + name + " " + m.shape() + " is INT32, expected FP32 or BF16");
        }
        return m;
    }

    /** {@link #arg} that must be INT32. */
    protected final MeshTensor ints(String op, String name, Tensor t) {
        MeshTensor m = arg(op, name, t);
        if (m.dtype() != DType.INT32) {
            throw new DeviceException(op + ": " + name + " " + m.shape() + " is " + m.dtype() + ", expected INT32");
        }
        return m;
    }

    /** Frees {@code out} if {@code kernel} fails. */
    protected static Tensor guard(MeshTensor out, Runnable kernel) {
        try {
            kernel.run();
            return out;
        } catch (RuntimeException | Error e) {
            out.close();
            throw e;
        }
    }

    private Layout creatable(String op, Shape shape, Layout layout) {
        requireNonNull(op, "shape", shape);
        Layout l = LayoutRules.normalize(op, shape, layout, submesh.shape());
        if (l.hasPartial()) {
            throw new DeviceException(op + ": layout " + l + " has Partial, which host data cannot define; use "
                    + "fromHostLocal for per-device addends (or zeros)");
        }
        return l;
    }

    private static void requireLength(String op, int length, Shape shape) {
        if (length != shape.numel()) {
            throw new DeviceException(op + ": data has " + length + " elements, shape " + shape + " needs " + shape.numel());
        }
    }

    private static void requireFloatType(String op, DType dtype, String instead) {
        if (dtype == null) throw new DeviceException(op + ": dtype is null");
        if (dtype == DType.INT32) {
            throw new DeviceException(op + ": dtype INT32 needs integer data" + (instead == null ? "" : "; use " + instead));
        }
    }

    private static void requireNonNull(String op, String name, Object o) {
        if (o == null) throw new DeviceException(op + ": " + name + " is null");
    }

    private static void requireAxis(String op, int axis) {
        if (axis != 0 && axis != 1) throw new DeviceException(op + ": mesh axis " + axis + " out of range, expected 0 or 1");
    }

    private static void requireRank(String op, MeshTensor t, int min) {
        if (t.shape().rank() < min) {
            throw new DeviceException(op + ": x " + t.shape() + " needs at least " + min + " dims");
        }
    }

    private static int dimIndex(String op, Shape shape, int dim) {
        int d = dim < 0 ? dim + shape.rank() : dim;
        if (d < 0 || d >= shape.rank()) throw new DeviceException(op + ": dim " + dim + " out of range for shape " + shape);
        return d;
    }

    private static void sameShape(String op, MeshTensor a, MeshTensor b) {
        if (!a.shape().equals(b.shape())) {
            throw new DeviceException(op + ": shapes " + a.shape() + " and " + b.shape() + " differ");
        }
    }

    private static void expectOut(String op, MeshTensor out, Shape shape, Layout layout) {
        if (!out.shape().equals(shape)) {
            throw new DeviceException(op + ": out has shape " + out.shape() + ", the result has " + shape);
        }
        if (!out.layout().equals(layout)) {
            throw new DeviceException(op + ": out " + out.shape() + " has layout " + out.layout() + ", the result has "
                    + layout);
        }
    }

    private static void distinct(String op, MeshTensor... ts) {
        for (int i = 0; i < ts.length; i++) {
            for (int j = i + 1; j < ts.length; j++) {
                if (ts[i] != null && ts[j] != null && ts[i].storage() == ts[j].storage()) {
                    throw new DeviceException(op + ": arguments " + i + " and " + j + " share memory");
                }
            }
        }
    }

    /** A row-wise op's input: whole last dim, no Partial, floating. */
    private MeshTensor rowInput(String op, Tensor x) {
        MeshTensor tx = floating(op, "x", x);
        requireRank(op, tx, 1);
        LayoutRules.requireNoPartial(op, tx.layout());
        LayoutRules.requireWholeLastDim(op, tx.shape(), tx.layout());
        return tx;
    }

    /** A [D] parameter of a row-wise op: replicated. */
    private MeshTensor rowParam(String op, String name, Tensor t, MeshTensor x) {
        MeshTensor p = floating(op, name, t);
        if (!p.shape().equals(Shape.of(x.shape().last()))) {
            throw new DeviceException(op + ": x " + x.shape() + " and " + name + " " + p.shape() + " do not fit: expected "
                    + name + " [" + x.shape().last() + "]");
        }
        LayoutRules.requireReplicated(op, name, p.shape(), p.layout());
        return p;
    }

    /** A [D] gradient of a row-wise op's parameter: the layout of a sum over x's rows. */
    private MeshTensor rowGrad(String op, String name, Tensor t, MeshTensor x) {
        MeshTensor g = floating(op, name, t);
        expectOut(op, g, Shape.of(x.shape().last()), LayoutRules.sumRows(x.shape(), x.layout()));
        return g;
    }

    private MeshTensor likeX(String op, String name, Tensor t, MeshTensor x) {
        MeshTensor m = floating(op, name, t);
        if (!m.shape().equals(x.shape())) {
            throw new DeviceException(op + ": " + name + " " + m.shape() + " and x " + x.shape() + " differ");
        }
        LayoutRules.same(op, m.shape(), m.layout(), x.shape(), x.layout());
        return m;
    }

    private MeshTensor stats(String op, String name, Tensor t, MeshTensor x) {
        MeshTensor s = floating(op, name, t);
        Shape expected = statsShape(x.shape());
        if (!s.shape().equals(expected)) {
            throw new DeviceException(op + ": " + name + " " + s.shape() + " does not fit x " + x.shape() + ": expected "
                    + expected);
        }
        LayoutRules.same(op, x.shape(), x.layout(), s.shape(), s.layout());
        return s;
    }

    private static Shape matmulShape(String op, Shape a, boolean ta, Shape b, boolean tb) {
        int ra = a.rank();
        int rb = b.rank();
        boolean ranks = ra >= 2 && rb >= 2 && (rb == 2 || rb == ra);
        boolean batch = ranks;
        for (int i = 0; batch && rb > 2 && i < ra - 2; i++) batch = a.dim(i) == b.dim(i);
        if (!ranks || !batch || MatmulDims.of(a, ta, b, tb).k() != (tb ? b.dim(rb - 1) : b.dim(rb - 2))) {
            throw new DeviceException(op + ": shapes " + a + (ta ? "^T" : "") + " and " + b + (tb ? "^T" : "")
                    + " do not multiply: expected a [..., M, K] and b [K, N] or [..., K, N] with a's leading dims");
        }
        MatmulDims d = MatmulDims.of(a, ta, b, tb);
        int[] out = a.toArray();
        out[ra - 2] = d.m();
        out[ra - 1] = d.n();
        return Shape.of(out);
    }

    private static Shape statsShape(Shape x) {
        int[] d = x.toArray();
        return Shape.of(Arrays.copyOf(d, d.length - 1));
    }

    private static Shape append(Shape s, int last) {
        int[] d = Arrays.copyOf(s.toArray(), s.rank() + 1);
        d[s.rank()] = last;
        return Shape.of(d);
    }

    private static Shape remove(Shape s, int dim) {
        int[] d = s.toArray();
        int[] out = new int[d.length - 1];
        for (int i = 0, j = 0; i < d.length; i++) if (i != dim) out[j++] = d[i];
        return Shape.of(out);
    }

    private static void closeAll(Tensor... ts) {
        for (Tensor t : ts) if (t != null) t.close();
    }
}

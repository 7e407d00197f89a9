package dev.ttpipe.device;

/**
 * The operations of a submesh, at the granularity TTNN offers them. Every op runs SPMD: each device
 * applies it to its local pieces, and the output's {@link Layout} follows from the inputs' (the
 * rules are in {@link dev.ttpipe.device.spi.LayoutRules}; an op whose inputs' layouts cannot give a
 * well-defined result throws {@link DeviceException} naming the op and the layouts). Shapes in the
 * docs below are logical (global) shapes; "..." is any number of leading dimensions.
 *
 * <p>Ownership: returned tensors belong to the caller. Inputs are never consumed. Methods named
 * {@code ...Into} / {@code ...InPlace} write into a tensor the caller passes; with
 * {@code accumulate = false} they overwrite it (no prior zero-fill needed), with {@code true} they
 * add to it: this is how gradients accumulate over microbatches, overwrite-on-first-write.
 *
 * <p>Errors: a shape, dtype or layout mismatch throws {@link DeviceException} naming the op and both
 * shapes (or the sharded dimension and the axis size that does not divide it); running out of a
 * device's memory throws {@link DeviceOutOfMemoryException}. Neither leaves anything allocated.
 *
 * <p>Batched matmuls: a leading (batch) dimension sharded the same way on both operands stays
 * sharded on the output (attention over heads split by tensor parallelism).
 *
 * <p>Compute is fp32. BF16 inputs are read with conversion; outputs take the dtype of the first
 * tensor input unless stated. INT32 is for token ids.
 */
public interface Ops {
    Submesh submesh();

    // ---- creation and movement -------------------------------------------------------------

    /** Distributes a host array (row-major, the logical shape) per {@code layout} (no Partial). */
    Tensor fromHost(float[] data, Shape shape, Layout layout, DType dtype);

    /** Distributes host token ids as an INT32 tensor. */
    Tensor fromHostInts(int[] data, Shape shape, Layout layout);

    /**
     * Builds a tensor from explicit per-device pieces (row-major device order), for any layout
     * including Partial (each device's addend). {@code shape} is the logical shape.
     */
    Tensor fromHostLocal(float[][] pieces, Shape shape, Layout layout, DType dtype);

    Tensor zeros(Shape shape, Layout layout, DType dtype);

    Tensor full(Shape shape, Layout layout, DType dtype, float value);

    Tensor copy(Tensor x);

    /** Copies {@code src} into {@code dst} (same local shape; dtypes may differ: converts). */
    void copyInto(Tensor dst, Tensor src);

    Tensor typecast(Tensor x, DType dtype);

    /** A view with a new logical shape (same element count, row-major); shares memory with {@code x}. */
    Tensor reshape(Tensor x, Shape shape);

    /**
     * Moves {@code t} from another submesh of the same mesh (same submesh shape) onto this one and
     * returns it here; {@code t} is closed. Where devices share memory (cpu, sim) nothing is copied,
     * only the accounting moves from the old devices to the new; on hardware it is a device-to-device
     * copy. This is how the in-process transport hands tensors between stages.
     */
    Tensor adopt(Tensor t);

    /** A copy with dimensions reordered: output dim i is input dim {@code dims[i]}. */
    Tensor permute(Tensor x, int... dims);

    // ---- matmul ----------------------------------------------------------------------------
    // A matmul (and linear) with a BF16 operand multiplies in bf16: an FP32 operand is rounded to bf16,
    // the products are summed in fp32 and the result is stored in the output's dtype (the first
    // operand's for matmul and linear). Weights kept in FP32 are thus rounded where they are used.

    /**
     * {@code op(a) @ op(b)} where op transposes the last two dims when asked. a: [..., M, K] (as
     * given before the transpose), b: [K, N] or [..., K, N] with the same leading dims as a.
     */
    Tensor matmul(Tensor a, Tensor b, boolean transposeA, boolean transposeB);

    /** {@code out = alpha * op(a) @ op(b) + beta * out}; beta = 0 ignores out's contents. */
    void matmulInto(Tensor out, Tensor a, Tensor b, boolean transposeA, boolean transposeB, float alpha, float beta);

    /** {@code y = x @ w^T + bias}: x [..., in], w [out, in], bias [out] or null. */
    Tensor linear(Tensor x, Tensor w, Tensor bias);

    // ---- embedding -------------------------------------------------------------------------

    /** Rows of {@code table} [V, D] picked by INT32 {@code ids} [...]: output [..., D]. */
    Tensor embedding(Tensor ids, Tensor table);

    /** Scatter-adds {@code dOut} [..., D] into {@code dTable} [V, D] at rows {@code ids}. */
    void embeddingBackward(Tensor ids, Tensor dOut, Tensor dTable, boolean accumulate);

    // ---- normalisation ---------------------------------------------------------------------

    /** LayerNorm over the last dim: y = (x - mean) * rstd * gamma + beta; gamma, beta: [D]. */
    NormOutput layerNorm(Tensor x, Tensor gamma, Tensor beta, float eps);

    Tensor layerNormBackwardInput(Tensor dy, Tensor x, Tensor gamma, Tensor mean, Tensor rstd);

    /** dGamma = sum(dy * xhat), dBeta = sum(dy) over all rows (either may be null to skip). */
    void layerNormBackwardWeight(Tensor dy, Tensor x, Tensor mean, Tensor rstd, Tensor dGamma, Tensor dBeta,
                                 boolean accumulate);

    /** RMSNorm over the last dim: y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps). mean is null. */
    NormOutput rmsNorm(Tensor x, Tensor gamma, float eps);

    Tensor rmsNormBackwardInput(Tensor dy, Tensor x, Tensor gamma, Tensor rstd);

    void rmsNormBackwardWeight(Tensor dy, Tensor x, Tensor rstd, Tensor dGamma, boolean accumulate);

    // ---- softmax, activations, rotary --------------------------------------------------------

    /**
     * Softmax over the last dim of {@code scale * x}. With {@code causal}, x is [..., Tq, Tk] and
     * query i attends to keys j <= i + (Tk - Tq); masked entries are 0 in the output.
     */
    Tensor softmax(Tensor x, float scale, boolean causal);

    /** Gradient w.r.t. the softmax input, given its output y: scale * y * (dy - sum(dy * y)). */
    Tensor softmaxBackward(Tensor y, Tensor dy, float scale);

    /**
     * Scaled dot-product attention per leading index (batch, head): {@code O = softmax(scale Q K^T, causal) V}
     * with q [..., T, hd], k and v [..., Tk, hd] (causal: key j is seen by query i when j <= i). Returns O and
     * what {@link #attentionBackward} needs, in a form the backend chooses: by default the probabilities
     * [..., T, Tk] (this default is {@link #matmul}, {@link #softmax}, {@link #matmul}); a backend with a fused
     * kernel may keep only per-row statistics and recompute the probabilities.
     */
    default AttentionOutput attention(Tensor q, Tensor k, Tensor v, float scale, boolean causal) {
        Tensor att;
        try (Tensor scores = matmul(q, k, false, true)) {
            att = softmax(scores, scale, causal);
        }
        try {
            return new AttentionOutput(matmul(att, v, false, false), att);
        } catch (RuntimeException | Error e) {
            att.close();
            throw e;
        }
    }

    /**
     * The gradients of {@link #attention} given dO: {@code dV = P^T dO}, {@code dS = scale P (dP - rowsum(dP P))}
     * with {@code dP = dO V^T}, {@code dQ = dS K}, {@code dK = dS^T Q}. {@code out} is {@link #attention}'s
     * result for the same q, k, v, scale and causal (neither is closed).
     */
    default AttentionGrads attentionBackward(Tensor q, Tensor k, Tensor v, AttentionOutput out, Tensor dO, float scale,
                                             boolean causal) {
        Tensor att = out.saved();
        Tensor dS;
        try (Tensor dA = matmul(dO, v, false, true)) {
            dS = softmaxBackward(att, dA, scale);
        }
        try (dS) {
            Tensor dV = matmul(att, dO, true, false);
            Tensor dQ = null;
            try {
                dQ = matmul(dS, k, false, false);
                return new AttentionGrads(dQ, matmul(dS, q, true, false), dV);
            } catch (RuntimeException | Error e) {
                dV.close();
                if (dQ != null) dQ.close();
                throw e;
            }
        }
    }

    /** GELU, tanh approximation (GPT-2's). */
    Tensor gelu(Tensor x);

    Tensor geluBackward(Tensor dy, Tensor x);

    Tensor silu(Tensor x);

    Tensor siluBackward(Tensor dy, Tensor x);

    /**
     * Rotary position embedding on x [B, H, T, hd]: pair (2i, 2i+1) at position t rotated by
     * {@code t * frequencies.inverse(hd)[i]}; {@code inverse} rotates the other way (the backward).
     * A backend that cannot apply scaled frequencies throws {@link DeviceException} for them.
     */
    Tensor rope(Tensor x, RopeFrequencies frequencies, boolean inverse);

    /** Plain RoPE: pairs (2i, 2i+1) rotated by t * theta^(-2i/hd). */
    default Tensor rope(Tensor x, float theta, boolean inverse) {
        return rope(x, RopeFrequencies.of(theta), inverse);
    }

    // ---- elementwise and reductions ----------------------------------------------------------

    /** a + b; b has a's shape or a's trailing dims (broadcast over a's leading dims). */
    Tensor add(Tensor a, Tensor b);

    /** a * b elementwise; b has a's shape or a's trailing dims. */
    Tensor mul(Tensor a, Tensor b);

    Tensor scale(Tensor a, float s);

    /** a += alpha * b (same shape). */
    void addInPlace(Tensor a, Tensor b, float alpha);

    void scaleInPlace(Tensor a, float s);

    /** Sum over every dim but the last into {@code out} [N] (a bias gradient). */
    void sumRows(Tensor x, Tensor out, boolean accumulate);

    /** Sum over dimension {@code dim}. */
    Tensor sum(Tensor x, int dim, boolean keepDim);

    /** Sum of squares of the logical tensor, to the host (shards added, replicas counted once); NaN on sim. */
    double sumSquares(Tensor x);

    /** Repeats each slice of dim {@code dim} {@code repeats} times in place order (k -> k,k,..): GQA's key/value heads. */
    Tensor repeatInterleave(Tensor x, int dim, int repeats);

    /** The backward of {@link #repeatInterleave}: sums each run of {@code groupSize} slices of {@code dim}. */
    Tensor sumGroups(Tensor x, int dim, int groupSize);

    // ---- loss ---------------------------------------------------------------------------------

    /** Cross-entropy of logits [N, V] (or [..., V]) against INT32 targets [N] (or [...]). */
    LossOutput crossEntropy(Tensor logits, Tensor targets, int ignoreIndex);

    /** d(scale * sum of losses)/d(logits) = scale * (softmax - onehot); rows with the ignore index are 0. */
    Tensor crossEntropyBackward(Tensor logits, Tensor targets, int ignoreIndex, float scale);

    // ---- dropout --------------------------------------------------------------------------------

    /**
     * Inverted dropout with probability p. The mask is a pure function of (seed, elementOffset +
     * logical element index), so it is the same whatever the layout or device count, and a batch
     * split into microbatches (microbatch m passing elementOffset = m * its element count) draws
     * the same mask as the whole batch at once.
     */
    Tensor dropout(Tensor x, float p, long seed, long elementOffset);

    Tensor dropoutBackward(Tensor dy, float p, long seed, long elementOffset);

    // ---- optimizer kernels (in place, on every device's copy) -----------------------------------

    void adamw(Tensor param, Tensor grad, Tensor expAvg, Tensor expAvgSq, AdamWParams p);

    /** {@code momentumBuffer} may be null when momentum is 0. */
    void sgd(Tensor param, Tensor grad, Tensor momentumBuffer, SgdParams p);

    // ---- collectives over one submesh axis --------------------------------------------------------

    /** Shard(dim) on {@code axis} -> Replicate: every device gets the concatenation. */
    Tensor allGather(Tensor x, int dim, int axis);

    /** Partial on {@code axis} -> Shard(dim): sums the addends and leaves slice i on device i. */
    Tensor reduceScatter(Tensor x, int dim, int axis);

    /** Partial (or Replicate) on {@code axis} -> Replicate: every device gets the sum (or mean). */
    Tensor allReduce(Tensor x, int axis, ReduceOp op);

    /** {@link #allReduce} into x itself: x's layout becomes Replicate on {@code axis} (views of x keep theirs). */
    void allReduceInPlace(Tensor x, int axis, ReduceOp op);
}

package dev.ttpipe.stages;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.RopeFrequencies;

/**
 * The shape of a transformer, as TTML's {@code transformer_config}. GPT-2 (nanoGPT: learned
 * positions, LayerNorm, GELU MLP, biases), Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention,
 * no biases) or Qwen3 (a Llama whose attention also RMS-normalises each head of q and of k, with its
 * own gain of size head_dim, after the projection and before RoPE).
 *
 * @param numKvHeads      key/value heads (Llama GQA); equal to numHeads for GPT-2
 * @param intermediateDim MLP hidden size
 * @param recompute       TTML's {@code runner_type: memory_efficient}: keep only each block's input
 *                        in forward and recompute the rest in backward
 * @param dtype           TTML's {@code device_config.dtype}: what activations are stored in. BF16: the
 *                        embedding's output and every activation and activation gradient after it are
 *                        bf16, matmuls multiply bf16 operands (fp32 weights rounded where used) with
 *                        fp32 accumulation; weights, their gradients, optimizer state, norm statistics
 *                        and the loss stay fp32 (see the README's "bf16" section)
 * @param ropeScaling     Llama: TTML's / Hugging Face's {@code rope_scaling} of type llama3, which rescales
 *                        the RoPE frequencies (see {@link RopeFrequencies}); null: plain RoPE (and always for GPT-2)
 * @param headDim         the size of one attention head; 0: {@code embeddingDim / numHeads}. Llama and Qwen3
 *                        may give another (Hugging Face's {@code head_dim}): q is then {@code numHeads x headDim}
 *                        wide and the output projection maps that width back to embeddingDim
 * @param normEps         the epsilon of every norm; 0: the model type's ({@link ModelType#defaultNormEps})
 */
public record ModelSpec(ModelType type, int vocabSize, int embeddingDim, int numHeads, int numKvHeads,
                        int numBlocks, int intermediateDim, int maxSequenceLength, float dropout,
                        boolean weightTying, float ropeTheta, boolean recompute, DType dtype,
                        RopeFrequencies.Llama3Scaling ropeScaling, int headDim, float normEps) {

    /** The architectures; LLAMA and QWEN3 are the Llama family ({@link #isLlama()}). */
    public enum ModelType {
        GPT2, LLAMA, QWEN3;

        /** ttpipe's norm epsilon for the type: 1e-5 (GPT-2, Llama 2 and 3, TinyLlama); 1e-6 for Qwen3, as every Qwen3 is published. */
        public float defaultNormEps() {
            return this == QWEN3 ? 1e-6f : 1e-5f;
        }
    }

    public ModelSpec {
        if (embeddingDim < 1 || numHeads < 1 || numKvHeads < 1 || numBlocks < 0 || intermediateDim < 1 || maxSequenceLength < 1) {
            throw new StagesException("transformer_config: embedding_dim " + embeddingDim + ", num_heads " + numHeads + ", num_groups "
                    + numKvHeads + ", num_blocks " + numBlocks + ", intermediate_dim " + intermediateDim + ", max_sequence_length "
                    + maxSequenceLength + " given, expected positive sizes");
        }
        if (headDim == 0) {
            if (embeddingDim % numHeads != 0) {
                throw new StagesException("transformer_config.num_heads: " + numHeads + " heads do not divide embedding_dim "
                        + embeddingDim);
            }
            headDim = embeddingDim / numHeads;
        } else if (headDim < 1 || type == ModelType.GPT2 && headDim * numHeads != embeddingDim) {
            throw new StagesException("transformer_config.head_dim: " + headDim + " given for " + type + " with " + numHeads
                    + " heads and embedding_dim " + embeddingDim + ", expected " + (type == ModelType.GPT2
                    ? "embedding_dim / num_heads (GPT-2's head size)" : "a size >= 1"));
        }
        if (normEps == 0f) normEps = type.defaultNormEps();
        if (!(normEps > 0f) || Float.isInfinite(normEps)) {
            throw new StagesException("transformer_config.norm_eps: " + normEps + ", expected a finite number > 0");
        }
        if (numHeads % numKvHeads != 0) {
            throw new StagesException("transformer_config.num_groups: " + numKvHeads + " key/value heads do not divide num_heads "
                    + numHeads);
        }
        if (vocabSize < 1) throw new StagesException("transformer_config.vocab_size: " + vocabSize + ", expected >= 1");
        if (dtype != DType.FP32 && dtype != DType.BF16) {
            throw new StagesException("device_config.dtype: " + dtype + ", expected FP32 or BF16");
        }
        if (ropeScaling != null && type == ModelType.GPT2) {
            throw new StagesException("transformer_config.rope_scaling: given for " + type + ", expected it only for LLAMA or QWEN3"
                    + " (RoPE)");
        }
    }

    /** The model type's own head size (embeddingDim / numHeads) and norm epsilon. */
    public ModelSpec(ModelType type, int vocabSize, int embeddingDim, int numHeads, int numKvHeads, int numBlocks,
                     int intermediateDim, int maxSequenceLength, float dropout, boolean weightTying, float ropeTheta,
                     boolean recompute, DType dtype, RopeFrequencies.Llama3Scaling ropeScaling) {
        this(type, vocabSize, embeddingDim, numHeads, numKvHeads, numBlocks, intermediateDim, maxSequenceLength, dropout,
                weightTying, ropeTheta, recompute, dtype, ropeScaling, 0, 0f);
    }

    /** Plain RoPE (no scaling). */
    public ModelSpec(ModelType type, int vocabSize, int embeddingDim, int numHeads, int numKvHeads, int numBlocks,
                     int intermediateDim, int maxSequenceLength, float dropout, boolean weightTying, float ropeTheta,
                     boolean recompute, DType dtype) {
        this(type, vocabSize, embeddingDim, numHeads, numKvHeads, numBlocks, intermediateDim, maxSequenceLength, dropout,
                weightTying, ropeTheta, recompute, dtype, null);
    }

    /** An fp32 model. */
    public ModelSpec(ModelType type, int vocabSize, int embeddingDim, int numHeads, int numKvHeads, int numBlocks,
                     int intermediateDim, int maxSequenceLength, float dropout, boolean weightTying, float ropeTheta,
                     boolean recompute) {
        this(type, vocabSize, embeddingDim, numHeads, numKvHeads, numBlocks, intermediateDim, maxSequenceLength, dropout,
                weightTying, ropeTheta, recompute, DType.FP32);
    }

    /** The same model with activations stored in {@code activations} (FP32 or BF16). */
    public ModelSpec withDtype(DType activations) {
        return new ModelSpec(type, vocabSize, embeddingDim, numHeads, numKvHeads, numBlocks, intermediateDim,
                maxSequenceLength, dropout, weightTying, ropeTheta, recompute, activations, ropeScaling, headDim, normEps);
    }

    /** The same model with its RoPE frequencies rescaled by {@code scaling} (null: plain RoPE). */
    public ModelSpec withRopeScaling(RopeFrequencies.Llama3Scaling scaling) {
        return new ModelSpec(type, vocabSize, embeddingDim, numHeads, numKvHeads, numBlocks, intermediateDim,
                maxSequenceLength, dropout, weightTying, ropeTheta, recompute, dtype, scaling, headDim, normEps);
    }

    /** The same model with activations recomputed in backward ({@code runner_type: memory_efficient}) or stored. */
    public ModelSpec withRecompute(boolean recomputed) {
        return new ModelSpec(type, vocabSize, embeddingDim, numHeads, numKvHeads, numBlocks, intermediateDim,
                maxSequenceLength, dropout, weightTying, ropeTheta, recomputed, dtype, ropeScaling, headDim, normEps);
    }

    /** The same model with heads of size {@code size} and norms with epsilon {@code eps} (0: the type's own for either). */
    public ModelSpec withHeadDimAndNormEps(int size, float eps) {
        return new ModelSpec(type, vocabSize, embeddingDim, numHeads, numKvHeads, numBlocks, intermediateDim,
                maxSequenceLength, dropout, weightTying, ropeTheta, recompute, dtype, ropeScaling, size, eps);
    }

    /** The RoPE frequencies of a Llama or Qwen3: base {@link #ropeTheta()}, rescaled by {@link #ropeScaling()} when given. */
    public RopeFrequencies rope() {
        return new RopeFrequencies(ropeTheta, ropeScaling);
    }

    public static ModelSpec gpt2(int vocab, int dim, int heads, int blocks, int maxSeq) {
        return new ModelSpec(ModelType.GPT2, vocab, dim, heads, heads, blocks, 4 * dim, maxSeq, 0f, false, 10000f, false);
    }

    public static ModelSpec llama(int vocab, int dim, int heads, int kvHeads, int blocks, int maxSeq) {
        return new ModelSpec(ModelType.LLAMA, vocab, dim, heads, kvHeads, blocks, llamaIntermediate(dim), maxSeq, 0f,
                false, 10000f, false);
    }

    /** A Qwen3 (untied head, rope_theta 1e6 and norm epsilon 1e-6 as the published models) with heads of size {@code headDim}. */
    public static ModelSpec qwen3(int vocab, int dim, int heads, int kvHeads, int headDim, int blocks, int intermediate, int maxSeq) {
        return new ModelSpec(ModelType.QWEN3, vocab, dim, heads, kvHeads, blocks, intermediate, maxSeq, 0f, false, 1e6f, false,
                DType.FP32, null, headDim, 0f);
    }

    /** TTML/Llama's MLP size: 2/3 of 4 x dim, rounded up to a multiple of 256 (of 32 for small models). */
    public static int llamaIntermediate(int dim) {
        int hidden = 2 * 4 * dim / 3;
        int multiple = dim >= 1024 ? 256 : 32;
        return multiple * ((hidden + multiple - 1) / multiple);
    }

    /**
     * Whether the block is Llama's (RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases): true for
     * Llama and for Qwen3, which adds {@link #qkNorm()}.
     */
    public boolean isLlama() {
        return type != ModelType.GPT2;
    }

    /** Qwen3's RMSNorm of each head of q and of k (a gain of size headDim each), after the projection and before RoPE. */
    public boolean qkNorm() {
        return type == ModelType.QWEN3;
    }

    /** The width of q and of the output projection's input: numHeads x headDim (embeddingDim unless headDim is its own). */
    public int attentionDim() {
        return numHeads * headDim;
    }

    /** Parameters of one transformer block. */
    public long blockParameters() {
        long d = embeddingDim, q = attentionDim(), kv = (long) numKvHeads * headDim, f = intermediateDim;
        long attn = d * q * 2 + d * kv * 2;
        if (isLlama()) return attn + 3 * d * f + 2 * d + (qkNorm() ? 2L * headDim : 0);
        return attn + (q + d + kv) + 2 * d * f + f + d + 4 * d;   // biases of q, v, o (no key bias), mlp, norms
    }

    /**
     * Parameters of the whole model: the blocks, the token embedding (and GPT-2's learned positions), the final norm and
     * the LM head (none of its own when tied).
     */
    public long parameters() {
        long d = embeddingDim, v = vocabSize;
        long embedding = v * d + (isLlama() ? 0 : (long) maxSequenceLength * d);
        long head = (weightTying ? 0 : v * d) + (isLlama() ? d : 2 * d);
        return numBlocks * blockParameters() + embedding + head;
    }

    /**
     * Model FLOPs of one block, forward and backward, for {@code tokens} tokens of context {@code seq}:
     * 6 per parameter per token plus attention's 12 x (heads x head_dim) x seq per token (PaLM / nanoGPT's count).
     */
    public double blockTrainingFlops(long tokens, int seq) {
        return 6.0 * blockParameters() * tokens + 12.0 * attentionDim() * (double) seq * tokens;
    }

    /** Model FLOPs of the LM head (forward and backward) for {@code tokens} tokens. */
    public double headTrainingFlops(long tokens) {
        return 6.0 * embeddingDim * (double) vocabSize * tokens;
    }

    /** Model FLOPs of a whole training step over {@code tokens} tokens with context {@code seq}. */
    public double trainingFlops(long tokens, int seq) {
        return numBlocks * blockTrainingFlops(tokens, seq) + headTrainingFlops(tokens);
    }
}

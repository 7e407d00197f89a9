package dev.ttpipe.stages;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.RopeFrequencies;

/**
 * The shape of a transformer, as TTML's {@code transformer_config}. GPT-2 (nanoGPT: learned
 * positions, LayerNorm, GELU MLP, biases) or Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention,
 * no biases).
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
 */
public record ModelSpec(ModelType type, int vocabSize, int embeddingDim, int numHeads, int numKvHeads,
                        int numBlocks, int intermediateDim, int maxSequenceLength, float dropout,
                        boolean weightTying, float ropeTheta, boolean recompute, DType dtype,
                        RopeFrequencies.Llama3Scaling ropeScaling) {

    public enum ModelType { GPT2, LLAMA }

    public ModelSpec {
        if (embeddingDim < 1 || numHeads < 1 || numKvHeads < 1 || numBlocks < 0 || intermediateDim < 1 || maxSequenceLength < 1) {
            throw new StagesException("transformer_config: embedding_dim " + embeddingDim + ", num_heads " + numHeads + ", num_groups "
                    + numKvHeads + ", num_blocks " + numBlocks + ", intermediate_dim " + intermediateDim + ", max_sequence_length "
                    + maxSequenceLength + " given, expected positive sizes");
        }
        if (embeddingDim % numHeads != 0) {
            throw new StagesException("transformer_config.num_heads: " + numHeads + " heads do not divide embedding_dim "
                    + embeddingDim);
        }
        if (numHeads % numKvHeads != 0) {
            throw new StagesException("transformer_config.num_groups: " + numKvHeads + " key/value heads do not divide num_heads "
                    + numHeads);
        }
        if (vocabSize < 1) throw new StagesException("transformer_config.vocab_size: " + vocabSize + ", expected >= 1");
        if (dtype != DType.FP32 && dtype != DType.BF16) {
            throw new StagesException("device_config.dtype: " + dtype + ", expected FP32 or BF16");
        }
        if (ropeScaling != null && type != ModelType.LLAMA) {
            throw new StagesException("transformer_config.rope_scaling: given for " + type + ", expected it only for LLAMA (RoPE)");
        }
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
                maxSequenceLength, dropout, weightTying, ropeTheta, recompute, activations, ropeScaling);
    }

    /** The same model with its RoPE frequencies rescaled by {@code scaling} (null: plain RoPE). */
    public ModelSpec withRopeScaling(RopeFrequencies.Llama3Scaling scaling) {
        return new ModelSpec(type, vocabSize, embeddingDim, numHeads, numKvHeads, numBlocks, intermediateDim,
                maxSequenceLength, dropout, weightTying, ropeTheta, recompute, dtype, scaling);
    }

    /** The RoPE frequencies of a Llama: base {@link #ropeTheta()}, rescaled by {@link #ropeScaling()} when given. */
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

    /** TTML/Llama's MLP size: 2/3 of 4 x dim, rounded up to a multiple of 256 (of 32 for small models). */
    public static int llamaIntermediate(int dim) {
        int hidden = 2 * 4 * dim / 3;
        int multiple = dim >= 1024 ? 256 : 32;
        return multiple * ((hidden + multiple - 1) / multiple);
    }

    public int headDim() {
        return embeddingDim / numHeads;
    }

    public boolean isLlama() {
        return type == ModelType.LLAMA;
    }

    /** Parameters of one transformer block. */
    public long blockParameters() {
        long d = embeddingDim, kv = (long) numKvHeads * headDim(), f = intermediateDim;
        long attn = d * d * 2 + d * kv * 2;
        if (isLlama()) return attn + 3 * d * f + 2 * d;
        return attn + (2 * d + kv) + 2 * d * f + f + d + 4 * d;   // biases of q, v, o (no key bias), mlp, norms
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
     * 6 per parameter per token plus attention's 12 x dim x seq per token (PaLM / nanoGPT's count).
     */
    public double blockTrainingFlops(long tokens, int seq) {
        return 6.0 * blockParameters() * tokens + 12.0 * embeddingDim * (double) seq * tokens;
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

package dev.ttpipe.stages.checkpoint;

import dev.ttpipe.stages.ModelSpec;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Writes a ttpipe checkpoint's weights as a Hugging Face model directory that {@code from_pretrained}
 * loads: {@code config.json} and one F32 {@code model.safetensors} (GPT-2 under {@code transformer.},
 * as {@code save_pretrained} writes it; the q/k rows of Llama and Qwen3, and Qwen3's q/k norm gains, back
 * in rotate-half order; no {@code lm_head.weight} when the head is tied). Optimizer moments are left out.
 */
public final class HfExport {
    private HfExport() {
    }

    /** What was written. */
    public record Written(Path weights, int tensors, long bytes) {
    }

    public static Written export(Path checkpointDir, ModelSpec spec, Path out) throws IOException {
        List<Path> files = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(checkpointDir, "stage-*.safetensors")) {
            ds.forEach(files::add);
        }
        if (files.isEmpty()) throw new CheckpointException(checkpointDir + ": no stage-*.safetensors files, expected a ttpipe checkpoint");
        files.sort(null);
        Map<String, SafeTensors.Entry> tensors = new LinkedHashMap<>();
        boolean head = false;
        for (Path f : files) {
            try (SafeTensors.Reader r = new SafeTensors.Reader(f)) {
                for (String name : r.tensors().keySet()) {
                    if (name.endsWith(CheckpointNames.EXP_AVG) || name.endsWith(CheckpointNames.EXP_AVG_SQ)) continue;
                    CheckpointNames.HostTensor t = new CheckpointNames.HostTensor(r.tensors().get(name).shape(), r.read(name));
                    int heads = HfModel.rotaryHeads(spec, name);
                    if (heads > 0) t = HfModel.toRotateHalf(t, heads);
                    head |= name.equals("lm_head.weight");
                    String hf = spec.isLlama() || name.equals("lm_head.weight") ? name : "transformer." + name;
                    tensors.put(hf, new SafeTensors.Entry(t.shape(), t.values()));
                }
            }
        }
        Files.createDirectories(out);
        Path weights = out.resolve(HfModel.WEIGHTS);
        SafeTensors.write(weights, tensors, Map.of("format", "pt"));
        Files.writeString(out.resolve(HfModel.CONFIG), configJson(spec, !head), StandardCharsets.UTF_8);
        return new Written(weights, tensors.size(), Files.size(weights));
    }

    /** config.json's rope_scaling: null, or Llama 3.1's llama3 object. */
    static String ropeScalingJson(ModelSpec s) {
        var r = s.ropeScaling();
        if (r == null) return "null";
        return String.format(Locale.ROOT, "{\"rope_type\": \"llama3\", \"factor\": %s, \"low_freq_factor\": %s, \"high_freq_factor\": %s,"
                + " \"original_max_position_embeddings\": %d}", Double.toString(r.factor()), Double.toString(r.lowFreqFactor()),
                Double.toString(r.highFreqFactor()), r.originalMaxPositions());
    }

    /** Hugging Face's config.json for the model. */
    public static String configJson(ModelSpec s, boolean tied) {
        if (s.isLlama()) {
            boolean qwen3 = s.qkNorm();
            return String.format(Locale.ROOT, """
                    {
                      "architectures": ["%s"],
                      "model_type": "%s",
                      "vocab_size": %d,
                      "hidden_size": %d,
                      "intermediate_size": %d,
                      "num_attention_heads": %d,
                      "num_key_value_heads": %d,
                      "head_dim": %d,
                      "num_hidden_layers": %d,
                      "max_position_embeddings": %d,
                      "rms_norm_eps": %s,
                      "rope_theta": %s,
                      "rope_scaling": %s,
                      "hidden_act": "silu",
                      "attention_bias": false,%s
                      "tie_word_embeddings": %s,
                      "torch_dtype": "float32"
                    }
                    """, qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM", qwen3 ? "qwen3" : "llama", s.vocabSize(), s.embeddingDim(),
                    s.intermediateDim(), s.numHeads(), s.numKvHeads(), s.headDim(), s.numBlocks(), s.maxSequenceLength(),
                    Float.toString(s.normEps()), Float.toString(s.ropeTheta()), ropeScalingJson(s),
                    qwen3 ? "\n  \"use_sliding_window\": false," : "\n  \"mlp_bias\": false,", tied);
        }
        return String.format(Locale.ROOT, """
                {
                  "architectures": ["GPT2LMHeadModel"],
                  "model_type": "gpt2",
                  "vocab_size": %d,
                  "n_embd": %d,
                  "n_head": %d,
                  "n_layer": %d,
                  "n_positions": %d,
                  "n_ctx": %d,
                  "n_inner": %d,
                  "activation_function": "gelu_new",
                  "layer_norm_epsilon": %s,
                  "resid_pdrop": 0.0,
                  "embd_pdrop": 0.0,
                  "attn_pdrop": 0.0,
                  "tie_word_embeddings": %s,
                  "bos_token_id": 50256,
                  "eos_token_id": 50256,
                  "torch_dtype": "float32"
                }
                """, s.vocabSize(), s.embeddingDim(), s.numHeads(), s.numBlocks(), s.maxSequenceLength(), s.maxSequenceLength(),
                s.intermediateDim(), Float.toString(s.normEps()), tied);
    }
}

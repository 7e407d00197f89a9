package dev.ttpipe.actors.config;

import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.checkpoint.HfModel;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Objects;

/**
 * The model shape of a job whose {@code init_from} (TTML's {@code model_path}) is a Hugging Face
 * model directory: taken from its config.json wherever the YAML does not give it, before the config
 * is checked (model type, sizes, and for llama and qwen3 head_dim, theta and rope_scaling; the norms'
 * epsilon for all); a key the YAML gives differently is an error naming every difference in one line.
 */
public final class HfShape {
    static final String KEY = "training_config.init_from";

    private HfShape() {
    }

    /** The key the user wrote: init_from, or TTML's model_path. */
    public static String key(TtpipeConfig cfg) {
        return cfg.origins.given("training_config.model_path") ? "training_config.model_path" : KEY;
    }

    /** Takes the model's shape from config.json where the YAML leaves it out; refuses a key that contradicts it. */
    public static void applyShape(TtpipeConfig cfg) {
        if (cfg.training.initFrom == null) return;
        Path dir = Path.of(cfg.training.initFrom);
        if (!HfModel.isHfDir(dir)) return;
        HfModel.Config hf = HfModel.config(dir);
        TtpipeConfig.TransformerConfig t = cfg.transformer;
        List<String> diff = new ArrayList<>();
        String type = hf.type().name().toLowerCase(Locale.ROOT);
        boolean llama = hf.type() != ModelSpec.ModelType.GPT2;               // llama or qwen3: RoPE, GQA, RMSNorm
        t.modelType = take(cfg, "model_type", t.modelType, type, diff);
        if (llama) t.positionalEmbeddingType = "rope";
        t.vocabSize = take(cfg, "vocab_size", t.vocabSize, hf.vocabSize(), diff);
        t.embeddingDim = take(cfg, "embedding_dim", t.embeddingDim, hf.embeddingDim(), diff);
        t.numHeads = take(cfg, "num_heads", t.numHeads, hf.numHeads(), diff);
        if (llama) t.numGroups = take(cfg, "num_groups", t.numGroups, hf.numKvHeads(), diff);
        if (llama) t.headDim = take(cfg, "head_dim", t.headDim, hf.headDim(), diff);
        t.numBlocks = take(cfg, "num_blocks", t.numBlocks, hf.numBlocks(), diff);
        t.intermediateDim = take(cfg, "intermediate_dim", t.intermediateDim, hf.intermediateDim(), diff);
        if (!given(cfg, "max_sequence_length")) {
            t.maxSequenceLength = hf.maxSequenceLength();
        } else if (hf.type() == ModelSpec.ModelType.GPT2 ? t.maxSequenceLength != hf.maxSequenceLength()
                : t.maxSequenceLength > hf.maxSequenceLength()) {
            diff.add("max_sequence_length " + t.maxSequenceLength + " vs config.json's " + hf.maxSequenceLength()
                    + " (train on shorter sequences with sequence_length)");
        }
        if (llama) t.theta = take(cfg, "theta", t.theta, hf.ropeTheta(), diff);
        if (llama && !given(cfg, "rope_scaling")) {
            t.ropeScaling = hf.ropeScaling();
        } else if (llama && !Objects.equals(t.ropeScaling, hf.ropeScaling())) {
            diff.add("rope_scaling " + t.ropeScaling + " vs config.json's " + hf.ropeScaling());
        }
        t.normEps = take(cfg, "norm_eps", t.normEps, hf.normEps(), diff);
        if (!given(cfg, "weight_tying")) {
            t.weightTying = hf.tied();                 // across stages too: the runtime sums the two copies' gradients
        } else if (t.weightTying && !hf.tied()) {                // false over a tied model: the head starts as a copy of wte
            diff.add("weight_tying true vs config.json's tie_word_embeddings false");
        }
        if (!diff.isEmpty()) {
            throw new ConfigException(cfg.origins.where(key(cfg)) + ": " + dir.resolve(HfModel.CONFIG) + " differs from transformer_config ("
                    + String.join(", ", diff) + "), expected the same values or those keys left out to take config.json's");
        }
    }

    /** Whether the YAML gives transformer_config's {@code key} (anywhere TTML puts it; model_type also as training_config's). */
    private static boolean given(TtpipeConfig cfg, String key) {
        return cfg.transformer.givenAt.containsKey(key) || key.equals("model_type") && cfg.origins.given("training_config.model_type");
    }

    private static String take(TtpipeConfig cfg, String key, String yaml, String hf, List<String> diff) {
        if (!given(cfg, key)) return hf;
        if (!yaml.equals(hf)) diff.add(key + " " + yaml + " vs config.json's " + hf);
        return yaml;
    }

    private static int take(TtpipeConfig cfg, String key, int yaml, int hf, List<String> diff) {
        if (!given(cfg, key)) return hf;
        if (yaml != hf) diff.add(key + " " + yaml + " vs config.json's " + hf);
        return yaml;
    }

    private static double take(TtpipeConfig cfg, String key, double yaml, double hf, List<String> diff) {
        if (!given(cfg, key)) return hf;
        if ((float) yaml != (float) hf) diff.add(String.format(Locale.ROOT, "%s %s vs config.json's %s", key, (float) yaml, (float) hf));
        return yaml;
    }
}

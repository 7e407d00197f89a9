package dev.ttpipe.stages.checkpoint;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.stages.ModelSpec;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A Hugging Face model directory: {@code config.json} and {@code model.safetensors}, or shards
 * {@code model-0000k-of-0000n.safetensors} listed in {@code model.safetensors.index.json}. GPT-2
 * ({@code GPT2LMHeadModel}: {@code wte}, {@code h.N.attn.c_attn} Conv1D {@code [in, out]}, with or
 * without the {@code transformer.} prefix), Llama ({@code LlamaForCausalLM}) and Qwen3
 * ({@code Qwen3ForCausalLM}: Llama's names plus {@code self_attn.q_norm} and {@code self_attn.k_norm}).
 *
 * <p>Tensors are read under ttpipe's checkpoint names ({@link CheckpointNames}), one at a time from
 * memory-mapped files, so a rank reads only the tensors of its own stages. Two conventions differ:
 * <ul>
 *   <li>The rotary embedding of Llama and Qwen3: Hugging Face rotates halves (dimension i pairs with
 *   i + hd/2), ttpipe rotates interleaved pairs (2i, 2i+1). The rows of each head of {@code q_proj} and
 *   {@code k_proj}, and the elements of Qwen3's {@code q_norm} and {@code k_norm} gains (one head each),
 *   are permuted on the way in ({@link #fromRotateHalf}) and back on the way out, which gives the same
 *   attention scores exactly (q.k sums the same products in another order; an RMSNorm over a head is
 *   the same whatever the order of its elements, as long as its gain is permuted with them).</li>
 *   <li>A tied LM head: the file has no {@code lm_head.weight}; the token embedding is read for it.</li>
 * </ul>
 * GPT-2's key bias (in {@code c_attn.bias}) is read and dropped by {@link CheckpointNames}: ttpipe has
 * none, and dropping it is exact, since q.b_k adds the same constant to every score of a query's row,
 * which softmax cancels.
 */
public final class HfModel implements AutoCloseable {
    public static final String CONFIG = "config.json", WEIGHTS = "model.safetensors", INDEX = "model.safetensors.index.json";

    /**
     * What config.json says about the model's shape; {@code ropeScaling}: its llama3 {@code rope_scaling} (null: none);
     * {@code headDim}: {@code head_dim} (hidden_size / heads when absent); {@code normEps}: the norms' epsilon.
     */
    public record Config(ModelSpec.ModelType type, int vocabSize, int embeddingDim, int numHeads, int numKvHeads, int numBlocks,
                         int intermediateDim, int maxSequenceLength, float ropeTheta, boolean tied,
                         RopeFrequencies.Llama3Scaling ropeScaling, int headDim, float normEps) {

        public ModelSpec spec() {
            return new ModelSpec(type, vocabSize, embeddingDim, numHeads, numKvHeads, numBlocks, intermediateDim, maxSequenceLength,
                    0f, tied, ropeTheta, false, DType.FP32, ropeScaling, headDim, normEps);
        }
    }

    private final Path dir;
    private final ModelSpec spec;
    private final boolean tied;
    private final Map<String, SafeTensors.Reader> byTensor = new LinkedHashMap<>();
    private final List<SafeTensors.Reader> readers = new ArrayList<>();

    /** True for a directory with a config.json and safetensors weights. */
    public static boolean isHfDir(Path dir) {
        return Files.isRegularFile(dir.resolve(CONFIG))
                && (Files.isRegularFile(dir.resolve(WEIGHTS)) || Files.isRegularFile(dir.resolve(INDEX)));
    }

    /**
     * Reads config.json.
     *
     * @throws CheckpointException naming the file and key for a model ttpipe cannot run exactly
     */
    public static Config config(Path dir) {
        Path file = dir.resolve(CONFIG);
        Map<?, ?> c;
        try {
            Object parsed = MiniJson.read(file);
            if (!(parsed instanceof Map<?, ?> m)) throw new CheckpointException(file + ": not a JSON object");
            c = m;
        } catch (IOException | IllegalArgumentException e) {
            throw new CheckpointException(file + ": cannot be read (" + e.getMessage() + ")");
        }
        String type = String.valueOf(c.get("model_type"));
        switch (type) {
            case "gpt2" -> {
                int d = num(file, c, "n_embd", null), heads = num(file, c, "n_head", null);
                expect(file, c, "activation_function", "gelu_new", "ttpipe's GELU is the tanh approximation (gelu_new)");
                return new Config(ModelSpec.ModelType.GPT2, num(file, c, "vocab_size", null), d, heads, heads,
                        num(file, c, "n_layer", null), num(file, c, "n_inner", 4 * d),
                        num(file, c, "n_positions", num(file, c, "n_ctx", 1024)), 10000f,
                        !Boolean.FALSE.equals(c.get("tie_word_embeddings")), null, d / heads, eps(file, c, "layer_norm_epsilon", 1e-5));
            }
            case "llama" -> {
                return llamaFamily(file, c, ModelSpec.ModelType.LLAMA);
            }
            case "qwen3" -> {
                if (Boolean.TRUE.equals(c.get("use_sliding_window"))) {
                    throw new CheckpointException(file + ": use_sliding_window true given: not supported (ttpipe's attention sees"
                            + " the whole context), expected false");
                }
                if (c.get("layer_types") instanceof List<?> layers) {
                    for (Object l : layers) {
                        if (!"full_attention".equals(l)) {
                            throw new CheckpointException(file + ": layer_types '" + l + "' given: not supported (ttpipe's attention"
                                    + " sees the whole context), expected full_attention in every layer");
                        }
                    }
                }
                return llamaFamily(file, c, ModelSpec.ModelType.QWEN3);
            }
            default -> throw new CheckpointException(file + ": model_type '" + type + "' given, expected gpt2, llama or qwen3");
        }
    }

    /** A Llama or a Qwen3 (the same keys; Qwen3's q/k norms have no switch of their own). */
    private static Config llamaFamily(Path file, Map<?, ?> c, ModelSpec.ModelType type) {
        int heads = num(file, c, "num_attention_heads", null), d = num(file, c, "hidden_size", null);
        expect(file, c, "hidden_act", "silu", "ttpipe's " + type + " MLP is SwiGLU with SiLU");
        if (Boolean.TRUE.equals(c.get("attention_bias")) || Boolean.TRUE.equals(c.get("mlp_bias"))) {
            throw new CheckpointException(file + ": attention_bias/mlp_bias true given: not supported (ttpipe's " + type + " has no"
                    + " biases), expected false");
        }
        Object headDim = c.get("head_dim");
        if (headDim == null && d % heads != 0) {
            throw new CheckpointException(file + ": num_attention_heads " + heads + " does not divide hidden_size " + d
                    + " and no head_dim is given, expected head_dim or a divisor of hidden_size");
        }
        int hd = headDim == null ? d / heads : num(file, c, "head_dim", null);
        if (hd < 2 || hd % 2 != 0) {
            throw new CheckpointException(file + ": head_dim " + hd + " given, expected an even size >= 2 (RoPE turns pairs)");
        }
        Object theta = c.get("rope_theta");
        return new Config(type, num(file, c, "vocab_size", null), d, heads, num(file, c, "num_key_value_heads", heads),
                num(file, c, "num_hidden_layers", null), num(file, c, "intermediate_size", null),
                num(file, c, "max_position_embeddings", 2048), theta == null ? 10000f : ((Number) theta).floatValue(),
                Boolean.TRUE.equals(c.get("tie_word_embeddings")), ropeScaling(file, c.get("rope_scaling")), hd,
                eps(file, c, "rms_norm_eps", 1e-6));                 // absent: LlamaConfig's and Qwen3Config's default
    }

    /**
     * config.json's {@code rope_scaling}: null or {@code rope_type} "default" is plain RoPE; "llama3" (Llama 3.1,
     * also under the older key {@code type}) needs factor, low_freq_factor, high_freq_factor and
     * original_max_position_embeddings; any other type (linear, dynamic, yarn, longrope) is refused by name.
     */
    static RopeFrequencies.Llama3Scaling ropeScaling(Path file, Object given) {
        if (given == null) return null;
        if (!(given instanceof Map<?, ?> r)) {
            throw new CheckpointException(file + ": rope_scaling " + given + " given, expected null or an object with rope_type llama3");
        }
        Object type = r.get("rope_type") != null ? r.get("rope_type") : r.get("type");
        if ("default".equals(type)) return null;
        if (!"llama3".equals(type)) {
            throw new CheckpointException(file + ": rope_scaling.rope_type '" + type + "' given: not supported (ttpipe implements"
                    + " Llama 3.1's scaling only), expected llama3, default or rope_scaling null");
        }
        try {
            return new RopeFrequencies.Llama3Scaling(scalingNumber(file, r, "factor"), scalingNumber(file, r, "low_freq_factor"),
                    scalingNumber(file, r, "high_freq_factor"), (int) scalingNumber(file, r, "original_max_position_embeddings"));
        } catch (DeviceException e) {
            throw new CheckpointException(file + ": " + e.getMessage());
        }
    }

    private static double scalingNumber(Path file, Map<?, ?> r, String key) {
        Object v = r.get(key);
        if (!(v instanceof Number n)) {
            throw new CheckpointException(file + ": rope_scaling." + key + ": " + v + " given, expected a number (llama3 scaling"
                    + " needs factor, low_freq_factor, high_freq_factor and original_max_position_embeddings)");
        }
        return n.doubleValue();
    }

    private static int num(Path file, Map<?, ?> c, String key, Integer dflt) {
        Object v = c.get(key);
        if (v == null) {
            if (dflt != null) return dflt;
            throw new CheckpointException(file + ": no " + key + ", expected a number");
        }
        if (!(v instanceof Long n) || n < 1 || n > Integer.MAX_VALUE) {
            throw new CheckpointException(file + ": " + key + ": " + v + " given, expected a positive integer");
        }
        return n.intValue();
    }

    private static void expect(Path file, Map<?, ?> c, String key, String value, String why) {
        Object v = c.get(key);
        if (v != null && !value.equals(v)) {
            throw new CheckpointException(file + ": " + key + " '" + v + "' given: not supported (" + why + "), expected " + value);
        }
    }

    /** A norm's epsilon ({@code dflt} when absent): a number > 0, read as the float the norms compute with. */
    private static float eps(Path file, Map<?, ?> c, String key, double dflt) {
        Object v = c.get(key);
        if (v == null) return (float) dflt;
        if (!(v instanceof Number n) || !(n.floatValue() > 0f) || Float.isInfinite(n.floatValue())) {
            throw new CheckpointException(file + ": " + key + ": " + v + " given, expected a number > 0");
        }
        return n.floatValue();
    }

    /** The one line naming every difference between config.json and the model the job describes, or null. */
    public static String mismatch(Config hf, ModelSpec spec) {
        List<String> d = new ArrayList<>();
        if (hf.type() != spec.type()) d.add("model_type " + hf.type().name().toLowerCase(Locale.ROOT) + " vs " + spec.type().name().toLowerCase(Locale.ROOT));
        if (hf.vocabSize() != spec.vocabSize()) d.add("vocab_size " + hf.vocabSize() + " vs " + spec.vocabSize());
        if (hf.embeddingDim() != spec.embeddingDim()) d.add("embedding_dim " + hf.embeddingDim() + " vs " + spec.embeddingDim());
        if (hf.numHeads() != spec.numHeads()) d.add("num_heads " + hf.numHeads() + " vs " + spec.numHeads());
        if (hf.numKvHeads() != spec.numKvHeads()) d.add("num_groups " + hf.numKvHeads() + " vs " + spec.numKvHeads());
        if (hf.headDim() != spec.headDim()) d.add("head_dim " + hf.headDim() + " vs " + spec.headDim());
        if (hf.numBlocks() != spec.numBlocks()) d.add("num_blocks " + hf.numBlocks() + " vs " + spec.numBlocks());
        if (hf.intermediateDim() != spec.intermediateDim()) d.add("intermediate_dim " + hf.intermediateDim() + " vs " + spec.intermediateDim());
        if (spec.isLlama() ? hf.maxSequenceLength() < spec.maxSequenceLength() : hf.maxSequenceLength() != spec.maxSequenceLength()) {
            d.add("max_sequence_length " + hf.maxSequenceLength() + " vs " + spec.maxSequenceLength());   // GPT-2's positions table
        }
        if (spec.isLlama() && hf.ropeTheta() != spec.ropeTheta()) d.add("theta " + hf.ropeTheta() + " vs " + spec.ropeTheta());
        if (spec.isLlama() && !Objects.equals(hf.ropeScaling(), spec.ropeScaling())) {
            d.add("rope_scaling " + hf.ropeScaling() + " vs " + spec.ropeScaling());
        }
        if (hf.normEps() != spec.normEps()) d.add("norm_eps " + hf.normEps() + " vs " + spec.normEps());
        return d.isEmpty() ? null : String.join(", ", d);
    }

    private HfModel(Path dir, ModelSpec spec, boolean tied) {
        this.dir = dir;
        this.spec = spec;
        this.tied = tied;
    }

    /**
     * Opens the weights of {@code dir} for a model of shape {@code spec} (checked against config.json).
     *
     * @throws CheckpointException naming the file: config.json that differs, an index or header that cannot be read
     */
    public static HfModel open(Path dir, ModelSpec spec) {
        Config cfg = config(dir);
        String diff = mismatch(cfg, spec);
        if (diff != null) {
            throw new CheckpointException(dir.resolve(CONFIG) + ": the model differs from the job's (config.json vs the job: " + diff
                    + "), expected the same shape (leave the transformer_config keys out to take config.json's)");
        }
        HfModel m = new HfModel(dir, spec, cfg.tied());
        try {
            List<Path> files = new ArrayList<>();
            if (Files.isRegularFile(dir.resolve(INDEX))) {
                Object idx = MiniJson.read(dir.resolve(INDEX));
                if (!(idx instanceof Map<?, ?> im) || !(im.get("weight_map") instanceof Map<?, ?> wm)) {
                    throw new CheckpointException(dir.resolve(INDEX) + ": no weight_map, expected {\"weight_map\": {tensor: file}}");
                }
                for (Object f : wm.values()) {
                    Path p = ListedFile.resolve(dir, String.valueOf(f), dir.resolve(INDEX) + ": weight_map");
                    if (!files.contains(p)) files.add(p);
                }
            } else {
                files.add(dir.resolve(WEIGHTS));
            }
            for (Path f : files) {
                if (!Files.isRegularFile(f)) throw new CheckpointException(f + ": missing (listed in " + dir.resolve(INDEX) + ")");
                SafeTensors.Reader r = new SafeTensors.Reader(f);
                m.readers.add(r);
                for (String n : r.tensors().keySet()) m.byTensor.put(n, r);
            }
            m.refuseBlocksBeyond(cfg);
        } catch (IOException | IllegalArgumentException e) {
            m.close();
            throw new CheckpointException(dir.resolve(INDEX) + ": cannot be read (" + e.getMessage() + ")");
        } catch (RuntimeException e) {
            m.close();
            throw e;
        }
        return m;
    }

    /** A block's tensors in Hugging Face's names: {@code h.3.} (GPT-2, also under {@code transformer.}), {@code model.layers.3.}. */
    private static final Pattern BLOCK = Pattern.compile("(?:^|\\.)(?:h|layers)\\.(\\d+)\\.");

    /**
     * Refuses weights with more blocks than config.json says (a smaller n_layer would otherwise load part of the model
     * silently), naming the first tensors beyond it.
     */
    private void refuseBlocksBeyond(Config cfg) {
        List<String> extra = new ArrayList<>();
        for (String name : byTensor.keySet()) {
            Matcher b = BLOCK.matcher(name);
            if (b.find() && (b.group(1).length() > 9 || Integer.parseInt(b.group(1)) >= cfg.numBlocks())) extra.add(name);
        }
        if (extra.isEmpty()) return;
        Collections.sort(extra);
        String key = cfg.type() == ModelSpec.ModelType.LLAMA ? "num_hidden_layers" : "n_layer";
        throw new CheckpointException(dir.resolve(CONFIG) + ": " + key + " " + cfg.numBlocks() + " given, but " + where()
                + " holds " + extra.size() + " tensors of blocks beyond it (" + String.join(", ", extra.subList(0, Math.min(3, extra.size())))
                + (extra.size() > 3 ? ", ..." : "") + "), expected " + key + " to count every block of the weights");
    }

    /** The file that holds a tensor, for messages: the one weights file or the index. */
    public Path where() {
        return readers.size() == 1 ? readers.get(0).file() : dir.resolve(INDEX);
    }

    /** The tensor a ttpipe checkpoint calls {@code name} (its HF name, the {@code transformer.} prefix, a tied head), or null. */
    public CheckpointNames.HostTensor read(String name) {
        String actual = find(name);
        if (actual == null && name.equals("lm_head.weight") && tied) actual = find(spec.isLlama() ? "model.embed_tokens.weight" : "wte.weight");
        if (actual == null) return null;
        SafeTensors.Reader r = byTensor.get(actual);
        CheckpointNames.HostTensor t = new CheckpointNames.HostTensor(r.tensors().get(actual).shape(), r.read(actual));
        int heads = rotaryHeads(spec, name);
        if (heads > 0) t = fromRotateHalf(t, heads);
        return t;
    }

    private String find(String name) {
        if (byTensor.containsKey(name)) return name;
        if (!spec.isLlama() && byTensor.containsKey("transformer." + name)) return "transformer." + name;
        return null;
    }

    /**
     * The heads whose rows a tensor's rotary order permutes (0: none): q_proj's and k_proj's of a Llama or Qwen3,
     * and one for Qwen3's q_norm and k_norm gains (a vector over one head's elements).
     */
    static int rotaryHeads(ModelSpec spec, String name) {
        if (!spec.isLlama()) return 0;
        if (name.endsWith(".self_attn.q_proj.weight")) return spec.numHeads();
        if (name.endsWith(".self_attn.k_proj.weight")) return spec.numKvHeads();
        if (spec.qkNorm() && (name.endsWith(".self_attn.q_norm.weight") || name.endsWith(".self_attn.k_norm.weight"))) return 1;
        return 0;
    }

    /** Rows of each head from Hugging Face's rotate-half order (i, i + hd/2) to interleaved pairs (2i, 2i+1). */
    static CheckpointNames.HostTensor fromRotateHalf(CheckpointNames.HostTensor t, int heads) {
        return permuteRows(t, heads, false);
    }

    /** The inverse of {@link #fromRotateHalf}: ttpipe's interleaved rows back to Hugging Face's order. */
    static CheckpointNames.HostTensor toRotateHalf(CheckpointNames.HostTensor t, int heads) {
        return permuteRows(t, heads, true);
    }

    /** Rows of a matrix [heads x hd, cols], or elements of a vector [heads x hd] (one column). */
    private static CheckpointNames.HostTensor permuteRows(CheckpointNames.HostTensor t, int heads, boolean toHf) {
        int rows = (int) t.shape()[0], cols = t.shape().length > 1 ? (int) t.shape()[1] : 1, hd = rows / heads, half = hd / 2;
        float[] out = new float[t.values().length];
        for (int h = 0; h < heads; h++) {
            for (int i = 0; i < half; i++) {
                for (int j = 0; j < 2; j++) {
                    int interleaved = h * hd + 2 * i + j, rotateHalf = h * hd + j * half + i;
                    int from = toHf ? interleaved : rotateHalf, to = toHf ? rotateHalf : interleaved;
                    System.arraycopy(t.values(), from * cols, out, to * cols, cols);
                }
            }
        }
        return new CheckpointNames.HostTensor(t.shape(), out);
    }

    @Override
    public void close() {
        readers.forEach(SafeTensors.Reader::close);
    }
}

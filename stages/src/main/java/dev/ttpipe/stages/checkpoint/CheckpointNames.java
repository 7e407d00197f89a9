package dev.ttpipe.stages.checkpoint;

import dev.ttpipe.stages.ModelSpec;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * Tensor names in checkpoint files: global, independent of the pipeline split, and Hugging Face's
 * for the model type, so a checkpoint reads like a {@code GPT2LMHeadModel}, {@code LlamaForCausalLM} or
 * {@code Qwen3ForCausalLM} state dict. Optimizer moments sit beside their parameter as {@code <name>.exp_avg} and
 * {@code <name>.exp_avg_sq}, transformed the same way.
 *
 * <p>Where ttpipe keeps a parameter differently from Hugging Face, the file follows Hugging Face:
 * <ul>
 *   <li>GPT-2's linear layers are Conv1D in Hugging Face, stored {@code [in, out]}; ttpipe's are
 *   {@code [out, in]}: {@code c_attn}, {@code c_proj} and {@code c_fc} weights are transposed.</li>
 *   <li>GPT-2's query, key and value projections are one {@code h.N.attn.c_attn} ({@code [d, 3d]},
 *   q then k then v along the output); ttpipe keeps three. Its bias is q's, then zeros for the key
 *   (ttpipe has no key bias: under softmax a per-query constant cancels), then v's.</li>
 *   <li>Llama's names map one to one ({@code blocks.N.mlp.w1/w3/w2} are {@code gate_proj/up_proj/down_proj}); so do
 *   Qwen3's, which adds {@code blocks.N.attn.q_norm.gamma} and {@code k_norm.gamma} ({@code self_attn.q_norm.weight},
 *   {@code self_attn.k_norm.weight}).</li>
 * </ul>
 */
public final class CheckpointNames {
    private CheckpointNames() {
    }

    /** A tensor on the host: its shape and row-major values. */
    public record HostTensor(long[] shape, float[] values) {
    }

    public static final String EXP_AVG = ".exp_avg", EXP_AVG_SQ = ".exp_avg_sq";

    private record Rule(Pattern ttpipe, String file, boolean transpose) {
    }

    private static final List<Rule> GPT2 = List.of(
            new Rule(Pattern.compile("embed\\.tokens"), "wte.weight", false),
            new Rule(Pattern.compile("embed\\.positions"), "wpe.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.norm1\\.gamma"), "h.$1.ln_1.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.norm1\\.beta"), "h.$1.ln_1.bias", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.attn\\.wo\\.weight"), "h.$1.attn.c_proj.weight", true),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.attn\\.wo\\.bias"), "h.$1.attn.c_proj.bias", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.norm2\\.gamma"), "h.$1.ln_2.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.norm2\\.beta"), "h.$1.ln_2.bias", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.mlp\\.w1\\.weight"), "h.$1.mlp.c_fc.weight", true),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.mlp\\.w1\\.bias"), "h.$1.mlp.c_fc.bias", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.mlp\\.w2\\.weight"), "h.$1.mlp.c_proj.weight", true),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.mlp\\.w2\\.bias"), "h.$1.mlp.c_proj.bias", false),
            new Rule(Pattern.compile("head\\.norm\\.gamma"), "ln_f.weight", false),
            new Rule(Pattern.compile("head\\.norm\\.beta"), "ln_f.bias", false),
            new Rule(Pattern.compile("head\\.lm"), "lm_head.weight", false));

    private static final List<Rule> LLAMA = List.of(
            new Rule(Pattern.compile("embed\\.tokens"), "model.embed_tokens.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.norm1\\.gamma"), "model.layers.$1.input_layernorm.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.attn\\.wq\\.weight"), "model.layers.$1.self_attn.q_proj.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.attn\\.wk\\.weight"), "model.layers.$1.self_attn.k_proj.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.attn\\.wv\\.weight"), "model.layers.$1.self_attn.v_proj.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.attn\\.wo\\.weight"), "model.layers.$1.self_attn.o_proj.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.norm2\\.gamma"), "model.layers.$1.post_attention_layernorm.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.mlp\\.w1\\.weight"), "model.layers.$1.mlp.gate_proj.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.mlp\\.w3\\.weight"), "model.layers.$1.mlp.up_proj.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.mlp\\.w2\\.weight"), "model.layers.$1.mlp.down_proj.weight", false),
            new Rule(Pattern.compile("head\\.norm\\.gamma"), "model.norm.weight", false),
            new Rule(Pattern.compile("head\\.lm"), "lm_head.weight", false));

    private static final List<Rule> QWEN3 = Stream.concat(LLAMA.stream(), Stream.of(
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.attn\\.q_norm\\.gamma"), "model.layers.$1.self_attn.q_norm.weight", false),
            new Rule(Pattern.compile("blocks\\.(\\d+)\\.attn\\.k_norm\\.gamma"), "model.layers.$1.self_attn.k_norm.weight", false))).toList();

    private static List<Rule> rules(ModelSpec spec) {
        return switch (spec.type()) {
            case GPT2 -> GPT2;
            case LLAMA -> LLAMA;
            case QWEN3 -> QWEN3;
        };
    }

    private static final Pattern GPT2_QKV = Pattern.compile("blocks\\.(\\d+)\\.attn\\.w([qkv])\\.(weight|bias)");
    private static final Pattern GPT2_C_ATTN = Pattern.compile("h\\.(\\d+)\\.attn\\.c_attn\\.(weight|bias)");

    /** ttpipe's tensors (parameters and their moments, by ttpipe name) under their file names. */
    public static Map<String, HostTensor> toFile(ModelSpec spec, Map<String, HostTensor> tensors) {
        Map<String, HostTensor> out = new LinkedHashMap<>();
        Map<String, HostTensor[]> qkv = new LinkedHashMap<>();
        for (Map.Entry<String, HostTensor> e : tensors.entrySet()) {
            String suffix = suffix(e.getKey());
            String name = e.getKey().substring(0, e.getKey().length() - suffix.length());
            Matcher m = GPT2_QKV.matcher(name);
            if (!spec.isLlama() && m.matches()) {
                String key = "h." + m.group(1) + ".attn.c_attn." + m.group(3) + suffix;
                qkv.computeIfAbsent(key, k -> new HostTensor[3])["qkv".indexOf(m.group(2))] = e.getValue();
                continue;
            }
            Rule r = rule(spec, name);
            out.put(fileName(r, name) + suffix, r.transpose() ? transpose(e.getValue()) : e.getValue());
        }
        for (Map.Entry<String, HostTensor[]> e : qkv.entrySet()) out.put(e.getKey(), fuse(e.getKey(), e.getValue()));
        return out;
    }

    /** Tensors read from files (by file name) under ttpipe's names; the inverse of {@link #toFile}. */
    public static Map<String, HostTensor> fromFile(ModelSpec spec, Map<String, HostTensor> file) {
        Map<String, HostTensor> out = new LinkedHashMap<>();
        for (Map.Entry<String, HostTensor> e : file.entrySet()) {
            String suffix = suffix(e.getKey());
            String name = e.getKey().substring(0, e.getKey().length() - suffix.length());
            Matcher m = GPT2_C_ATTN.matcher(name);
            if (!spec.isLlama() && m.matches()) {
                HostTensor[] parts = split(e.getKey(), e.getValue(), m.group(2).equals("weight"));
                String[] which = {"wq", "wk", "wv"};
                for (int i = 0; i < 3; i++) {
                    if (parts[i] == null) continue;                 // the key bias: ttpipe has none
                    out.put("blocks." + m.group(1) + ".attn." + which[i] + "." + m.group(2) + suffix, parts[i]);
                }
                continue;
            }
            Rule r = inverse(spec, name);
            if (r == null) throw new CheckpointException("tensor " + e.getKey() + " is not a parameter of a " + spec.type() + " model");
            Matcher fm = filePattern(r).matcher(name);
            fm.matches();
            String ttpipe = r.ttpipe().pattern().replace("\\.", ".");
            if (fm.groupCount() > 0) ttpipe = ttpipe.replace("(\\d+)", fm.group(1));
            out.put(ttpipe + suffix, r.transpose() ? transpose(e.getValue()) : e.getValue());
        }
        return out;
    }

    /** The file name of one ttpipe parameter (moments: append {@link #EXP_AVG} / {@link #EXP_AVG_SQ}). */
    public static String fileName(ModelSpec spec, String ttpipeName) {
        Matcher m = GPT2_QKV.matcher(ttpipeName);
        if (!spec.isLlama() && m.matches()) return "h." + m.group(1) + ".attn.c_attn." + m.group(3);
        return fileName(rule(spec, ttpipeName), ttpipeName);
    }

    private static String suffix(String name) {
        if (name.endsWith(EXP_AVG_SQ)) return EXP_AVG_SQ;
        if (name.endsWith(EXP_AVG)) return EXP_AVG;
        return "";
    }

    private static Rule rule(ModelSpec spec, String name) {
        for (Rule r : rules(spec)) if (r.ttpipe().matcher(name).matches()) return r;
        throw new IllegalArgumentException("no checkpoint name for parameter " + name + " of a " + spec.type() + " model");
    }

    private static String fileName(Rule r, String name) {
        return r.ttpipe().matcher(name).replaceAll(r.file());
    }

    private static Rule inverse(ModelSpec spec, String fileName) {
        for (Rule r : rules(spec)) if (filePattern(r).matcher(fileName).matches()) return r;
        return null;
    }

    private static Pattern filePattern(Rule r) {
        return Pattern.compile(Pattern.quote(r.file()).replace("$1", "\\E(\\d+)\\Q"));
    }

    static HostTensor transpose(HostTensor t) {
        if (t.shape().length != 2) return t;
        int rows = (int) t.shape()[0], cols = (int) t.shape()[1];
        float[] out = new float[t.values().length];
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < cols; c++) out[c * rows + r] = t.values()[r * cols + c];
        }
        return new HostTensor(new long[]{cols, rows}, out);
    }

    /** q, k, v ({@code [d, d]} weights or {@code [d]} biases; k's bias absent) into one Conv1D c_attn. */
    private static HostTensor fuse(String name, HostTensor[] qkv) {
        HostTensor q = qkv[0], v = qkv[2];
        if (q == null || v == null || (q.shape().length == 2 && qkv[1] == null)) {
            throw new IllegalArgumentException(name + ": query, key and value must all be present to fuse");
        }
        if (q.shape().length == 1) {
            int d = q.values().length;
            float[] out = new float[3 * d];
            System.arraycopy(q.values(), 0, out, 0, d);
            if (qkv[1] != null) System.arraycopy(qkv[1].values(), 0, out, d, d);
            System.arraycopy(v.values(), 0, out, 2 * d, d);
            return new HostTensor(new long[]{3L * d}, out);
        }
        List<HostTensor> parts = new ArrayList<>();
        for (HostTensor t : qkv) parts.add(transpose(t));                 // each [in, out]
        int in = (int) parts.get(0).shape()[0];
        int total = 0;
        for (HostTensor p : parts) total += (int) p.shape()[1];
        float[] out = new float[in * total];
        int col = 0;
        for (HostTensor p : parts) {
            int w = (int) p.shape()[1];
            for (int r = 0; r < in; r++) System.arraycopy(p.values(), r * w, out, r * total + col, w);
            col += w;
        }
        return new HostTensor(new long[]{in, total}, out);
    }

    /** c_attn back into q, k, v ([out, in] weights; biases, k's dropped when all zero). */
    private static HostTensor[] split(String name, HostTensor t, boolean weight) {
        if (!weight) {
            int d = t.values().length / 3;
            HostTensor[] out = new HostTensor[3];
            for (int i = 0; i < 3; i++) {
                out[i] = new HostTensor(new long[]{d}, Arrays.copyOfRange(t.values(), i * d, (i + 1) * d));
            }
            out[1] = null;    // ttpipe keeps no key bias (a per-query constant under softmax does not change attention)
            return out;
        }
        if (t.shape().length != 2 || t.shape()[1] % 3 != 0) {
            throw new CheckpointException("tensor " + name + ": shape " + Arrays.toString(t.shape())
                    + ", expected [d, 3d] (query, key, value)");
        }
        int in = (int) t.shape()[0], total = (int) t.shape()[1], w = total / 3;
        HostTensor[] out = new HostTensor[3];
        for (int i = 0; i < 3; i++) {
            float[] part = new float[in * w];
            for (int r = 0; r < in; r++) System.arraycopy(t.values(), r * total + i * w, part, r * w, w);
            out[i] = transpose(new HostTensor(new long[]{in, w}, part));
        }
        return out;
    }
}

package dev.ttpipe.stages.checkpoint;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.stages.Evaluation;
import dev.ttpipe.stages.LrSchedule;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.Optimizer;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.Param;
import dev.ttpipe.stages.ReferenceTrainer;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.independent.PlainTransformer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A small random GPT-2, Llama and Qwen3 written in Hugging Face's layout (names, Conv1D [in, out], fused
 * c_attn with a key bias, rotate-half q/k and Qwen3's q/k norm gains in that order, a head_dim apart from
 * hidden_size / heads, BF16, shards with an index), loaded into a two-stage split, and the loss on a fixed
 * batch checked against an fp64 forward written here in plain loops over the Hugging Face tensors; then
 * saved, exported and imported again. Qwen3 and a Llama with Llama 3.1's rope scaling also train a step
 * from their files, and that step's weights come back bit for bit through export and import.
 */
class HfWeightsTest {
    static final int B = 2, T = 8;

    @TempDir
    Path dir;

    record Tensor(long[] shape, double[] v) {
    }

    // ---- writing Hugging Face files (our own writer: F32, BF16, any dtype name) ----------------------------

    static void writeSafetensors(Path file, Map<String, Tensor> tensors, String dtype) throws IOException {
        int width = dtype.equals("F32") ? 4 : 2;
        StringBuilder h = new StringBuilder("{\"__metadata__\":{\"format\":\"pt\"}");
        long off = 0;
        for (Map.Entry<String, Tensor> e : tensors.entrySet()) {
            long n = e.getValue().v().length * (long) width;
            h.append(",\"").append(e.getKey()).append("\":{\"dtype\":\"").append(dtype).append("\",\"shape\":")
                    .append(Arrays.toString(e.getValue().shape()).replace(" ", "")).append(",\"data_offsets\":[")
                    .append(off).append(',').append(off + n).append("]}");
            off += n;
        }
        byte[] header = h.append('}').toString().getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocate((int) (8 + header.length + off)).order(ByteOrder.LITTLE_ENDIAN);
        b.putLong(header.length).put(header);
        for (Tensor t : tensors.values()) {
            for (double x : t.v()) {
                if (width == 4) b.putFloat((float) x);
                else b.putShort((short) (Float.floatToIntBits((float) x) >>> 16));   // BF16: values below are already bf16
            }
        }
        Files.write(file, b.array());
    }

    /** Rounds to what the file holds (bf16 keeps the top 16 bits of the float). */
    static double stored(double x, String dtype) {
        float f = (float) x;
        return dtype.equals("F32") ? f : Float.intBitsToFloat(Float.floatToIntBits(f) & 0xffff0000);
    }

    static Tensor random(Random r, String dtype, double mean, double std, long... shape) {
        int n = 1;
        for (long d : shape) n *= (int) d;
        double[] v = new double[n];
        for (int i = 0; i < n; i++) v[i] = stored(mean + std * r.nextGaussian(), dtype);
        return new Tensor(shape, v);
    }

    static final int V = 61, D = 16, L = 2, MAXSEQ = 16;

    static Map<String, Tensor> gpt2(Random r, String dtype) {
        Map<String, Tensor> m = new LinkedHashMap<>();
        m.put("transformer.wte.weight", random(r, dtype, 0, 0.3, V, D));
        m.put("transformer.wpe.weight", random(r, dtype, 0, 0.1, MAXSEQ, D));
        for (int l = 0; l < L; l++) {
            String p = "transformer.h." + l + ".";
            m.put(p + "ln_1.weight", random(r, dtype, 1, 0.1, D));
            m.put(p + "ln_1.bias", random(r, dtype, 0, 0.1, D));
            m.put(p + "attn.c_attn.weight", random(r, dtype, 0, 0.3, D, 3 * D));
            m.put(p + "attn.c_attn.bias", random(r, dtype, 0, 0.3, 3 * D));     // the key bias too: dropped exactly
            m.put(p + "attn.c_proj.weight", random(r, dtype, 0, 0.3, D, D));
            m.put(p + "attn.c_proj.bias", random(r, dtype, 0, 0.1, D));
            m.put(p + "ln_2.weight", random(r, dtype, 1, 0.1, D));
            m.put(p + "ln_2.bias", random(r, dtype, 0, 0.1, D));
            m.put(p + "mlp.c_fc.weight", random(r, dtype, 0, 0.3, D, 4 * D));
            m.put(p + "mlp.c_fc.bias", random(r, dtype, 0, 0.1, 4 * D));
            m.put(p + "mlp.c_proj.weight", random(r, dtype, 0, 0.2, 4 * D, D));
            m.put(p + "mlp.c_proj.bias", random(r, dtype, 0, 0.1, D));
        }
        m.put("transformer.ln_f.weight", random(r, dtype, 1, 0.1, D));
        m.put("transformer.ln_f.bias", random(r, dtype, 0, 0.1, D));
        return m;                                                   // tied: no lm_head.weight, as save_pretrained writes
    }

    static final int H = 4, HKV = 2, FF = 40;

    /**
     * A model of Llama's family as the files and the fp64 forward here see it: its config.json type, head size,
     * per-head q/k norms (Qwen3), norm epsilon and the RoPE inverse frequencies of one head.
     */
    record Family(String type, int hd, boolean qkNorm, double eps, double[] invFreq, String ropeScalingJson) {
        String config() {
            return "{\"architectures\":[\"" + (qkNorm ? "Qwen3" : "Llama") + "ForCausalLM\"],\"model_type\":\"" + type
                    + "\",\"vocab_size\":" + V + ",\"hidden_size\":" + D + ",\"intermediate_size\":" + FF
                    + ",\"num_attention_heads\":" + H + ",\"num_key_value_heads\":" + HKV + (hd != D / H ? ",\"head_dim\":" + hd : "")
                    + ",\"num_hidden_layers\":" + L + ",\"max_position_embeddings\":" + MAXSEQ + ",\"rms_norm_eps\":" + eps
                    + ",\"rope_theta\":10000.0" + (ropeScalingJson == null ? "" : ",\"rope_scaling\":" + ropeScalingJson) + ",\"hidden_act\":\"silu\","
                    + "\"attention_bias\":false,\"tie_word_embeddings\":false}";
        }
    }

    /** theta^(-2i/hd) for i < hd / 2. */
    static double[] plainFrequencies(int hd) {
        double[] f = new double[hd / 2];
        for (int i = 0; i < f.length; i++) f[i] = Math.pow(10000.0, -2.0 * i / hd);
        return f;
    }

    static final Family LLAMA = new Family("llama", D / H, false, 1e-5, plainFrequencies(D / H), null);
    /** Qwen3: heads of 8 where hidden_size / heads is 4 (q is 32 wide), q/k norms, its epsilon 1e-6. */
    static final Family QWEN3 = new Family("qwen3", 8, true, 1e-6, plainFrequencies(8), null);
    /**
     * Llama 3.1's scaling with 8 original positions: of head size 4's wavelengths 2 pi (between 8 / 4 and 8) is
     * blended and 200 pi divided by the factor 4; the frequencies by Hugging Face's formula ({@link PlainTransformer}).
     */
    static final Family LLAMA31 = new Family("llama", D / H, false, 1e-5,
            PlainTransformer.llama3InverseFrequencies(10000, D / H, 4, 1, 4, 8), "{\"rope_type\":\"llama3\",\"factor\":4.0,"
            + "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8}");

    static Map<String, Tensor> llama(Random r, String dtype, Family f) {
        int hd = f.hd();
        Map<String, Tensor> m = new LinkedHashMap<>();
        m.put("model.embed_tokens.weight", random(r, dtype, 0, 0.3, V, D));
        for (int l = 0; l < L; l++) {
            String p = "model.layers." + l + ".";
            m.put(p + "input_layernorm.weight", random(r, dtype, 1, 0.1, D));
            m.put(p + "self_attn.q_proj.weight", random(r, dtype, 0, 0.4, H * hd, D));
            m.put(p + "self_attn.k_proj.weight", random(r, dtype, 0, 0.4, HKV * hd, D));
            m.put(p + "self_attn.v_proj.weight", random(r, dtype, 0, 0.3, HKV * hd, D));
            m.put(p + "self_attn.o_proj.weight", random(r, dtype, 0, 0.3, D, H * hd));
            if (f.qkNorm()) {
                m.put(p + "self_attn.q_norm.weight", random(r, dtype, 1, 0.3, hd));
                m.put(p + "self_attn.k_norm.weight", random(r, dtype, 1, 0.3, hd));
            }
            m.put(p + "post_attention_layernorm.weight", random(r, dtype, 1, 0.1, D));
            m.put(p + "mlp.gate_proj.weight", random(r, dtype, 0, 0.3, FF, D));
            m.put(p + "mlp.up_proj.weight", random(r, dtype, 0, 0.3, FF, D));
            m.put(p + "mlp.down_proj.weight", random(r, dtype, 0, 0.3, D, FF));
        }
        m.put("model.norm.weight", random(r, dtype, 1, 0.1, D));
        m.put("lm_head.weight", random(r, dtype, 0, 0.3, V, D));
        return m;
    }

    static final String GPT2_CONFIG = "{\"architectures\":[\"GPT2LMHeadModel\"],\"model_type\":\"gpt2\",\"vocab_size\":" + V
            + ",\"n_embd\":" + D + ",\"n_head\":2,\"n_layer\":" + L + ",\"n_positions\":" + MAXSEQ + ",\"n_inner\":null,"
            + "\"activation_function\":\"gelu_new\",\"layer_norm_epsilon\":1e-05}";
    static final String LLAMA_CONFIG = LLAMA.config();

    /** GPT-2 ({@code family} null) in two shards with an index; the Llama family in one file, into folder {@code name}. */
    Path writeModel(String name, Family family, Map<String, Tensor> m, String dtype) throws IOException {
        Path d = Files.createDirectories(dir.resolve(name));
        Files.writeString(d.resolve("config.json"), family != null ? family.config() : GPT2_CONFIG);
        if (family != null) {
            writeSafetensors(d.resolve("model.safetensors"), m, dtype);
            return d;
        }
        Map<String, Tensor> a = new LinkedHashMap<>(), b = new LinkedHashMap<>();
        StringBuilder idx = new StringBuilder("{\"metadata\":{},\"weight_map\":{");
        for (Map.Entry<String, Tensor> e : m.entrySet()) {
            boolean first = !e.getKey().contains(".h.1.") && !e.getKey().contains("ln_f");
            (first ? a : b).put(e.getKey(), e.getValue());
            idx.append(idx.charAt(idx.length() - 1) == '{' ? "" : ",").append('"').append(e.getKey()).append("\":\"model-0000")
                    .append(first ? 1 : 2).append("-of-00002.safetensors\"");
        }
        writeSafetensors(d.resolve("model-00001-of-00002.safetensors"), a, dtype);
        writeSafetensors(d.resolve("model-00002-of-00002.safetensors"), b, dtype);
        Files.writeString(d.resolve("model.safetensors.index.json"), idx.append("}}").toString());
        return d;
    }

    // ---- the independent fp64 forward over Hugging Face tensors -----------------------------------------

    static double[] get(Map<String, Tensor> m, String name) {
        return m.get(name).v();
    }

    /** y[n] = sum_k x[k] * w[k][n] + b[n] with w [in, out] (Conv1D). */
    static double[] conv1d(double[] x, double[] w, double[] b, int in, int out) {
        double[] y = new double[out];
        for (int n = 0; n < out; n++) {
            double s = b == null ? 0 : b[n];
            for (int k = 0; k < in; k++) s += x[k] * w[k * out + n];
            y[n] = s;
        }
        return y;
    }

    /** y[n] = sum_k w[n][k] * x[k] with w [out, in] (nn.Linear). */
    static double[] linear(double[] x, double[] w, int in, int out) {
        double[] y = new double[out];
        for (int n = 0; n < out; n++) {
            double s = 0;
            for (int k = 0; k < in; k++) s += w[n * in + k] * x[k];
            y[n] = s;
        }
        return y;
    }

    static double[] layerNorm(double[] x, double[] g, double[] b) {
        double mean = 0, var = 0;
        for (double v : x) mean += v;
        mean /= x.length;
        for (double v : x) var += (v - mean) * (v - mean);
        var /= x.length;
        double[] y = new double[x.length];
        for (int i = 0; i < x.length; i++) y[i] = (x[i] - mean) / Math.sqrt(var + 1e-5) * g[i] + b[i];
        return y;
    }

    static double[] rmsNorm(double[] x, double[] g, double eps) {
        double ms = 0;
        for (double v : x) ms += v * v;
        ms /= x.length;
        double[] y = new double[x.length];
        for (int i = 0; i < x.length; i++) y[i] = x[i] / Math.sqrt(ms + eps) * g[i];
        return y;
    }

    /** Qwen3's q_norm / k_norm: each head's hd values of {@code v} through an RMSNorm with gain g [hd], in place. */
    static void rmsNormPerHead(double[] v, int heads, int hd, double[] g, double eps) {
        for (int h = 0; h < heads; h++) {
            double[] normed = rmsNorm(Arrays.copyOfRange(v, h * hd, (h + 1) * hd), g, eps);
            System.arraycopy(normed, 0, v, h * hd, hd);
        }
    }

    /** HF's rotate-half RoPE on one head vector at position t, pair i turned by t * invFreq[i]. */
    static void rotateHalf(double[] v, int off, int hd, int t, double[] invFreq) {
        int half = hd / 2;
        for (int i = 0; i < half; i++) {
            double a = t * invFreq[i], c = Math.cos(a), s = Math.sin(a);
            double x0 = v[off + i], x1 = v[off + i + half];
            v[off + i] = x0 * c - x1 * s;
            v[off + i + half] = x1 * c + x0 * s;
        }
    }

    /** Causal attention over one sequence: q [T][heads*hd], k, v [T][kvHeads*hd]. */
    static double[][] attention(double[][] q, double[][] k, double[][] v, int heads, int kvHeads, int hd) {
        int t = q.length;
        double[][] o = new double[t][heads * hd];
        for (int h = 0; h < heads; h++) {
            int kh = h / (heads / kvHeads);
            for (int i = 0; i < t; i++) {
                double[] s = new double[i + 1];
                double max = Double.NEGATIVE_INFINITY;
                for (int j = 0; j <= i; j++) {
                    double dot = 0;
                    for (int e = 0; e < hd; e++) dot += q[i][h * hd + e] * k[j][kh * hd + e];
                    s[j] = dot / Math.sqrt(hd);
                    max = Math.max(max, s[j]);
                }
                double z = 0;
                for (int j = 0; j <= i; j++) z += s[j] = Math.exp(s[j] - max);
                for (int j = 0; j <= i; j++) {
                    for (int e = 0; e < hd; e++) o[i][h * hd + e] += s[j] / z * v[j][kh * hd + e];
                }
            }
        }
        return o;
    }

    /** The mean loss of a GPT-2 ({@code family} null) or a model of Llama's family. */
    static double referenceLoss(Family family, Map<String, Tensor> m, Batch batch) {
        boolean llama = family != null;
        double sum = 0;
        int n = 0;
        for (int b = 0; b < batch.size(); b++) {
            double[][] x = new double[T][];
            for (int t = 0; t < T; t++) {
                int id = batch.inputs()[b * T + t];
                x[t] = new double[D];
                for (int e = 0; e < D; e++) {
                    x[t][e] = llama ? get(m, "model.embed_tokens.weight")[id * D + e]
                            : get(m, "transformer.wte.weight")[id * D + e] + get(m, "transformer.wpe.weight")[t * D + e];
                }
            }
            for (int l = 0; l < L; l++) x = llama ? llamaBlock(m, l, x, family) : gpt2Block(m, l, x);
            for (int t = 0; t < T; t++) {
                double[] h = llama ? rmsNorm(x[t], get(m, "model.norm.weight"), family.eps())
                        : layerNorm(x[t], get(m, "transformer.ln_f.weight"), get(m, "transformer.ln_f.bias"));
                double[] logits = linear(h, get(m, llama ? "lm_head.weight" : "transformer.wte.weight"), D, V);
                double max = Double.NEGATIVE_INFINITY, z = 0;
                for (double v : logits) max = Math.max(max, v);
                for (double v : logits) z += Math.exp(v - max);
                sum += Math.log(z) + max - logits[batch.targets()[b * T + t]];
                n++;
            }
        }
        return sum / n;
    }

    static double[][] gpt2Block(Map<String, Tensor> m, int l, double[][] x) {
        String p = "transformer.h." + l + ".";
        double[][] q = new double[T][], k = new double[T][], v = new double[T][];
        for (int t = 0; t < T; t++) {
            double[] qkv = conv1d(layerNorm(x[t], get(m, p + "ln_1.weight"), get(m, p + "ln_1.bias")),
                    get(m, p + "attn.c_attn.weight"), get(m, p + "attn.c_attn.bias"), D, 3 * D);
            q[t] = Arrays.copyOfRange(qkv, 0, D);
            k[t] = Arrays.copyOfRange(qkv, D, 2 * D);
            v[t] = Arrays.copyOfRange(qkv, 2 * D, 3 * D);
        }
        double[][] o = attention(q, k, v, 2, 2, D / 2);
        double[][] y = new double[T][];
        for (int t = 0; t < T; t++) {
            double[] a = conv1d(o[t], get(m, p + "attn.c_proj.weight"), get(m, p + "attn.c_proj.bias"), D, D);
            double[] r = new double[D];
            for (int e = 0; e < D; e++) r[e] = x[t][e] + a[e];
            double[] f = conv1d(layerNorm(r, get(m, p + "ln_2.weight"), get(m, p + "ln_2.bias")),
                    get(m, p + "mlp.c_fc.weight"), get(m, p + "mlp.c_fc.bias"), D, 4 * D);
            for (int i = 0; i < f.length; i++) {
                double u = f[i];
                f[i] = 0.5 * u * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (u + 0.044715 * u * u * u)));   // gelu_new
            }
            double[] mo = conv1d(f, get(m, p + "mlp.c_proj.weight"), get(m, p + "mlp.c_proj.bias"), 4 * D, D);
            y[t] = new double[D];
            for (int e = 0; e < D; e++) y[t][e] = r[e] + mo[e];
        }
        return y;
    }

    /** One block of Llama's family as Hugging Face's modeling code computes it (Qwen3: q_norm, k_norm on each head before RoPE). */
    static double[][] llamaBlock(Map<String, Tensor> m, int l, double[][] x, Family f) {
        String p = "model.layers." + l + ".";
        int hd = f.hd();
        double[][] q = new double[T][], k = new double[T][], v = new double[T][];
        for (int t = 0; t < T; t++) {
            double[] h = rmsNorm(x[t], get(m, p + "input_layernorm.weight"), f.eps());
            q[t] = linear(h, get(m, p + "self_attn.q_proj.weight"), D, H * hd);
            k[t] = linear(h, get(m, p + "self_attn.k_proj.weight"), D, HKV * hd);
            v[t] = linear(h, get(m, p + "self_attn.v_proj.weight"), D, HKV * hd);
            if (f.qkNorm()) {
                rmsNormPerHead(q[t], H, hd, get(m, p + "self_attn.q_norm.weight"), f.eps());
                rmsNormPerHead(k[t], HKV, hd, get(m, p + "self_attn.k_norm.weight"), f.eps());
            }
            for (int hh = 0; hh < H; hh++) rotateHalf(q[t], hh * hd, hd, t, f.invFreq());
            for (int hh = 0; hh < HKV; hh++) rotateHalf(k[t], hh * hd, hd, t, f.invFreq());
        }
        double[][] o = attention(q, k, v, H, HKV, hd);
        double[][] y = new double[T][];
        for (int t = 0; t < T; t++) {
            double[] a = linear(o[t], get(m, p + "self_attn.o_proj.weight"), H * hd, D);
            double[] r = new double[D];
            for (int e = 0; e < D; e++) r[e] = x[t][e] + a[e];
            double[] h = rmsNorm(r, get(m, p + "post_attention_layernorm.weight"), f.eps());
            double[] g = linear(h, get(m, p + "mlp.gate_proj.weight"), D, FF), u = linear(h, get(m, p + "mlp.up_proj.weight"), D, FF);
            for (int i = 0; i < FF; i++) g[i] = g[i] / (1 + Math.exp(-g[i])) * u[i];
            double[] mo = linear(g, get(m, p + "mlp.down_proj.weight"), FF, D);
            y[t] = new double[D];
            for (int e = 0; e < D; e++) y[t][e] = r[e] + mo[e];
        }
        return y;
    }

    // ---- the tests ------------------------------------------------------------------------------------

    static Batch batch(long seed) {
        Random r = new Random(seed);
        int[] in = new int[B * T], tg = new int[B * T];
        for (int i = 0; i < in.length; i++) {
            in[i] = r.nextInt(V);
            tg[i] = r.nextInt(V);
        }
        return new Batch(B, T, in, tg);
    }

    /**
     * The model loaded from {@code from}: in two stages (block 0 with the embedding, block 1 with the head)
     * unless the head is tied, which needs one stage holding both ends.
     */
    static double loss(MeshDevice mesh, ModelSpec spec, Path from, Batch batch, Path saveTo) throws IOException {
        List<Stage> stages = new ArrayList<>();
        try {
            if (spec.weightTying()) {
                stages.add(new Stage(spec, new StageSlice(0, 0, 0, 2, true, true), mesh.asSubmesh(), Parallelism.NONE, 1));
            } else {
                stages.add(new Stage(spec, new StageSlice(0, 0, 0, 1, true, false), mesh.asSubmesh(), Parallelism.NONE, 1));
                stages.add(new Stage(spec, new StageSlice(1, 1, 1, 2, false, true), mesh.asSubmesh(), Parallelism.NONE, 1));
            }
            StageState.load(from, spec, stages);
            double loss = Evaluation.meanLoss(stages, List.of(batch));
            if (saveTo != null) {
                Files.createDirectories(saveTo);
                Optimizer o = new Optimizer(OptimizerSpec.adamw(1e-3, 0));
                List<StageState.Snapshot> snaps = new ArrayList<>();
                for (Stage st : stages) snaps.add(StageState.snapshot(st, o));
                StageState.write(saveTo, snaps);
            }
            return loss;
        } finally {
            stages.forEach(Stage::close);
        }
    }

    /** GPT-2 ({@code family} null) or a model of Llama's family, written in {@code dtype}: the fp64 reference loss, export, import. */
    void checkModel(String name, Family family, String dtype) throws IOException {
        Map<String, Tensor> hf = family != null ? llama(new Random(7), dtype, family) : gpt2(new Random(5), dtype);
        Path model = writeModel(name, family, hf, dtype);
        ModelSpec spec = HfModel.config(model).spec();            // the shape from config.json
        assertEquals(family != null ? FF : 4 * D, spec.intermediateDim());
        Batch batch = batch(11);
        double expected = referenceLoss(family, hf, batch);
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults())) {
            Path ckpt = dir.resolve(name + "-ckpt");
            double got = loss(mesh, spec, model, batch, ckpt);
            assertTrue(Math.abs(got - expected) / expected < 1e-5, got + " vs the fp64 reference " + expected);

            Path out = dir.resolve(name + "-export");
            HfExport.export(ckpt, spec, out);
            try (SafeTensors.Reader r = new SafeTensors.Reader(out.resolve("model.safetensors"))) {
                assertEquals(hf.keySet(), r.tensors().keySet());
                for (Map.Entry<String, Tensor> e : hf.entrySet()) {
                    float[] back = r.read(e.getKey());
                    assertEquals(Arrays.toString(e.getValue().shape()), Arrays.toString(r.tensors().get(e.getKey()).shape()));
                    for (int i = 0; i < back.length; i++) {
                        boolean keyBias = e.getKey().endsWith("c_attn.bias") && i >= D && i < 2 * D;
                        float want = keyBias ? 0f : (float) e.getValue().v()[i];        // ttpipe keeps no key bias: exported as zeros
                        assertEquals(Float.floatToIntBits(want), Float.floatToIntBits(back[i]), e.getKey() + "[" + i + "]");
                    }
                }
            }
            assertEquals(spec, HfModel.config(out).spec(), "the exported config.json describes the same model");
            assertEquals(got, loss(mesh, spec, out, batch, null), 0.0, "export -> import gives the same loss");
        }
    }

    @Test
    void gpt2InHuggingFacesLayoutLoadsToTheFp64ReferenceLossAndRoundTrips() throws IOException {
        checkModel("gpt2", null, "F32");
    }

    @Test
    void llamaInBf16WithRotateHalfRopeLoadsToTheFp64ReferenceLossAndRoundTrips() throws IOException {
        checkModel("llama", LLAMA, "BF16");
    }

    @Test
    void qwen3WithQkNormsAndItsOwnHeadDimLoadsToTheFp64ReferenceLossAndRoundTrips() throws IOException {
        checkModel("qwen3", QWEN3, "BF16");
    }

    @Test
    void llamaWithLlama31RopeScalingLoadsToTheFp64ReferenceLossOnHuggingFacesFrequencies() throws IOException {
        checkModel("llama31", LLAMA31, "F32");
    }

    /**
     * A Qwen3 and a scaled Llama from their Hugging Face files train one AdamW step (the reference trainer), are
     * saved as a ttpipe checkpoint, exported, and imported again: every parameter comes back with the trained
     * step's bits, and the exported config.json gives the same model.
     */
    @Test
    void aTrainedStepOfQwen3AndScaledLlamaExportsAndReimportsBitForBit() throws IOException {
        for (Family f : List.of(QWEN3, LLAMA31)) {
            String name = f.type() + (f.ropeScalingJson() != null ? "-scaled" : "") + "-trained";
            Path model = writeModel(name, f, llama(new Random(3), "F32", f), "F32");
            ModelSpec spec = HfModel.config(model).spec();
            try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults().withThreads(1));
                 ReferenceTrainer trainer = new ReferenceTrainer(spec, mesh.asSubmesh(), Parallelism.NONE, 1,
                         OptimizerSpec.adamw(1e-2, 0.1), LrSchedule.constant(1e-2), 1.0, 1)) {
                StageState.load(model, spec, List.of(trainer.stage()));
                Map<String, float[]> before = trainer.weights();
                trainer.step(0, List.of(batch(5)));
                Map<String, float[]> trained = trainer.weights();
                assertTrue(!Arrays.equals(before.get("blocks.1.attn.wq.weight"), trained.get("blocks.1.attn.wq.weight")), name);
                if (f.qkNorm()) {
                    assertTrue(!Arrays.equals(before.get("blocks.0.attn.k_norm.gamma"), trained.get("blocks.0.attn.k_norm.gamma")),
                            "the k norm's gain trains");
                }

                Path ckpt = Files.createDirectories(dir.resolve(name + "-ckpt"));
                StageState.write(ckpt, List.of(StageState.snapshot(trainer.stage(), new Optimizer(OptimizerSpec.adamw(1e-2, 0.1)))));
                Path out = dir.resolve(name + "-export");
                HfExport.export(ckpt, spec, out);
                assertEquals(spec, HfModel.config(out).spec(), name + ": the exported config.json describes the same model");
                try (Stage again = new Stage(spec, new StageSlice(0, 0, 0, L, true, true), mesh.asSubmesh(), Parallelism.NONE, 99)) {
                    StageState.load(out, spec, List.of(again));
                    for (Param p : again.parameters()) {
                        float[] want = trained.get(p.name()), got = p.value().toHost();
                        for (int i = 0; i < want.length; i++) {
                            assertEquals(Float.floatToRawIntBits(want[i]), Float.floatToRawIntBits(got[i]), name + ": " + p.name() + "[" + i + "]");
                        }
                    }
                }
            }
        }
    }

    @Test
    void rotateHalfPermutationIsInvertedByExport() {
        float[] v = new float[8 * 3];
        for (int i = 0; i < v.length; i++) v[i] = i;
        CheckpointNames.HostTensor t = new CheckpointNames.HostTensor(new long[]{8, 3}, v);
        CheckpointNames.HostTensor in = HfModel.fromRotateHalf(t, 2);
        assertEquals(6f, in.values()[3]);            // head 0 row 1 (pair 0, second) is HF's row 2 (i=0 + half)
        assertTrue(Arrays.equals(v, HfModel.toRotateHalf(in, 2).values()));
    }

    @Test
    void llama3RopeScalingIsReadFromConfigJsonWrittenBackAndOtherTypesAreRefused() throws IOException {
        Path model = Files.createDirectories(dir.resolve("scaled"));
        Path json = model.resolve("config.json");
        String scaled = LLAMA_CONFIG.replace("\"rope_theta\"", "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
                + "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192},\"rope_theta\"");
        Files.writeString(json, scaled);
        HfModel.Config c = HfModel.config(model);
        assertEquals(new RopeFrequencies.Llama3Scaling(8, 1, 4, 8192), c.ropeScaling());
        assertEquals(c.ropeScaling(), c.spec().ropeScaling());

        Files.writeString(json, HfExport.configJson(c.spec(), false));               // what `ttpipe export` writes
        assertEquals(c.ropeScaling(), HfModel.config(model).ropeScaling());

        Files.writeString(json, LLAMA_CONFIG.replace("\"rope_theta\"", "\"rope_scaling\":{\"rope_type\":\"default\"},\"rope_theta\""));
        assertEquals(null, HfModel.config(model).ropeScaling());

        Files.writeString(json, scaled.replace("\"llama3\"", "\"yarn\""));
        CheckpointException e = assertThrows(CheckpointException.class, () -> HfModel.config(model));
        assertEquals(json + ": rope_scaling.rope_type 'yarn' given: not supported (ttpipe implements Llama 3.1's scaling only),"
                + " expected llama3, default or rope_scaling null", e.getMessage());

        Files.writeString(json, scaled.replace("\"high_freq_factor\":4.0,", ""));
        e = assertThrows(CheckpointException.class, () -> HfModel.config(model));
        assertTrue(e.getMessage().startsWith(json + ": rope_scaling.high_freq_factor: null given, expected a number"), e.getMessage());

        Files.writeString(json, scaled);
        ModelSpec unscaled = c.spec().withRopeScaling(null);
        assertTrue(HfModel.mismatch(HfModel.config(model), unscaled).startsWith("rope_scaling Llama3Scaling[factor=8.0"),
                HfModel.mismatch(HfModel.config(model), unscaled));
    }

    @Test
    void qwen3ConfigJsonGivesItsShapeAndWhatTtpipeCannotRunIsOneLineNamingTheKey() throws IOException {
        Path model = Files.createDirectories(dir.resolve("qwen3-config"));
        Path json = model.resolve("config.json");
        String qwen3 = QWEN3.config();
        Files.writeString(json, qwen3);
        HfModel.Config c = HfModel.config(model);
        assertEquals(ModelSpec.ModelType.QWEN3, c.type());
        assertEquals(8, c.headDim(), "head_dim, not hidden_size / heads");
        assertEquals(1e-6f, c.normEps());
        assertTrue(c.spec().qkNorm() && !c.spec().weightTying() && c.spec().attentionDim() == 32, c.spec().toString());

        Files.writeString(json, qwen3.replace("\"head_dim\":8,", ""));           // absent: hidden_size / heads
        assertEquals(D / H, HfModel.config(model).headDim());
        assertEquals("head_dim 4 vs 8", HfModel.mismatch(HfModel.config(model), c.spec()));
        assertTrue(qwen3.contains("\"rms_norm_eps\":1.0E-6,"), qwen3);
        Files.writeString(json, qwen3.replace("\"rms_norm_eps\":1.0E-6,", ""));   // absent: Qwen3Config's default
        assertEquals(1e-6f, HfModel.config(model).normEps());

        for (String[] bad : new String[][]{
                {"\"attention_bias\":false", "\"attention_bias\":true", "attention_bias/mlp_bias true given: not supported (ttpipe's"
                        + " QWEN3 has no biases), expected false"},
                {"\"tie_word_embeddings\"", "\"use_sliding_window\":true,\"tie_word_embeddings\"", "use_sliding_window true given: not"
                        + " supported (ttpipe's attention sees the whole context), expected false"},
                {"\"tie_word_embeddings\"", "\"layer_types\":[\"full_attention\",\"sliding_attention\"],\"tie_word_embeddings\"",
                        "layer_types 'sliding_attention' given: not supported (ttpipe's attention sees the whole context), expected"
                                + " full_attention in every layer"},
                {"\"rope_theta\"", "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0},\"rope_theta\"",
                        "rope_scaling.rope_type 'yarn' given: not supported (ttpipe implements Llama 3.1's scaling only), expected"
                                + " llama3, default or rope_scaling null"},
                {"\"hidden_act\":\"silu\"", "\"hidden_act\":\"gelu\"", "hidden_act 'gelu' given: not supported (ttpipe's QWEN3 MLP"
                        + " is SwiGLU with SiLU), expected silu"},
                {"\"head_dim\":8", "\"head_dim\":7", "head_dim 7 given, expected an even size >= 2 (RoPE turns pairs)"},
                {"\"model_type\":\"qwen3\"", "\"model_type\":\"qwen2\"", "model_type 'qwen2' given, expected gpt2, llama or qwen3"}}) {
            assertTrue(qwen3.contains(bad[0]), bad[0]);
            Files.writeString(json, qwen3.replace(bad[0], bad[1]));
            CheckpointException e = assertThrows(CheckpointException.class, () -> HfModel.config(model), bad[1]);
            assertEquals(json + ": " + bad[2], e.getMessage());
        }
    }

    @Test
    void badModelFilesAreOneLineNamingTheFileAndTensor() throws IOException {
        Map<String, Tensor> hf = gpt2(new Random(5), "F32");
        Path model = Files.createDirectories(dir.resolve("bad"));
        Files.writeString(model.resolve("config.json"), GPT2_CONFIG);
        ModelSpec spec = HfModel.config(model).spec();
        Path weights = model.resolve("model.safetensors");

        Map<String, Tensor> missing = new LinkedHashMap<>(hf);
        missing.remove("transformer.h.1.mlp.c_fc.bias");
        writeSafetensors(weights, missing, "F32");
        CheckpointException e = assertThrows(CheckpointException.class, () -> loadAll(spec, model));
        assertEquals(weights + ": no tensor h.1.mlp.c_fc.bias (parameter blocks.1.mlp.w1.bias)", e.getMessage());

        writeSafetensors(weights, hf, "I64");
        e = assertThrows(CheckpointException.class, () -> loadAll(spec, model));
        assertTrue(e.getMessage().startsWith(weights + ": tensor transformer.wte.weight: dtype I64 is not supported, expected F32, BF16 or F16"),
                e.getMessage());

        byte[] whole = Files.readAllBytes(weights);
        Files.write(weights, Arrays.copyOf(whole, 40));
        e = assertThrows(CheckpointException.class, () -> loadAll(spec, model));
        assertTrue(e.getMessage().startsWith(weights + ": header length"), e.getMessage());

        Files.writeString(model.resolve("config.json"), GPT2_CONFIG.replace("\"n_layer\":2", "\"n_layer\":3"));
        writeSafetensors(weights, hf, "F32");
        e = assertThrows(CheckpointException.class, () -> loadAll(spec, model));
        assertEquals(model.resolve("config.json") + ": the model differs from the job's (config.json vs the job: num_blocks 3 vs 2),"
                + " expected the same shape (leave the transformer_config keys out to take config.json's)", e.getMessage());
    }

    static void loadAll(ModelSpec spec, Path model) throws IOException {
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults())) {
            loss(mesh, spec, model, batch(1), null);
        }
    }
}

package dev.ttpipe.stages.checkpoint;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.stages.Evaluation;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.Optimizer;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.data.Batch;
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
 * A small random GPT-2 and Llama written in Hugging Face's layout (names, Conv1D [in, out], fused
 * c_attn with a key bias, rotate-half q/k, BF16, shards with an index), loaded into a two-stage split,
 * and the loss on a fixed batch checked against an fp64 forward written here in plain loops over the
 * Hugging Face tensors; then saved, exported and imported again.
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

    static final int H = 4, HKV = 2, HD = D / H, FF = 40;

    static Map<String, Tensor> llama(Random r, String dtype) {
        Map<String, Tensor> m = new LinkedHashMap<>();
        m.put("model.embed_tokens.weight", random(r, dtype, 0, 0.3, V, D));
        for (int l = 0; l < L; l++) {
            String p = "model.layers." + l + ".";
            m.put(p + "input_layernorm.weight", random(r, dtype, 1, 0.1, D));
            m.put(p + "self_attn.q_proj.weight", random(r, dtype, 0, 0.4, H * HD, D));
            m.put(p + "self_attn.k_proj.weight", random(r, dtype, 0, 0.4, HKV * HD, D));
            m.put(p + "self_attn.v_proj.weight", random(r, dtype, 0, 0.3, HKV * HD, D));
            m.put(p + "self_attn.o_proj.weight", random(r, dtype, 0, 0.3, D, H * HD));
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
    static final String LLAMA_CONFIG = "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":" + V
            + ",\"hidden_size\":" + D + ",\"intermediate_size\":" + FF + ",\"num_attention_heads\":" + H + ",\"num_key_value_heads\":"
            + HKV + ",\"num_hidden_layers\":" + L + ",\"max_position_embeddings\":" + MAXSEQ + ",\"rms_norm_eps\":1e-05,"
            + "\"rope_theta\":10000.0,\"hidden_act\":\"silu\",\"tie_word_embeddings\":false}";

    /** GPT-2 in two shards with an index; Llama in one BF16 file. */
    Path writeModel(boolean llama, Map<String, Tensor> m, String dtype) throws IOException {
        Path d = Files.createDirectories(dir.resolve(llama ? "llama" : "gpt2"));
        Files.writeString(d.resolve("config.json"), llama ? LLAMA_CONFIG : GPT2_CONFIG);
        if (llama) {
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

    static double[] rmsNorm(double[] x, double[] g) {
        double ms = 0;
        for (double v : x) ms += v * v;
        ms /= x.length;
        double[] y = new double[x.length];
        for (int i = 0; i < x.length; i++) y[i] = x[i] / Math.sqrt(ms + 1e-5) * g[i];
        return y;
    }

    /** HF's rotate-half RoPE on one head vector at position t. */
    static void rotateHalf(double[] v, int off, int hd, int t) {
        int half = hd / 2;
        for (int i = 0; i < half; i++) {
            double a = t * Math.pow(10000.0, -2.0 * i / hd), c = Math.cos(a), s = Math.sin(a);
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

    static double referenceLoss(boolean llama, Map<String, Tensor> m, Batch batch) {
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
            for (int l = 0; l < L; l++) x = llama ? llamaBlock(m, l, x) : gpt2Block(m, l, x);
            for (int t = 0; t < T; t++) {
                double[] h = llama ? rmsNorm(x[t], get(m, "model.norm.weight"))
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

    static double[][] llamaBlock(Map<String, Tensor> m, int l, double[][] x) {
        String p = "model.layers." + l + ".";
        double[][] q = new double[T][], k = new double[T][], v = new double[T][];
        for (int t = 0; t < T; t++) {
            double[] h = rmsNorm(x[t], get(m, p + "input_layernorm.weight"));
            q[t] = linear(h, get(m, p + "self_attn.q_proj.weight"), D, H * HD);
            k[t] = linear(h, get(m, p + "self_attn.k_proj.weight"), D, HKV * HD);
            v[t] = linear(h, get(m, p + "self_attn.v_proj.weight"), D, HKV * HD);
            for (int hh = 0; hh < H; hh++) rotateHalf(q[t], hh * HD, HD, t);
            for (int hh = 0; hh < HKV; hh++) rotateHalf(k[t], hh * HD, HD, t);
        }
        double[][] o = attention(q, k, v, H, HKV, HD);
        double[][] y = new double[T][];
        for (int t = 0; t < T; t++) {
            double[] a = linear(o[t], get(m, p + "self_attn.o_proj.weight"), H * HD, D);
            double[] r = new double[D];
            for (int e = 0; e < D; e++) r[e] = x[t][e] + a[e];
            double[] h = rmsNorm(r, get(m, p + "post_attention_layernorm.weight"));
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

    void checkModel(boolean llama, String dtype) throws IOException {
        Map<String, Tensor> hf = llama ? llama(new Random(7), dtype) : gpt2(new Random(5), dtype);
        Path model = writeModel(llama, hf, dtype);
        ModelSpec spec = HfModel.config(model).spec();            // the shape from config.json
        assertEquals(llama ? FF : 4 * D, spec.intermediateDim());
        Batch batch = batch(11);
        double expected = referenceLoss(llama, hf, batch);
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults())) {
            Path ckpt = dir.resolve((llama ? "llama" : "gpt2") + "-ckpt");
            double got = loss(mesh, spec, model, batch, ckpt);
            assertTrue(Math.abs(got - expected) / expected < 1e-5, got + " vs the fp64 reference " + expected);

            Path out = dir.resolve((llama ? "llama" : "gpt2") + "-export");
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
            assertEquals(got, loss(mesh, spec, out, batch, null), 0.0, "export -> import gives the same loss");
        }
    }

    @Test
    void gpt2InHuggingFacesLayoutLoadsToTheFp64ReferenceLossAndRoundTrips() throws IOException {
        checkModel(false, "F32");
    }

    @Test
    void llamaInBf16WithRotateHalfRopeLoadsToTheFp64ReferenceLossAndRoundTrips() throws IOException {
        checkModel(true, "BF16");
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

package dev.ttpipe.actors.cli;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.Param;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.checkpoint.HfModel;
import dev.ttpipe.stages.checkpoint.SafeTensors;
import dev.ttpipe.stages.checkpoint.StageState;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static dev.ttpipe.actors.cli.CliTest.assertOneLineBadInput;
import static dev.ttpipe.actors.cli.CliTest.config;
import static dev.ttpipe.actors.cli.CliTest.run;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A Hugging Face folder as a user brings one (a config.json written by hand, random F32 safetensors):
 * a Qwen3 (q/k norms, head_dim 16 where hidden_size / heads is 8, GQA, untied head, eps 1e-6) and a Llama
 * with Llama 3.1's rope_scaling. {@code init_from} takes its shape; verify shows the 2-stage pipeline
 * equal to the reference trainer from those weights; train runs a step on 2 stages and checkpoints it;
 * {@code export --format hf} writes it back; and the export imports to the checkpoint's weights bit for
 * bit, with a config.json that describes the same model.
 */
class HfModelsRoundTripCliTest {
    static final int V = 64, D = 32, H = 4, KV = 2, FF = 48, L = 2;

    static final String QWEN3 = "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"vocab_size\": " + V
            + ", \"hidden_size\": " + D + ", \"intermediate_size\": " + FF + ", \"num_attention_heads\": " + H
            + ", \"num_key_value_heads\": " + KV + ", \"head_dim\": 16, \"num_hidden_layers\": " + L
            + ", \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000, \"rope_scaling\": null,"
            + " \"hidden_act\": \"silu\", \"attention_bias\": false, \"attention_dropout\": 0.0, \"use_sliding_window\": false,"
            + " \"sliding_window\": null, \"max_window_layers\": 2, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}";
    static final String LLAMA31 = "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": " + V
            + ", \"hidden_size\": " + D + ", \"intermediate_size\": " + FF + ", \"num_attention_heads\": " + H
            + ", \"num_key_value_heads\": " + KV + ", \"num_hidden_layers\": " + L + ", \"max_position_embeddings\": 64,"
            + " \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
            + " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 16},"
            + " \"hidden_act\": \"silu\", \"attention_bias\": false, \"mlp_bias\": false, \"tie_word_embeddings\": false}";

    /** Random weights under Hugging Face's names for a model of {@code hd}-sized heads ({@code qkNorm}: Qwen3's q/k norms). */
    static Map<String, SafeTensors.Entry> weights(int hd, boolean qkNorm) {
        Random r = new Random(13);
        Map<String, SafeTensors.Entry> m = new LinkedHashMap<>();
        m.put("model.embed_tokens.weight", gaussian(r, 0, 0.3, V, D));
        for (int l = 0; l < L; l++) {
            String p = "model.layers." + l + ".";
            m.put(p + "input_layernorm.weight", gaussian(r, 1, 0.1, D));
            m.put(p + "self_attn.q_proj.weight", gaussian(r, 0, 0.2, H * hd, D));
            m.put(p + "self_attn.k_proj.weight", gaussian(r, 0, 0.2, KV * hd, D));
            m.put(p + "self_attn.v_proj.weight", gaussian(r, 0, 0.2, KV * hd, D));
            m.put(p + "self_attn.o_proj.weight", gaussian(r, 0, 0.2, D, H * hd));
            if (qkNorm) {
                m.put(p + "self_attn.q_norm.weight", gaussian(r, 1, 0.2, hd));
                m.put(p + "self_attn.k_norm.weight", gaussian(r, 1, 0.2, hd));
            }
            m.put(p + "post_attention_layernorm.weight", gaussian(r, 1, 0.1, D));
            m.put(p + "mlp.gate_proj.weight", gaussian(r, 0, 0.2, FF, D));
            m.put(p + "mlp.up_proj.weight", gaussian(r, 0, 0.2, FF, D));
            m.put(p + "mlp.down_proj.weight", gaussian(r, 0, 0.2, D, FF));
        }
        m.put("model.norm.weight", gaussian(r, 1, 0.1, D));
        m.put("lm_head.weight", gaussian(r, 0, 0.2, V, D));
        return m;
    }

    static SafeTensors.Entry gaussian(Random r, double mean, double std, long... shape) {
        float[] v = new float[(int) Arrays.stream(shape).reduce(1, (a, b) -> a * b)];
        for (int i = 0; i < v.length; i++) v[i] = (float) (mean + std * r.nextGaussian());
        return new SafeTensors.Entry(shape, v);
    }

    /** Every parameter of the whole model loaded from {@code from} (a checkpoint or a Hugging Face folder). */
    static Map<String, float[]> load(Path from, ModelSpec spec) {
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults());
             Stage stage = new Stage(spec, new StageSlice(0, 0, 0, spec.numBlocks(), true, true), mesh.asSubmesh(), Parallelism.NONE, 1)) {
            StageState.load(from, spec, List.of(stage));
            Map<String, float[]> out = new LinkedHashMap<>();
            for (Param p : stage.parameters()) out.put(p.name(), p.value().toHost());
            return out;
        }
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"qwen3", "llama31"})
    void aHuggingFaceFolderTrainsOnTwoStagesExportsAndReimportsBitForBit(String family, @TempDir Path dir) throws Exception {
        boolean qwen3 = family.equals("qwen3");
        Path hf = Files.createDirectories(dir.resolve(family));
        Files.writeString(hf.resolve("config.json"), qwen3 ? QWEN3 : LLAMA31);
        SafeTensors.write(hf.resolve("model.safetensors"), weights(qwen3 ? 16 : D / H, qwen3), Map.of("format", "pt"));
        ModelSpec spec = HfModel.config(hf).spec();
        assertEquals(qwen3 ? ModelSpec.ModelType.QWEN3 : ModelSpec.ModelType.LLAMA, spec.type());
        assertTrue(qwen3 ? spec.headDim() == 16 && spec.attentionDim() == 2 * D : spec.ropeScaling() != null, spec.toString());

        Path runs = dir.resolve("runs");
        String job = "training_config: {batch_size: 4, max_steps: 1, learning_rate: 0.01, runs_dir: " + runs + ", init_from: " + hf
                + "}\ndevice_config: {threads: 1}\nmultihost_config:\n  pipeline_parallel_config: {num_blocks: 2,"
                + " blocks_per_rank: {0: 1, 1: 1}, num_microbatches: 2, schedule: 1f1b}\n";
        CliTest.Result v = run("verify", config(dir, job).toString(), "--steps", "2");
        assertEquals(0, v.code(), v.out() + v.err());
        assertTrue(v.joined().contains("both initialised from " + hf), v.out());

        CliTest.Result t = run("train", config(dir, job).toString());
        assertEquals(0, t.code(), t.out() + t.err());
        assertTrue(t.out().contains("samples ("), t.out());   // char data, 64 ids: sampled among the tokenizer's ids only
        Path ckpt;
        try (var s = Files.list(runs)) {
            ckpt = s.filter(Files::isDirectory).filter(d -> Files.isDirectory(d.resolve("checkpoints/step-000001"))).findFirst()
                    .orElseThrow().resolve("checkpoints/step-000001");
        }
        Path out = dir.resolve(family + "-export");
        CliTest.Result e = run("export", ckpt.toString(), "--format", "hf", "--out", out.toString());
        assertEquals(0, e.code(), e.err());
        assertTrue(e.out().contains((qwen3 ? "qwen3" : "llama") + " model"), e.out());

        assertEquals(spec, HfModel.config(out).spec(), "the exported config.json describes the imported model");
        Map<String, float[]> trained = load(ckpt, spec), exported = load(out, spec), imported = load(hf, spec);
        assertFalse(Arrays.equals(imported.get("blocks.0.attn.wq.weight"), trained.get("blocks.0.attn.wq.weight")), "a step was taken");
        for (Map.Entry<String, float[]> w : trained.entrySet()) {
            float[] got = exported.get(w.getKey());
            for (int i = 0; i < got.length; i++) {
                assertEquals(Float.floatToRawIntBits(w.getValue()[i]), Float.floatToRawIntBits(got[i]), family + ": " + w.getKey() + "[" + i + "]");
            }
        }

        String contradicts = job + "transformer_config: {" + (qwen3 ? "head_dim: 8" : "rope_scaling: null") + "}\n";
        assertOneLineBadInput(run("train", config(dir, contradicts).toString()), "training_config.init_from: " + hf.resolve("config.json")
                + " differs from transformer_config (" + (qwen3 ? "head_dim 8 vs config.json's 16" : "rope_scaling null vs config.json's"));
    }
}

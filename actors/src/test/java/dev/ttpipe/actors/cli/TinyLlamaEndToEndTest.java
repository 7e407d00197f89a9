package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.train.ModelSource;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.Param;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.checkpoint.MiniJson;
import dev.ttpipe.stages.data.HfTokenizer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static dev.ttpipe.actors.cli.CliTest.config;
import static dev.ttpipe.actors.cli.CliTest.run;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The model TTML's quick start begins with, end to end as a user runs it: a Hugging Face folder of TinyLlama's
 * shape (LlamaForCausalLM, GQA, RoPE theta 10000, RMSNorm eps 1e-5, untied head; scaled down, bf16 random
 * weights) with the real Llama 2 tokenizer; prepare a text, train from it over 2 and 4 pipeline stages with
 * checkpoints, eval and generate pipelined (equal to one process), export to Hugging Face and import that back
 * bit for bit. The tokenizer comes from ../shared/data/tokenizers/llama2; skipped when that is absent.
 */
class TinyLlamaEndToEndTest {
    /** TinyLlama-1.1B's config.json with hidden 2048, 22 layers, 32 heads, 4 kv heads, intermediate 5632, 2048 positions scaled down. */
    static final String CONFIG = """
            {
              "architectures": ["LlamaForCausalLM"],
              "attention_bias": false,
              "bos_token_id": 1,
              "eos_token_id": 2,
              "hidden_act": "silu",
              "hidden_size": 64,
              "initializer_range": 0.02,
              "intermediate_size": 172,
              "max_position_embeddings": 32,
              "model_type": "llama",
              "num_attention_heads": 4,
              "num_hidden_layers": 4,
              "num_key_value_heads": 2,
              "pretraining_tp": 1,
              "rms_norm_eps": 1e-05,
              "rope_scaling": null,
              "rope_theta": 10000.0,
              "tie_word_embeddings": false,
              "torch_dtype": "bfloat16",
              "transformers_version": "4.35.0",
              "use_cache": true,
              "vocab_size": 32000
            }
            """;
    static final int HIDDEN = 64, LAYERS = 4, HEADS = 4, KV_HEADS = 2, FF = 172, VOCAB = 32000, HEAD_DIM = HIDDEN / HEADS;

    static Path llama2Tokenizer() {
        Path dir = Path.of("../../shared/data/tokenizers/llama2");
        if (!Files.isDirectory(dir)) dir = Path.of("../shared/data/tokenizers/llama2");
        assumeTrue(Files.isRegularFile(dir.resolve("tokenizer.json")),
                "skipped: " + Path.of("../../shared/data/tokenizers/llama2").toAbsolutePath().normalize() + " is absent");
        return dir;
    }

    /** The folder: config.json, model.safetensors (BF16, Hugging Face's names), the Llama 2 tokenizer files. */
    static Path tinyLlama(Path dir, Path tokenizer) throws IOException {
        Path out = Files.createDirectories(dir.resolve("tinyllama"));
        Files.writeString(out.resolve("config.json"), CONFIG);
        for (String f : new String[]{"tokenizer.json", "tokenizer_config.json"}) Files.copy(tokenizer.resolve(f), out.resolve(f));
        Random rng = new Random(2024);
        Map<String, long[]> shapes = new LinkedHashMap<>();
        shapes.put("model.embed_tokens.weight", new long[]{VOCAB, HIDDEN});
        for (int l = 0; l < LAYERS; l++) {
            String p = "model.layers." + l + ".";
            shapes.put(p + "input_layernorm.weight", new long[]{HIDDEN});
            shapes.put(p + "self_attn.q_proj.weight", new long[]{HEADS * HEAD_DIM, HIDDEN});
            shapes.put(p + "self_attn.k_proj.weight", new long[]{KV_HEADS * HEAD_DIM, HIDDEN});
            shapes.put(p + "self_attn.v_proj.weight", new long[]{KV_HEADS * HEAD_DIM, HIDDEN});
            shapes.put(p + "self_attn.o_proj.weight", new long[]{HIDDEN, HEADS * HEAD_DIM});
            shapes.put(p + "post_attention_layernorm.weight", new long[]{HIDDEN});
            shapes.put(p + "mlp.gate_proj.weight", new long[]{FF, HIDDEN});
            shapes.put(p + "mlp.up_proj.weight", new long[]{FF, HIDDEN});
            shapes.put(p + "mlp.down_proj.weight", new long[]{HIDDEN, FF});
        }
        shapes.put("model.norm.weight", new long[]{HIDDEN});
        shapes.put("lm_head.weight", new long[]{VOCAB, HIDDEN});
        writeBf16(out.resolve("model.safetensors"), shapes, name -> name.endsWith("norm.weight")
                ? 1 + 0.1f * (float) rng.nextGaussian() : 0.02f * (float) rng.nextGaussian());
        return out;
    }

    interface Values {
        float next(String tensor);
    }

    /** A safetensors file of BF16 tensors (as TinyLlama ships), the values rounded to nearest even. */
    static void writeBf16(Path file, Map<String, long[]> shapes, Values values) throws IOException {
        StringBuilder header = new StringBuilder("{\"__metadata__\":{\"format\":\"pt\"}");
        long offset = 0;
        for (Map.Entry<String, long[]> e : shapes.entrySet()) {
            long n = 1;
            StringBuilder dims = new StringBuilder();
            for (long d : e.getValue()) {
                n *= d;
                dims.append(dims.length() == 0 ? "" : ",").append(d);
            }
            header.append(",\"").append(e.getKey()).append("\":{\"dtype\":\"BF16\",\"shape\":[").append(dims)
                    .append("],\"data_offsets\":[").append(offset).append(',').append(offset + 2 * n).append("]}");
            offset += 2 * n;
        }
        header.append('}');
        while ((header.length() + 8) % 8 != 0) header.append(' ');
        byte[] h = header.toString().getBytes(StandardCharsets.UTF_8);
        ByteBuffer buf = ByteBuffer.allocate(8 + h.length + (int) offset).order(ByteOrder.LITTLE_ENDIAN);
        buf.putLong(h.length).put(h);
        for (Map.Entry<String, long[]> e : shapes.entrySet()) {
            long n = 1;
            for (long d : e.getValue()) n *= d;
            for (long i = 0; i < n; i++) {
                int bits = Float.floatToIntBits(values.next(e.getKey()));
                buf.putShort((short) ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16));
            }
        }
        Files.write(file, buf.array());
    }

    static String corpus() {
        String[] who = {"The little fox", "A tired sailor", "My old teacher", "The baker's daughter", "A quiet robot"};
        String[] did = {"walked to the market", "found a golden key", "sang by the river", "read an ancient map", "built a tiny boat"};
        String[] when = {"before sunrise", "on a rainy morning", "after the long winter", "late at night", "in the spring"};
        Random r = new Random(5);
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < 400; i++) {
            sb.append(who[r.nextInt(who.length)]).append(' ').append(did[r.nextInt(did.length)]).append(' ')
                    .append(when[r.nextInt(when.length)]).append(i % 4 == 3 ? ".\n" : ". ");
        }
        return sb.toString();
    }

    static String jsonValue(String json, String key) {
        Object v = ((Map<?, ?>) MiniJson.parse(json)).get(key);
        return String.valueOf(v);
    }

    /** Every parameter of the model, by name, as {@link ModelSource#load} puts it on a device. */
    static Map<String, float[]> loaded(ModelSource src) {
        Map<String, float[]> out = new LinkedHashMap<>();
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults().withThreads(1))) {
            List<Stage> stages = src.load(mesh.asSubmesh(), 1);
            try {
                for (Stage s : stages) for (Param p : s.parameters()) out.put(p.name(), p.value().toHost());
            } finally {
                stages.forEach(Stage::close);
            }
        }
        return out;
    }

    /**
     * Llama 2's decoder strips the leading space of a text: the new tokens decoded on their own would lose the
     * first new word's space ("time" + "the"), decoded after the prompt's ids they keep it ("time" + " the").
     */
    @Test
    void streamedTokensKeepTheFirstNewWordsLeadingSpace() {
        HfTokenizer tok = HfTokenizer.load(llama2Tokenizer().resolve("tokenizer.json"));
        int[] prompt = tok.encodeWithSpecialTokens("Once upon a time");
        int[] next = tok.encode("the end");                              // ▁the ▁end
        assertEquals("the end", tok.decode(next), "decoded alone, the first space is stripped");
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
        GenerateCommand.Streamer streamer = new GenerateCommand.Streamer(tok, prompt, out);
        for (int id : next) streamer.accept(id);
        assertEquals(" the end", bytes.toString(StandardCharsets.UTF_8));
        int[] all = Arrays.copyOf(prompt, prompt.length + next.length);
        System.arraycopy(next, 0, all, prompt.length, next.length);
        assertEquals(" the end", streamer.text(all));
    }

    @Test
    void tinyLlamaPreparesTrainsOnTwoAndFourStagesEvaluatesAndGeneratesPipelinedAndExportsBitForBit(@TempDir Path dir) throws Exception {
        Path init = tinyLlama(dir, llama2Tokenizer());
        HfTokenizer tok = HfTokenizer.load(init.resolve("tokenizer.json"));

        Path text = Files.writeString(dir.resolve("stories.txt"), corpus());
        Path data = dir.resolve("data");
        CliTest.Result p = run("prepare", text.toString(), "--tokenizer", init.toString(), "--out", data.toString(), "--json");
        assertEquals(0, p.code(), p.err());
        assertEquals("32000", jsonValue(p.out(), "vocab_size"), p.out());
        assertEquals("uint16", jsonValue(p.out(), "token_type"), p.out());

        // train from the folder over 2 and over 4 stages: the same data and weights give the same losses
        String job = "training_config: {batch_size: 4, max_steps: 2, learning_rate: 0.001, model_save_interval: 2, eval_batches: 1,"
                + " init_from: " + init + ", data_path: " + data + ", tokenizer_type: bpe, tokenizer_path: " + data + "}\n"
                + "multihost_config:\n  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: SPLIT, num_microbatches: 2,"
                + " schedule: 1f1b}\n";
        String[] losses = new String[2];
        for (int i = 0; i < 2; i++) {
            String split = i == 0 ? "{0: 2, 1: 2}" : "{0: 1, 1: 1, 2: 1, 3: 1}";
            Path runDir = dir.resolve("run" + (i == 0 ? 2 : 4));
            CliTest.Result t = run("train", config(dir, job.replace("SPLIT", split)).toString(), "--run-dir", runDir.toString());
            assertEquals(0, t.code(), t.out() + t.err());
            assertTrue(CliTest.joined(t.out()).contains("initialised from " + init), t.out());
            assertTrue(CliTest.joined(t.out()).contains((i == 0 ? 2 : 4) + " stages on " + (i == 0 ? 2 : 4) + " ranks"), t.out());
            assertTrue(Files.isRegularFile(runDir.resolve("checkpoints/step-000002/stage-00.safetensors")), t.out());
            losses[i] = jsonValue(Files.readAllLines(runDir.resolve("metrics.jsonl")).get(1), "loss");
        }
        assertEquals(losses[0], losses[1], "step 2's loss on 2 stages and on 4");
        Path ckpt = dir.resolve("run2/checkpoints/step-000002");

        // eval: one process and pipelined, the same loss to the last bit
        String[] eval = new String[3];
        int[] stages = {1, 2, 4};
        for (int i = 0; i < 3; i++) {
            CliTest.Result e = run("eval", ckpt.toString(), "--data", data.toString(), "--batches", "3", "--batch-size", "2",
                    "--stages", Integer.toString(stages[i]), "--json");
            assertEquals(0, e.code(), e.err());
            assertEquals(stages[i] > 1 ? "true" : "false", jsonValue(e.out(), "pipelined"), e.out());
            assertTrue(Double.parseDouble(jsonValue(e.out(), "tokens_per_second")) > 0, e.out());
            eval[i] = jsonValue(e.out(), "loss");
        }
        assertEquals(eval[0], eval[1], "eval on 2 stages");
        assertEquals(eval[0], eval[2], "eval on 4 stages");

        // generate from a text prompt, BOS first as the tokenizer's post-processor says: the same tokens and text
        String prompt = "Once upon a time";
        int[] promptIds = tok.encodeWithSpecialTokens(prompt);
        assertEquals(1, promptIds[0], "BOS");
        String[] ids = new String[3];
        for (int i = 0; i < 3; i++) {
            CliTest.Result g = run("generate", ckpt.toString(), "--prompt", prompt, "--max-new-tokens", "8", "--temperature", "0",
                    "--stages", Integer.toString(stages[i]), "--json");
            assertEquals(0, g.code(), g.err());
            assertEquals(Integer.toString(promptIds.length), jsonValue(g.out(), "prompt_tokens"), g.out());
            ids[i] = jsonValue(g.out(), "ids");
        }
        assertEquals(ids[0], ids[1], "greedy tokens on 2 stages");
        assertEquals(ids[0], ids[2], "greedy tokens on 4 stages");
        CliTest.Result streamed = run("generate", ckpt.toString(), "--prompt", prompt, "--max-new-tokens", "8", "--temperature", "0",
                "--stages", "2");
        assertEquals(0, streamed.code(), streamed.err());
        String summary = CliTest.joined(streamed.err());
        assertTrue(summary.contains("generate: 8 new tokens in") && summary.contains("2 stages pipelined over local"),
                streamed.err());
        int[] all = new int[promptIds.length + 8];
        System.arraycopy(promptIds, 0, all, 0, promptIds.length);
        List<?> newIds = (List<?>) MiniJson.parse(ids[0].replace(", ", ","));
        for (int i = 0; i < 8; i++) all[promptIds.length + i] = ((Number) newIds.get(i)).intValue();
        // the new text is the whole decoded less the prompt's: the first new word keeps its leading space
        String newText = tok.decode(all).substring(tok.decode(promptIds).length());
        assertEquals(prompt + newText + System.lineSeparator(), streamed.out());

        // export to Hugging Face, import back: every tensor as the checkpoint holds it
        Path exported = dir.resolve("exported");
        CliTest.Result x = run("export", ckpt.toString(), "--format", "hf", "--out", exported.toString());
        assertEquals(0, x.code(), x.err());
        String cfg = Files.readString(exported.resolve("config.json"));
        assertTrue(cfg.contains("LlamaForCausalLM") && cfg.contains("\"num_key_value_heads\": 2") && cfg.contains("\"tie_word_embeddings\": false"),
                cfg);
        Map<String, float[]> fromCheckpoint = loaded(ModelSource.open(ckpt.toString(), dir, null, System.err));
        Map<String, float[]> fromExport = loaded(ModelSource.open(exported.toString(), dir, null, System.err));
        assertEquals(fromCheckpoint.keySet(), fromExport.keySet());
        for (String name : fromCheckpoint.keySet()) assertArrayEquals(fromCheckpoint.get(name), fromExport.get(name), name);
        CliTest.Result e = run("eval", exported.toString(), "--data", data.toString(), "--batches", "3", "--batch-size", "2",
                "--stages", "2", "--json");
        assertEquals(0, e.code(), e.err());
        assertEquals(eval[0], jsonValue(e.out(), "loss"), "the export's loss is the checkpoint's");
    }
}

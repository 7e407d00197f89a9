package dev.ttpipe.stages.checkpoint;

import dev.ttpipe.stages.ModelSpec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The safetensors format byte for byte, its errors, and the Hugging Face names of checkpoint tensors. */
class SafeTensorsTest {

    @Test
    void writesTheFormatAndReadsItBack(@TempDir Path dir) throws Exception {
        Map<String, SafeTensors.Entry> t = new LinkedHashMap<>();
        t.put("a.weight", new SafeTensors.Entry(new long[]{2, 3}, new float[]{1, 2, 3, 4, 5, 6}));
        t.put("b", new SafeTensors.Entry(new long[]{1}, new float[]{-0.5f}));
        Path f = dir.resolve("x.safetensors");
        String sha = SafeTensors.write(f, t, Map.of("format", "pt"));
        assertEquals(SafeTensors.sha256(f), sha);
        byte[] bytes = Files.readAllBytes(f);
        long headerLength = ByteBuffer.wrap(bytes, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        assertEquals(0, (8 + headerLength) % 8, "data aligned to 8 bytes");
        String header = new String(bytes, 8, (int) headerLength, StandardCharsets.UTF_8).strip();
        assertTrue(header.startsWith("{\"__metadata__\":{\"format\":\"pt\"},\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                + "\"data_offsets\":[0,24]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[24,28]}}"), header);
        assertEquals(1f, ByteBuffer.wrap(bytes, (int) (8 + headerLength), 4).order(ByteOrder.LITTLE_ENDIAN).getFloat());
        try (SafeTensors.Reader r = new SafeTensors.Reader(f)) {
            assertArrayEquals(new float[]{1, 2, 3, 4, 5, 6}, r.read("a.weight"));
            assertArrayEquals(new long[]{2, 3}, r.tensors().get("a.weight").shape());
            assertArrayEquals(new float[]{-0.5f}, r.read("b"));
            assertEquals("pt", r.metadata().get("format"));
        }
    }

    @Test
    void readsBf16AndF16(@TempDir Path dir) throws Exception {
        String header = "{\"x\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},\"y\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]}}";
        ByteBuffer b = ByteBuffer.allocate(8 + header.length() + 8).order(ByteOrder.LITTLE_ENDIAN);
        b.putLong(header.length()).put(header.getBytes(StandardCharsets.US_ASCII));
        b.putShort((short) 0x3f80).putShort((short) 0xc040);          // bf16 1.0, -3.0
        b.putShort((short) 0x3c00).putShort((short) 0x3555);          // f16 1.0, 0.333...
        Path f = dir.resolve("h.safetensors");
        Files.write(f, b.array());
        try (SafeTensors.Reader r = new SafeTensors.Reader(f)) {
            assertArrayEquals(new float[]{1f, -3f}, r.read("x"));
            float[] y = r.read("y");
            assertEquals(1f, y[0]);
            assertEquals(0.33325195f, y[1], 1e-7);
        }
    }

    @Test
    void badFilesAreOneLineNamingTheFileAndWhat(@TempDir Path dir) throws Exception {
        Map<String, SafeTensors.Entry> t = new LinkedHashMap<>();
        t.put("w", new SafeTensors.Entry(new long[]{4}, new float[]{1, 2, 3, 4}));
        Path good = dir.resolve("good.safetensors");
        SafeTensors.write(good, t, null);
        byte[] bytes = Files.readAllBytes(good);

        Path truncatedHeader = dir.resolve("th.safetensors");
        Files.write(truncatedHeader, Arrays.copyOf(bytes, 20));
        assertMessage(truncatedHeader, "th.safetensors: header length");
        Path truncatedData = dir.resolve("td.safetensors");
        Files.write(truncatedData, Arrays.copyOf(bytes, bytes.length - 4));
        assertMessage(truncatedData, "tensor w: data_offsets [0, 16] outside the file's 12 data bytes");
        Path tiny = dir.resolve("tiny.safetensors");
        Files.write(tiny, new byte[3]);
        assertMessage(tiny, "fewer than the 8-byte header length");
        String header = "{\"w\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}";
        ByteBuffer b = ByteBuffer.allocate(8 + header.length() + 8).order(ByteOrder.LITTLE_ENDIAN);
        b.putLong(header.length()).put(header.getBytes(StandardCharsets.US_ASCII));
        Path i64 = dir.resolve("i64.safetensors");
        Files.write(i64, b.array());
        assertMessage(i64, "tensor w: dtype I64 is not supported, expected F32, BF16 or F16");
    }

    private static void assertMessage(Path f, String fragment) {
        CheckpointException e = assertThrows(CheckpointException.class, () -> new SafeTensors.Reader(f).close());
        assertTrue(e.getMessage().startsWith(f.toString()) && e.getMessage().contains(fragment), e.getMessage());
        assertEquals(1, e.getMessage().lines().count());
    }

    @Test
    void gpt2NamesFollowHuggingFaceWithConv1dTransposesAndAFusedCAttn() {
        ModelSpec gpt = new ModelSpec(ModelSpec.ModelType.GPT2, 5, 2, 1, 1, 1, 8, 4, 0f, false, 10000f, false);
        Map<String, CheckpointNames.HostTensor> mine = new LinkedHashMap<>();
        mine.put("blocks.0.attn.wq.weight", t(new long[]{2, 2}, 1, 2, 3, 4));
        mine.put("blocks.0.attn.wk.weight", t(new long[]{2, 2}, 5, 6, 7, 8));
        mine.put("blocks.0.attn.wv.weight", t(new long[]{2, 2}, 9, 10, 11, 12));
        mine.put("blocks.0.attn.wq.bias", t(new long[]{2}, 1, 2));
        mine.put("blocks.0.attn.wv.bias", t(new long[]{2}, 3, 4));
        mine.put("blocks.0.mlp.w1.weight" + CheckpointNames.EXP_AVG, t(new long[]{2, 3}, 1, 2, 3, 4, 5, 6));
        mine.put("embed.tokens", t(new long[]{1, 2}, 7, 8));
        Map<String, CheckpointNames.HostTensor> file = CheckpointNames.toFile(gpt, mine);
        assertEquals(Set.of("h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias", "h.0.mlp.c_fc.weight.exp_avg", "wte.weight"),
                file.keySet());
        // Conv1D [in, out]: row i holds input i's weights to q's, k's, then v's outputs
        assertArrayEquals(new long[]{2, 6}, file.get("h.0.attn.c_attn.weight").shape());
        assertArrayEquals(new float[]{1, 3, 5, 7, 9, 11, 2, 4, 6, 8, 10, 12}, file.get("h.0.attn.c_attn.weight").values());
        assertArrayEquals(new float[]{1, 2, 0, 0, 3, 4}, file.get("h.0.attn.c_attn.bias").values());
        assertArrayEquals(new long[]{3, 2}, file.get("h.0.mlp.c_fc.weight.exp_avg").shape());
        Map<String, CheckpointNames.HostTensor> back = CheckpointNames.fromFile(gpt, file);
        assertEquals(mine.keySet(), back.keySet());
        for (String k : mine.keySet()) {
            assertArrayEquals(mine.get(k).values(), back.get(k).values(), k);
            assertArrayEquals(mine.get(k).shape(), back.get(k).shape(), k);
        }
    }

    @Test
    void llamaNamesMapOneToOne() {
        ModelSpec llama = new ModelSpec(ModelSpec.ModelType.LLAMA, 5, 4, 2, 1, 6, 8, 4, 0f, false, 10000f, false);
        assertEquals("model.layers.5.self_attn.q_proj.weight", CheckpointNames.fileName(llama, "blocks.5.attn.wq.weight"));
        assertEquals("model.layers.5.mlp.up_proj.weight", CheckpointNames.fileName(llama, "blocks.5.mlp.w3.weight"));
        assertEquals("model.norm.weight", CheckpointNames.fileName(llama, "head.norm.gamma"));
        assertEquals("lm_head.weight", CheckpointNames.fileName(llama, "head.lm"));
        Map<String, CheckpointNames.HostTensor> back = CheckpointNames.fromFile(llama,
                Map.of("model.layers.12.post_attention_layernorm.weight", t(new long[]{1}, 1)));
        assertEquals(Set.of("blocks.12.norm2.gamma"), back.keySet());
        assertThrows(CheckpointException.class, () -> CheckpointNames.fromFile(llama, Map.of("h.0.ln_1.weight", t(new long[]{1}, 1))));
    }

    private static CheckpointNames.HostTensor t(long[] shape, float... v) {
        return new CheckpointNames.HostTensor(shape, v);
    }
}

package dev.ttpipe.stages.data;

import com.knuddels.jtokkit.Encodings;
import com.knuddels.jtokkit.api.Encoding;
import com.knuddels.jtokkit.api.EncodingType;
import com.knuddels.jtokkit.api.IntArrayList;
import dev.ttpipe.stages.checkpoint.MiniJson;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * GPT-2's byte-level BPE (tiktoken's {@code r50k_base}, 50257 ids, {@code <|endoftext|>} = 50256),
 * from jtokkit, which bundles the merge table: no network. Any text encodes. Thread-safe.
 */
public final class Gpt2Tokenizer implements Tokenizer {
    public static final int VOCAB = 50257;
    public static final int END_OF_TEXT = 50256;
    private static final Gpt2Tokenizer INSTANCE = new Gpt2Tokenizer();

    private final Encoding encoding = Encodings.newLazyEncodingRegistry().getEncoding(EncodingType.R50K_BASE);

    private Gpt2Tokenizer() {
    }

    public static Gpt2Tokenizer get() {
        return INSTANCE;
    }

    @Override
    public String name() {
        return "gpt2";
    }

    @Override
    public String vocabulary() {
        return "bpe:gpt2 (r50k_base, " + VOCAB + " ids)";
    }

    @Override
    public int vocabSize() {
        return VOCAB;
    }

    /** Ordinary text (a literal "<|endoftext|>" in it is text, not the special token, as tiktoken's encode_ordinary). */
    @Override
    public int[] encode(String text) {
        return encoding.encodeOrdinary(text).toArray();
    }

    @Override
    public boolean canEncode(String text) {
        return true;
    }

    @Override
    public String decode(int[] tokens) {
        return new String(decodeBytes(tokens), StandardCharsets.UTF_8);
    }

    /** The UTF-8 bytes of the tokens (a streaming printer joins them before decoding split characters). */
    public byte[] decodeBytes(int[] tokens) {
        IntArrayList list = new IntArrayList(tokens.length);
        for (int t : tokens) list.add(t);
        return encoding.decodeBytes(list);
    }

    @Override
    public String decode(int token) {
        return decode(new int[]{token});
    }

    /**
     * Writes Hugging Face's GPT-2 tokenizer files into {@code dir}: {@code vocab.json} and {@code merges.txt}
     * (derived from the bundled ranks: each token's merge is the last step of BPE over its bytes with
     * the ranks below its own), the same as the fast tokenizer's {@code tokenizer.json},
     * {@code tokenizer_config.json} and {@code special_tokens_map.json}.
     */
    public void writeHuggingFaceFiles(Path dir) throws IOException {
        List<byte[]> tokens = new ArrayList<>();
        Map<String, Integer> rank = new HashMap<>();
        try (var in = Encodings.class.getResourceAsStream("/com/knuddels/jtokkit/r50k_base.tiktoken")) {
            if (in == null) throw new IOException("jtokkit's r50k_base.tiktoken is not on the class path");
            for (String line : new String(in.readAllBytes(), StandardCharsets.US_ASCII).split("\n")) {
                if (line.isBlank()) continue;
                String[] f = line.trim().split(" ");
                byte[] b = Base64.getDecoder().decode(f[0]);
                if (Integer.parseInt(f[1]) != tokens.size()) throw new IOException("r50k_base.tiktoken: ranks out of order");
                rank.put(key(b), tokens.size());
                tokens.add(b);
            }
        }
        char[] unicode = bytesToUnicode();
        StringBuilder vocab = new StringBuilder("{");
        StringBuilder merges = new StringBuilder("#version: 0.2\n");
        StringBuilder mergeList = new StringBuilder();
        for (int id = 0; id < tokens.size(); id++) {
            byte[] t = tokens.get(id);
            vocab.append(id == 0 ? "" : ",").append(MiniJson.str(visible(t, unicode))).append(':').append(id);
            if (t.length < 2) continue;
            List<byte[]> parts = new ArrayList<>();
            for (byte x : t) parts.add(new byte[]{x});
            while (parts.size() > 2) {                      // BPE with the ranks below this token's own
                int best = -1, bestRank = Integer.MAX_VALUE;
                for (int i = 0; i + 1 < parts.size(); i++) {
                    Integer r = rank.get(key(concat(parts.get(i), parts.get(i + 1))));
                    if (r != null && r < id && r < bestRank) {
                        bestRank = r;
                        best = i;
                    }
                }
                if (best < 0) throw new IOException("r50k_base: token " + id + " has no merge path");
                parts.set(best, concat(parts.get(best), parts.remove(best + 1)));
            }
            String merge = visible(parts.get(0), unicode) + " " + visible(parts.get(1), unicode);
            merges.append(merge).append('\n');
            mergeList.append(mergeList.length() == 0 ? "" : ",").append(MiniJson.str(merge));
        }
        vocab.append(",\"<|endoftext|>\":").append(END_OF_TEXT).append('}');
        Files.writeString(dir.resolve("vocab.json"), vocab, StandardCharsets.UTF_8);
        Files.writeString(dir.resolve("merges.txt"), merges, StandardCharsets.UTF_8);
        Files.writeString(dir.resolve("tokenizer.json"), "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":"
                + "[{\"id\":50256,\"content\":\"<|endoftext|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                + "\"normalized\":true,\"special\":true}],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\","
                + "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},\"post_processor\":null,\"decoder\":"
                + "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},\"model\":{\"type\":"
                + "\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":\"\",\"end_of_word_suffix\":\"\","
                + "\"fuse_unk\":false,\"byte_fallback\":false,\"vocab\":" + vocab + ",\"merges\":[" + mergeList + "]}}\n",
                StandardCharsets.UTF_8);
        Files.writeString(dir.resolve("tokenizer_config.json"), "{\"tokenizer_class\": \"GPT2Tokenizer\", \"model_max_length\": 1024,"
                + " \"bos_token\": \"<|endoftext|>\", \"eos_token\": \"<|endoftext|>\", \"unk_token\": \"<|endoftext|>\","
                + " \"add_prefix_space\": false}\n", StandardCharsets.UTF_8);
        Files.writeString(dir.resolve("special_tokens_map.json"), "{\"bos_token\": \"<|endoftext|>\", \"eos_token\":"
                + " \"<|endoftext|>\", \"unk_token\": \"<|endoftext|>\"}\n", StandardCharsets.UTF_8);
    }

    private static String key(byte[] b) {
        return new String(b, StandardCharsets.ISO_8859_1);
    }

    private static byte[] concat(byte[] a, byte[] b) {
        byte[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    private static String visible(byte[] b, char[] unicode) {
        StringBuilder sb = new StringBuilder(b.length);
        for (byte x : b) sb.append(unicode[x & 0xff]);
        return sb.toString();
    }

    /** GPT-2's byte-to-character table: printable bytes stand for themselves, the others from U+0100 up. */
    public static char[] bytesToUnicode() {
        char[] out = new char[256];
        int n = 0;
        for (int b = 0; b < 256; b++) {
            boolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            out[b] = printable ? (char) b : (char) (256 + n++);
        }
        return out;
    }

    @Override
    public void save(Path file) throws IOException {
        Files.writeString(file, "gpt2\n", StandardCharsets.UTF_8);
    }
}

package dev.ttpipe.stages.data;

import dev.ttpipe.stages.checkpoint.MiniJson;

import java.io.IOException;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A Hugging Face {@code tokenizer.json} with a byte-level BPE model (GPT-2, GPT-NeoX, Llama 3 and
 * their kin), read by ttpipe itself: no native library, no network. The pre-tokenizer is
 * {@code ByteLevel} (GPT-2's split pattern) or a {@code Sequence} of a regex {@code Split} and
 * {@code ByteLevel}; each piece's UTF-8 bytes, spelled with GPT-2's byte-to-character table, are
 * merged pair by pair in the order of {@code merges}. Anything else (a normalizer, SentencePiece's
 * {@code Metaspace}, byte fallback, another model type) is refused naming the file and the component.
 * Text encodes as ordinary text: an added token's spelling in the text is not that token. Thread-safe.
 */
public final class HfTokenizer implements Tokenizer {
    static final String GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

    private final Path file;
    private final Map<String, Integer> vocab;
    private final String[] byId;
    private final Map<String, Integer> ranks;            // "a b" -> merge rank
    private final Pattern split;
    private final boolean addPrefixSpace;
    private final char[] byteToChar = Gpt2Tokenizer.bytesToUnicode();
    private final int[] charToByte = new int[512];
    private final Map<String, int[]> cache = new ConcurrentHashMap<>();

    private HfTokenizer(Path file, Map<String, Integer> vocab, Map<String, Integer> ranks, Pattern split, boolean addPrefixSpace) {
        this.file = file;
        this.vocab = vocab;
        this.ranks = ranks;
        this.split = split;
        this.addPrefixSpace = addPrefixSpace;
        int max = -1;
        for (int id : vocab.values()) max = Math.max(max, id);
        this.byId = new String[max + 1];
        vocab.forEach((k, v) -> byId[v] = k);
        Arrays.fill(charToByte, -1);
        for (int b = 0; b < 256; b++) charToByte[byteToChar[b]] = b;
    }

    /** @throws DataException naming the file and what it holds that ttpipe does not read */
    public static HfTokenizer load(Path file) {
        Map<?, ?> root;
        try {
            Object o = MiniJson.read(file);
            if (!(o instanceof Map<?, ?> m)) throw new DataException(file + ": not a JSON object, expected a tokenizer.json");
            root = m;
        } catch (IOException | IllegalArgumentException e) {
            throw new DataException(file + ": cannot be read (" + e.getMessage() + ")");
        }
        if (root.get("normalizer") != null) throw refuse(file, "normalizer", root.get("normalizer"));
        if (!(root.get("model") instanceof Map<?, ?> model) || !"BPE".equals(model.get("type"))) {
            throw refuse(file, "model", root.get("model") instanceof Map<?, ?> mm ? mm.get("type") : root.get("model"));
        }
        if (Boolean.TRUE.equals(model.get("byte_fallback"))) throw refuse(file, "model.byte_fallback", true);
        Pattern split = null;
        boolean prefix = false;
        Object pre = root.get("pre_tokenizer");
        List<Object> steps = new ArrayList<>();
        if (pre instanceof Map<?, ?> pm && "Sequence".equals(pm.get("type")) && pm.get("pretokenizers") instanceof List<?> l) steps.addAll(l);
        else steps.add(pre);
        for (Object step : steps) {
            if (!(step instanceof Map<?, ?> st)) throw refuse(file, "pre_tokenizer", step);
            if ("ByteLevel".equals(st.get("type"))) {
                prefix = Boolean.TRUE.equals(st.get("add_prefix_space"));
                if (!Boolean.FALSE.equals(st.get("use_regex")) && split == null) split = Pattern.compile(GPT2_PATTERN, Pattern.UNICODE_CHARACTER_CLASS);
            } else if ("Split".equals(st.get("type")) && st.get("pattern") instanceof Map<?, ?> p && p.get("Regex") instanceof String re
                    && "Isolated".equals(st.get("behavior")) && !Boolean.TRUE.equals(st.get("invert"))) {
                split = Pattern.compile(re, Pattern.UNICODE_CHARACTER_CLASS);        // Rust regex: Unicode classes
            } else {
                throw refuse(file, "pre_tokenizer", st.get("type"));
            }
        }
        if (!(model.get("vocab") instanceof Map<?, ?> v) || !(model.get("merges") instanceof List<?> merges)) {
            throw new DataException(file + ": model.vocab and model.merges, expected a BPE vocabulary and merge list");
        }
        Map<String, Integer> vocab = new HashMap<>();
        v.forEach((k, id) -> vocab.put((String) k, id(file, "model.vocab", k, id)));
        if (root.get("added_tokens") instanceof List<?> added) {
            for (Object a : added) {
                if (a instanceof Map<?, ?> am) {
                    if (!(am.get("content") instanceof String content)) {
                        throw new DataException(file + ": added_tokens: an entry without a content string, expected {\"id\": N, \"content\": \"...\"}");
                    }
                    vocab.putIfAbsent(content, id(file, "added_tokens", content, am.get("id")));
                }
            }
        }
        Map<String, Integer> ranks = new HashMap<>();
        for (Object m : merges) {
            String pair = m instanceof List<?> two && two.size() == 2 ? two.get(0) + " " + two.get(1) : m instanceof String str ? str : null;
            if (pair == null) throw new DataException(file + ": model.merges: " + m + " given, expected \"a b\" or [\"a\", \"b\"]");
            ranks.putIfAbsent(pair, ranks.size());
        }
        return new HfTokenizer(file, vocab, ranks, split == null ? Pattern.compile("(?s).+") : split, prefix);
    }

    /** The largest token id read (the id table is as long as the largest id). */
    static final int MAX_ID = (1 << 24) - 1;

    /** A token's id: an integer 0..{@link #MAX_ID}. */
    private static int id(Path file, String where, Object token, Object id) {
        if (!(id instanceof Long n) || n < 0 || n > MAX_ID) {
            throw new DataException(file + ": " + where + ": token " + MiniJson.str(String.valueOf(token)) + " has id "
                    + (id instanceof String text ? MiniJson.str(text) : id) + ", expected an integer 0.." + MAX_ID);
        }
        return n.intValue();
    }

    private static DataException refuse(Path file, String what, Object value) {
        return new DataException(file + ": " + what + " " + value + " is not supported yet (ttpipe reads byte-level BPE tokenizers:"
                + " ByteLevel or Split + ByteLevel pre-tokenizers, no normalizer), expected a GPT-2-style tokenizer.json");
    }

    @Override
    public String name() {
        return "hf";
    }

    @Override
    public String vocabulary() {
        return "bpe:" + file + " (" + vocabSize() + " ids)";
    }

    @Override
    public int vocabSize() {
        return byId.length;
    }

    @Override
    public int[] encode(String text) {
        if (addPrefixSpace && !text.startsWith(" ")) text = " " + text;
        List<Integer> out = new ArrayList<>();
        Matcher m = split.matcher(text);
        while (m.find()) {
            for (int id : piece(m.group())) out.add(id);
        }
        return out.stream().mapToInt(Integer::intValue).toArray();
    }

    /** One pre-token: its bytes spelled as characters, merged by rank. */
    private int[] piece(String piece) {
        return cache.computeIfAbsent(piece, p -> {
            byte[] bytes = p.getBytes(StandardCharsets.UTF_8);
            List<String> parts = new ArrayList<>(bytes.length);
            for (byte b : bytes) parts.add(String.valueOf(byteToChar[b & 0xff]));
            while (parts.size() > 1) {
                int best = -1, bestRank = Integer.MAX_VALUE;
                for (int i = 0; i + 1 < parts.size(); i++) {
                    Integer r = ranks.get(parts.get(i) + " " + parts.get(i + 1));
                    if (r != null && r < bestRank) {
                        bestRank = r;
                        best = i;
                    }
                }
                if (best < 0) break;
                parts.set(best, parts.get(best) + parts.remove(best + 1));
            }
            int[] ids = new int[parts.size()];
            for (int i = 0; i < ids.length; i++) {
                Integer id = vocab.get(parts.get(i));
                if (id == null) throw new IllegalArgumentException("'" + parts.get(i) + "' is not in " + file + "'s vocabulary");
                ids[i] = id;
            }
            return ids;
        });
    }

    @Override
    public boolean canEncode(String text) {
        try {
            encode(text);
            return true;
        } catch (IllegalArgumentException e) {
            return false;
        }
    }

    @Override
    public String decode(int[] tokens) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        for (int t : tokens) {
            String s = byId[t];
            if (s == null) continue;
            for (int i = 0; i < s.length(); i++) {
                char ch = s.charAt(i);
                int b = ch < charToByte.length ? charToByte[ch] : -1;
                if (b >= 0) {
                    bytes.write(b);
                } else {
                    byte[] raw = String.valueOf(ch).getBytes(StandardCharsets.UTF_8);     // an added token's own text
                    bytes.write(raw, 0, raw.length);
                }
            }
        }
        return bytes.toString(StandardCharsets.UTF_8);
    }

    @Override
    public String decode(int token) {
        return decode(new int[]{token});
    }

    @Override
    public void save(Path out) throws IOException {
        Files.writeString(out, "hf " + file.toAbsolutePath() + "\n", StandardCharsets.UTF_8);
    }
}

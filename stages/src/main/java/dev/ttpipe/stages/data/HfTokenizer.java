package dev.ttpipe.stages.data;

import dev.ttpipe.stages.checkpoint.MiniJson;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * A Hugging Face {@code tokenizer.json} with a BPE model, read by ttpipe itself (no native library, no network):
 * GPT-2, Llama 2 and TinyLlama, Llama 3, Qwen3 and their kin. A text encodes as Hugging Face's
 * {@code encode}: added tokens split out first, then each piece between them normalized, split by the
 * pre-tokenizer and merged by the BPE model ({@link #encodeWithSpecialTokens} adds the post-processor's
 * tokens, such as Llama 2's BOS); decoding runs the decoder. The components read are those of
 * {@link HfNormalizer}, {@link HfPreTokenizer}, {@link BpeModel}, {@link HfPostProcessor} and {@link HfDecoder};
 * any other is refused when loading, naming the file and where the component is. {@code truncation} and
 * {@code padding} do not apply: ttpipe cuts sequences itself. Immutable and thread-safe.
 */
public final class HfTokenizer implements Tokenizer {
    private final Path file;
    private final HfNormalizer normalizer;
    private final AddedTokens addedRaw;                    // matched in the text as given
    private final AddedTokens addedNormalized;             // matched in the normalized text
    private final HfPreTokenizer preTokenizer;
    private final BpeModel model;
    private final HfPostProcessor postProcessor;
    private final HfDecoder decoder;
    /** The largest token id read: the id table is as long as the largest id (the largest tokenizers have about 256 Ki). */
    static final int MAX_ID = (1 << 24) - 1;

    private final String[] byId;

    private HfTokenizer(Path file, HfNormalizer normalizer, List<AddedTokens.Token> added, HfPreTokenizer preTokenizer, BpeModel model,
                        HfPostProcessor postProcessor, HfDecoder decoder) {
        this.file = file;
        this.normalizer = normalizer;
        this.preTokenizer = preTokenizer;
        this.model = model;
        this.postProcessor = postProcessor;
        this.decoder = decoder;
        List<AddedTokens.Token> raw = new ArrayList<>(), normalized = new ArrayList<>();
        List<String> rawPatterns = new ArrayList<>(), normalizedPatterns = new ArrayList<>();
        for (AddedTokens.Token t : added) {
            (t.normalized() ? normalized : raw).add(t);
            if (t.normalized()) normalizedPatterns.add(normalizer == null ? t.content() : normalizer.normalize(t.content(), PieceStart.TEXT));
            else rawPatterns.add(t.content());
        }
        this.addedRaw = raw.isEmpty() ? AddedTokens.NONE : new AddedTokens(raw, rawPatterns);
        this.addedNormalized = normalized.isEmpty() ? AddedTokens.NONE : new AddedTokens(normalized, normalizedPatterns);
        int max = -1;
        for (int id : model.vocab().values()) max = Math.max(max, id);
        for (AddedTokens.Token t : added) max = Math.max(max, t.id());
        this.byId = new String[max + 1];
        model.vocab().forEach((k, v) -> byId[v] = k);
        for (AddedTokens.Token t : added) byId[t.id()] = t.content();
    }

    /**
     * @param file a {@code tokenizer.json}, or a folder that holds one
     * @throws DataException naming the file, and the key and value it holds that ttpipe does not read
     */
    public static HfTokenizer load(Path file) {
        if (Files.isDirectory(file)) {
            if (!Files.isRegularFile(file.resolve("tokenizer.json"))) {
                throw new DataException(file + ": a folder with no tokenizer.json, expected a Hugging Face tokenizer.json or its folder");
            }
            file = file.resolve("tokenizer.json");
        }
        TokenizerJson root;
        try {
            Object o = MiniJson.read(file);
            if (!(o instanceof Map<?, ?> m)) throw new DataException(file + ": not a JSON object, expected a tokenizer.json");
            root = new TokenizerJson(file, "", m);
        } catch (IOException | IllegalArgumentException e) {
            throw new DataException(file + ": cannot be read (" + e.getMessage() + "), expected a tokenizer.json");
        }
        TokenizerJson model = root.object("model");
        String type = model.string("type", model.has("merges") ? "BPE" : null);
        if (!"BPE".equals(type)) throw model.unsupported("BPE models (not WordPiece, Unigram or WordLevel)");
        return new HfTokenizer(file,
                root.has("normalizer") ? HfNormalizer.of(root.object("normalizer")) : null,
                AddedTokens.read(root),
                root.has("pre_tokenizer") ? HfPreTokenizer.of(root.object("pre_tokenizer")) : HfPreTokenizer.NONE,
                BpeModel.of(model),
                root.has("post_processor") ? HfPostProcessor.of(root.object("post_processor")) : HfPostProcessor.NONE,
                root.has("decoder") ? HfDecoder.of(root.object("decoder")) : HfDecoder.NONE);
    }

    @Override
    public String name() {
        return "hf";
    }

    @Override
    public String vocabulary() {
        return "bpe:" + file + " (" + vocabSize() + " ids)";
    }

    /** One more than the largest id, added tokens included (Llama 3: 128,256; Qwen3: 151,669). */
    @Override
    public int vocabSize() {
        return byId.length;
    }

    /** The text's ids, without special tokens (Hugging Face's {@code add_special_tokens=False}); added tokens in it are split out. */
    @Override
    public int[] encode(String text) {
        return encode(text, PieceStart.TEXT);
    }

    @Override
    public int[] encodeContinuing(String text) {
        return encode(text, PieceStart.CHUNK);
    }

    /** As Hugging Face's {@code encode} with {@code add_special_tokens=True}: the post-processor's tokens (Llama 2's BOS) around the ids. */
    @Override
    public int[] encodeWithSpecialTokens(String text) {
        return postProcessor.addSpecialTokens(encode(text));
    }

    private int[] encode(String text, PieceStart start) {
        Ids out = new Ids(text.length() / 3 + 16);
        List<AddedTokens.Segment> segments = new ArrayList<>();
        addedRaw.split(text, segments::add);
        List<AddedTokens.Segment> parts = new ArrayList<>();
        for (int i = 0; i < segments.size(); i++) {
            AddedTokens.Segment s = segments.get(i);
            if (s.id() >= 0) {
                out.add(s.id());
                continue;
            }
            PieceStart at = i == 0 ? start : PieceStart.PIECE;
            String normalized = normalizer == null ? s.text() : normalizer.normalize(s.text(), at);
            parts.clear();
            addedNormalized.split(normalized, parts::add);
            for (int j = 0; j < parts.size(); j++) {
                AddedTokens.Segment p = parts.get(j);
                if (p.id() >= 0) {
                    out.add(p.id());
                    continue;
                }
                for (String piece : preTokenizer.split(List.of(p.text()), j == 0 ? at : PieceStart.PIECE)) out.add(model.encode(piece));
            }
        }
        return out.toArray();
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
    public boolean mayCutAt(CharSequence text, int at) {
        return !addedRaw.crosses(text, at) && !addedNormalized.crosses(text, at);
    }

    /** The tokens' text, added and special tokens included (Hugging Face's {@code skip_special_tokens=False}); unknown ids are skipped. */
    @Override
    public String decode(int[] tokens) {
        List<String> strings = new ArrayList<>(tokens.length);
        for (int t : tokens) if (t >= 0 && t < byId.length && byId[t] != null) strings.add(byId[t]);
        return String.join("", decoder.decode(strings));
    }

    @Override
    public String decode(int token) {
        return decode(new int[]{token});
    }

    @Override
    public void save(Path out) throws IOException {
        Files.writeString(out, "hf " + file.toAbsolutePath() + "\n", StandardCharsets.UTF_8);
    }

    /** The file read. */
    Path file() {
        return file;
    }

    /** A growing list of ids. */
    private static final class Ids {
        private int[] a;
        private int n;

        Ids(int capacity) {
            a = new int[capacity];
        }

        void add(int id) {
            if (n == a.length) a = Arrays.copyOf(a, 2 * n + 16);
            a[n++] = id;
        }

        void add(int[] ids) {
            if (n + ids.length > a.length) a = Arrays.copyOf(a, Math.max(2 * a.length, n + ids.length) + 16);
            System.arraycopy(ids, 0, a, n, ids.length);
            n += ids.length;
        }

        int[] toArray() {
            return Arrays.copyOf(a, n);
        }
    }
}

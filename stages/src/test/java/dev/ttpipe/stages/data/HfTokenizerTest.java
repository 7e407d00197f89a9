package dev.ttpipe.stages.data;

import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Each {@code tokenizer.json} component on tiny inline files, so the behaviour is tested without the real
 * tokenizers in ../shared (HfTokenizerOracleTest checks those against Hugging Face's own ids).
 */
class HfTokenizerTest {
    @TempDir
    Path dir;

    static final Path FILE = Path.of("t.json");

    static TokenizerJson json(String text) {
        return new TokenizerJson(FILE, "", (Map<?, ?>) MiniJson.parse(text));
    }

    static String normalize(String normalizer, String text, PieceStart start) {
        return HfNormalizer.of(json(normalizer)).normalize(text, start);
    }

    static String normalize(String normalizer, String text) {
        return normalize(normalizer, text, PieceStart.TEXT);
    }

    static List<String> preTokenize(String preTokenizer, String text, PieceStart start) {
        return HfPreTokenizer.of(json(preTokenizer)).split(List.of(text), start);
    }

    /** A tokenizer.json with this model and the other components given (JSON or null). */
    Path tokenizer(String normalizer, String preTokenizer, String model, String addedTokens, String postProcessor, String decoder)
            throws IOException {
        return Files.writeString(dir.resolve("tokenizer.json"), "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
                + "\"added_tokens\":" + (addedTokens == null ? "[]" : addedTokens) + ",\"normalizer\":" + normalizer
                + ",\"pre_tokenizer\":" + preTokenizer + ",\"post_processor\":" + postProcessor + ",\"decoder\":" + decoder
                + ",\"model\":" + model + "}");
    }

    /** A BPE model over these tokens (ids in order) and merges, plus extra model keys. */
    static String bpe(List<String> tokens, List<String> merges, String extra) {
        StringBuilder v = new StringBuilder("{");
        for (int i = 0; i < tokens.size(); i++) v.append(i == 0 ? "" : ",").append(MiniJson.str(tokens.get(i))).append(':').append(i);
        StringBuilder m = new StringBuilder("[");
        for (int i = 0; i < merges.size(); i++) m.append(i == 0 ? "" : ",").append(MiniJson.str(merges.get(i)));
        return "{\"type\":\"BPE\",\"dropout\":null" + (extra.isEmpty() ? "" : "," + extra) + ",\"vocab\":" + v + "},\"merges\":" + m + "]}";
    }

    static List<String> byteTokens() {
        List<String> out = new ArrayList<>();
        for (int b = 0; b < 256; b++) out.add(String.format("<0x%02X>", b));
        return out;
    }

    @Test
    void normalizersComposeUnicodeFormsCaseWhitespaceAndReplacements() {
        assertEquals("\u00e9", normalize("{\"type\":\"NFC\"}", "e\u0301"));
        assertEquals("e\u0301", normalize("{\"type\":\"NFD\"}", "\u00e9"));
        assertEquals("fi1", normalize("{\"type\":\"NFKC\"}", "\ufb01\u2460"));
        assertEquals("fi1e\u0301", normalize("{\"type\":\"NFKD\"}", "\ufb01\u2460\u00e9"));
        assertEquals("àb i\u0307 οδοσ", normalize("{\"type\":\"Lowercase\"}", "ÀB \u0130 ΟΔΟΣ"), "one character at a time: no final sigma");
        assertEquals("x \u00a0", normalize("{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":false}", "\u3000\t x \u00a0"));
        assertEquals("x", normalize("{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true}", "\u3000\t x \u00a0"));
        assertEquals("cafe", normalize("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFD\"},{\"type\":\"StripAccents\"}]}", "café"));
        String prepend = "{\"type\":\"Prepend\",\"prepend\":\"▁\"}";
        assertEquals("▁x", normalize(prepend, "x"));
        assertEquals("▁x", normalize(prepend, "x", PieceStart.PIECE), "every piece between added tokens");
        assertEquals("x", normalize(prepend, "x", PieceStart.CHUNK), "not a chunk that continues a text");
        assertEquals("", normalize(prepend, ""));
        assertEquals("a▁b▁▁c", normalize("{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"▁\"}", "a b  c"));
        assertEquals("a$1b", normalize("{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"content\":\"$1\"}", "a \t b"),
                "the content is literal");
        assertEquals("▁hello▁world", normalize("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Lowercase\"}," + prepend + ","
                + "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"▁\"}]}", "Hello World"));
    }

    @Test
    void splitBehavesAsHuggingFaceForEachBehaviourAndInverted() {
        String split = "{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"%s\",\"invert\":%s}";
        PieceStart t = PieceStart.TEXT;
        assertEquals(List.of("a", "b", "c"), preTokenize(split.formatted("Removed", false), "a-b--c", t));
        assertEquals(List.of("a", "-", "b", "-", "-", "c"), preTokenize(split.formatted("Isolated", false), "a-b--c", t));
        assertEquals(List.of("a-", "b-", "-", "c"), preTokenize(split.formatted("MergedWithPrevious", false), "a-b--c", t));
        assertEquals(List.of("a", "-b", "-", "-c"), preTokenize(split.formatted("MergedWithNext", false), "a-b--c", t));
        assertEquals(List.of("a", "-", "b", "--", "c"), preTokenize(split.formatted("Contiguous", false), "a-b--c", t));
        assertEquals(List.of("-", "-", "-"), preTokenize(split.formatted("Removed", true), "a-b--c", t));
        assertEquals(List.of("12", "3", "a", "45"), preTokenize("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\p{N}{1,2}\"},"
                + "\"behavior\":\"Isolated\",\"invert\":false}", "123a45", t));
    }

    @Test
    void metaspaceAndByteLevelAddTheirPrefixAtTheRightStarts() {
        String always = "{\"type\":\"Metaspace\",\"replacement\":\"▁\",\"prepend_scheme\":\"always\",\"split\":true}";
        assertEquals(List.of("▁Hello", "▁world"), preTokenize(always, "Hello world", PieceStart.TEXT));
        assertEquals(List.of("▁Hello", "▁world"), preTokenize(always, "Hello world", PieceStart.PIECE));
        assertEquals(List.of("Hello", "▁world"), preTokenize(always, "Hello world", PieceStart.CHUNK));
        String first = "{\"type\":\"Metaspace\",\"replacement\":\"▁\",\"prepend_scheme\":\"first\",\"split\":false}";
        assertEquals(List.of("▁Hello▁world"), preTokenize(first, "Hello world", PieceStart.TEXT));
        assertEquals(List.of("Hello▁world"), preTokenize(first, "Hello world", PieceStart.PIECE), "only at the text's start");
        assertEquals(List.of("Hello", "▁world"), preTokenize("{\"type\":\"Metaspace\",\"replacement\":\"▁\",\"add_prefix_space\":false}",
                "Hello world", PieceStart.TEXT), "the older form: add_prefix_space false is prepend_scheme never; split by default");

        String byteLevel = "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true}";
        assertEquals(List.of("\u0120Hello", "\u0120world", "!"), preTokenize(byteLevel, "Hello world!", PieceStart.TEXT));
        assertEquals(List.of("Hello", "\u0120world", "!"), preTokenize(byteLevel, "Hello world!", PieceStart.CHUNK));
        assertEquals(List.of("caf\u00c3\u00a9\u0120x"), preTokenize("{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}",
                "café x", PieceStart.TEXT), "each UTF-8 byte one character: é is C3 A9");
        String sequence = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\d\"},\"behavior\":"
                + "\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":false}]}";
        assertEquals(List.of("\u0120ab", "\u01201", "\u0120c"), preTokenize(sequence, "ab1c", PieceStart.TEXT),
                "a prefix space on every piece the Split made");
        assertEquals(List.of("\u0120ab", "\u01201", "\u0120c"), preTokenize(sequence, "ab1c", PieceStart.CHUNK),
                "a chunk is cut where the text splits anyway, so after the Split its first piece is a whole piece too");
    }

    @Test
    void bpeMergesLowestRankFirstAndLeftmostAmongEquals() throws IOException {
        List<String> vocab = List.of("a", "b", "c", "ab", "bc", "abc", "aa");
        HfTokenizer byRank = HfTokenizer.load(tokenizer(null, null, bpe(vocab, List.of("b c", "a b", "a bc", "a a"), ""), null, null, null));
        assertArrayEquals(new int[]{5}, byRank.encode("abc"), "b c (rank 0) before a b (rank 1), then a bc");
        assertArrayEquals(new int[]{6, 0}, byRank.encode("aaa"), "leftmost first");
        HfTokenizer other = HfTokenizer.load(tokenizer(null, null, bpe(vocab, List.of("a b", "b c"), ""), null, null, null));
        assertArrayEquals(new int[]{3, 2}, other.encode("abc"), "a b first, and no merge ab c");
        assertEquals("ab c", other.decode(other.encode("abc")), "no decoder: tokens joined with spaces, as Hugging Face");
        HfTokenizer listForm = HfTokenizer.load(tokenizer(null, null, bpe(vocab, List.of(), "").replace("\"merges\":[]",
                "\"merges\":[[\"b\",\"c\"],[\"a\",\"bc\"]]"), null, null, null));
        assertArrayEquals(new int[]{5}, listForm.encode("abc"), "merges as pairs (Qwen3's form)");
    }

    @Test
    void bpeFallsBackToBytesThenUnkAndIgnoresMergesForWholeTokens() throws IOException {
        List<String> vocab = new ArrayList<>(List.of("<unk>", "a", "b", "c", "abc"));
        HfTokenizer unfused = HfTokenizer.load(tokenizer(null, null, bpe(vocab, List.of(), "\"unk_token\":\"<unk>\",\"fuse_unk\":false"),
                null, null, null));
        assertArrayEquals(new int[]{0, 0, 1}, unfused.encode("xya"));
        HfTokenizer fused = HfTokenizer.load(tokenizer(null, null, bpe(vocab, List.of(), "\"unk_token\":\"<unk>\",\"fuse_unk\":true"),
                null, null, null));
        assertArrayEquals(new int[]{0, 1, 0}, fused.encode("xyaz"), "consecutive unknowns fuse into one <unk>");
        HfTokenizer whole = HfTokenizer.load(tokenizer(null, null, bpe(vocab, List.of(), "\"ignore_merges\":true"), null, null, null));
        assertArrayEquals(new int[]{4}, whole.encode("abc"), "ignore_merges: a piece in the vocabulary is its token");
        HfTokenizer merged = HfTokenizer.load(tokenizer(null, null, bpe(vocab, List.of(), "\"ignore_merges\":false"), null, null, null));
        assertArrayEquals(new int[]{1, 2, 3}, merged.encode("abc"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> merged.encode("ax"));
        assertEquals("'x' (U+78) is not in " + dir.resolve("tokenizer.json") + "'s vocabulary, which has no byte fallback and no unk_token",
                e.getMessage());
        assertFalse(merged.canEncode("ax"));

        vocab.addAll(byteTokens());                             // <0x00> is id 5
        String decoder = "{\"type\":\"ByteFallback\"}";
        HfTokenizer bytes = HfTokenizer.load(tokenizer(null, null, bpe(vocab, List.of(), "\"unk_token\":\"<unk>\",\"byte_fallback\":true"),
                null, null, decoder));
        assertArrayEquals(new int[]{1, 5 + 0xC3, 5 + 0xA9, 5 + 0xF0, 5 + 0x9F, 5 + 0x9A, 5 + 0x80}, bytes.encode("aé🚀"));
        assertEquals("aé🚀", bytes.decode(bytes.encode("aé🚀")));
        assertEquals("a\uFFFDb", bytes.decode(new int[]{1, 5 + 0xC3, 2}), "a byte that is not UTF-8 on its own: one U+FFFD per byte");
    }

    @Test
    void continuingSubwordPrefixAndEndOfWordSuffixSpellTheSymbols() throws IOException {
        List<String> vocab = List.of("h", "##i", "hi", "##i</w>", "hi</w>");
        HfTokenizer t = HfTokenizer.load(tokenizer(null, null, bpe(vocab, List.of("h ##i</w>"),
                "\"continuing_subword_prefix\":\"##\",\"end_of_word_suffix\":\"</w>\""), null, null, null));
        assertArrayEquals(new int[]{4}, t.encode("hi"), "h + ##i</w> merge to hi</w>");
    }

    static final String SPECIAL = "{\"id\":%d,\"content\":\"%s\",\"single_word\":%s,\"lstrip\":%s,\"rstrip\":%s,\"normalized\":%s,\"special\":%s}";

    @Test
    void addedTokensSplitOutBeforeNormalizationHonouringNormalizedStripAndSingleWord() throws IOException {
        List<String> vocab = List.of("<unk>", "x", " ", "h", "e", "y", "o", "<", ">", "S", "[", "]", "M");
        String added = "[" + SPECIAL.formatted(20, "<S>", false, false, false, false, true) + ","
                + SPECIAL.formatted(21, "HEY", true, false, false, true, false) + ","
                + SPECIAL.formatted(22, "[M]", false, true, true, false, true) + "]";
        HfTokenizer t = HfTokenizer.load(tokenizer("{\"type\":\"Lowercase\"}", null,
                bpe(vocab, List.of(), "\"unk_token\":\"<unk>\",\"fuse_unk\":true"), added, null, null));
        assertEquals(23, t.vocabSize(), "added tokens count in the vocabulary");
        assertArrayEquals(new int[]{20, 1}, t.encode("<S>x"), "a special token is its own id");
        assertArrayEquals(new int[]{1, 2, 21, 2, 3, 4, 5, 6}, t.encode("x Hey heyo"),
                "HEY is normalized (lowercased) and matched in the lowercased text, but only as a single word");
        assertArrayEquals(new int[]{1, 22, 1}, t.encode("x  [M]  x"), "lstrip and rstrip take the spaces beside it");
        assertArrayEquals(new int[]{7, 0, 8}, t.encode("<s>"), "not normalized: matched before lowercasing, so <s> is no <S>");
        assertEquals("<S>x", t.decode(new int[]{20, 1}).replace(" ", ""));
        assertTrue(t.mayCutAt("a<S>b", 1) && !t.mayCutAt("a<S>b", 2) && !t.mayCutAt("x [M]", 2), "no cut inside an added token");
    }

    @Test
    void postProcessorsAddBosAndEosOnlyWithSpecialTokens() throws IOException {
        List<String> vocab = List.of("<s>", "</s>", "a");
        String template = "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
                + "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}}],\"pair\":[],"
                + "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[0],\"tokens\":[\"<s>\"]},\"</s>\":{\"id\":\"</s>\",\"ids\":[1],"
                + "\"tokens\":[\"</s>\"]}}}";
        HfTokenizer t = HfTokenizer.load(tokenizer(null, null, bpe(vocab, List.of(), ""), null, template, null));
        assertArrayEquals(new int[]{2, 2}, t.encode("aa"));
        assertArrayEquals(new int[]{0, 2, 2, 1}, t.encodeWithSpecialTokens("aa"));
        HfTokenizer llama31 = HfTokenizer.load(tokenizer(null, null, bpe(vocab, List.of(), ""), null,
                "{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,"
                        + "\"use_regex\":true}," + template + "]}", null));
        assertArrayEquals(new int[]{0, 2, 1}, llama31.encodeWithSpecialTokens("a"), "Llama 3.1's form: ByteLevel, then the template");
        HfTokenizer bert = HfTokenizer.load(tokenizer(null, null, bpe(vocab, List.of(), ""), null,
                "{\"type\":\"BertProcessing\",\"sep\":[\"</s>\",1],\"cls\":[\"<s>\",0]}", null));
        assertArrayEquals(new int[]{0, 2, 1}, bert.encodeWithSpecialTokens("a"));
    }

    @Test
    void decodersUndoMetaspaceByteLevelAndStrip() {
        List<String> tokens = List.of("▁Hello", "▁", "▁world");
        assertEquals(List.of("Hello", " ", " world"), HfDecoder.of(json("{\"type\":\"Metaspace\",\"replacement\":\"▁\","
                + "\"prepend_scheme\":\"always\",\"split\":true}")).decode(tokens), "the first token's ▁ is the prepended one");
        String llama2 = "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"▁\"},\"content\":\" \"},"
                + "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}";
        assertEquals(List.of("Hello  world"), HfDecoder.of(json(llama2)).decode(tokens));
        assertEquals(List.of("xabx", "a"), HfDecoder.of(json("{\"type\":\"Strip\",\"content\":\"x\",\"start\":1,\"stop\":2}"))
                .decode(List.of("xxabxxx", "xax")));
        assertEquals(List.of("Hello world<|endoftext|>"), HfDecoder.of(json("{\"type\":\"ByteLevel\"}"))
                .decode(List.of("Hello", "\u0120world", "<|endoftext|>")), "an added token's own text");
    }

    static final String LLAMA2_DECODER = "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"▁\"},"
            + "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,"
            + "\"stop\":0}]}";
    static final String BOS = "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
            + "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],"
            + "\"tokens\":[\"<s>\"]}}}";

    /** Llama 2's shape in small: <unk> <s> </s>, the 256 byte tokens, then ▁ (259) a b ▁a ▁b ▁ab; merges ▁ a, ▁ b, ▁a b. */
    static String llama2Model() {
        List<String> vocab = new ArrayList<>(List.of("<unk>", "<s>", "</s>"));
        vocab.addAll(byteTokens());
        vocab.addAll(List.of("▁", "a", "b", "▁a", "▁b", "▁ab"));
        return bpe(vocab, List.of("▁ a", "▁ b", "▁a b"), "\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true");
    }

    static String llama2Added() {
        return "[" + SPECIAL.formatted(0, "<unk>", false, false, false, false, true) + ","
                + SPECIAL.formatted(1, "<s>", false, false, false, false, true) + ","
                + SPECIAL.formatted(2, "</s>", false, false, false, false, true) + "]";
    }

    /** Llama 2's tokenizer.json form: Prepend ▁ and spaces to ▁ as normalizers, no pre-tokenizer. */
    Path llama2Style() throws IOException {
        return tokenizer("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"▁\"},{\"type\":\"Replace\","
                + "\"pattern\":{\"String\":\" \"},\"content\":\"▁\"}]}", null, llama2Model(), llama2Added(), BOS, LLAMA2_DECODER);
    }

    @Test
    void aLlama2StyleFileEncodesAndDecodesBackAndItsChunksContinueTheText() throws IOException {
        HfTokenizer t = HfTokenizer.load(llama2Style());
        int nl = 3 + '\n';
        assertArrayEquals(new int[]{264, 263, nl, 261, 264}, t.encode("ab b\nb ab"), "▁ab, ▁b, <0x0A>, b, ▁ab");
        assertArrayEquals(new int[]{1, 264}, t.encodeWithSpecialTokens("ab"));
        assertArrayEquals(new int[]{263, nl, 261, 264}, concat(t.encode("b\n"), t.encodeContinuing("b ab")),
                "a chunk that continues the text gets no leading ▁");
        assertArrayEquals(new int[]{262, 1, 259, 262}, t.encode("a<s> a"), "the piece after an added token gets its own ▁, as in"
                + " Hugging Face: ▁a, <s>, ▁, ▁a");
        for (String text : new String[]{"ab b\nb ab", "é \t\u00a0🚀\n\nx", "ab\n\nb"}) assertEquals(text, t.decode(t.encode(text)), text);

        // The same tokenizer in the newer form (no normalizer; a Metaspace pre-tokenizer that prepends at the text's start only).
        HfTokenizer m = HfTokenizer.load(tokenizer(null, "{\"type\":\"Metaspace\",\"replacement\":\"▁\",\"prepend_scheme\":\"first\","
                + "\"split\":false}", llama2Model(), llama2Added(), BOS, LLAMA2_DECODER));
        assertArrayEquals(t.encode("ab b\nb ab"), m.encode("ab b\nb ab"));
        assertArrayEquals(new int[]{1, 264}, m.encodeWithSpecialTokens("ab"));
    }

    @Test
    void aLlama2StyleCorpusPreparesInChunksToTheIdsOfTheWholeText() throws IOException {
        StringBuilder sb = new StringBuilder();
        Random r = new Random(5);
        String[] words = {"ab", "b", "a", " ", "  ", "\n", "\n\n", ".", "é", "<s>", "\t"};
        for (int i = 0; i < 3000; i++) sb.append(words[r.nextInt(words.length)]);
        String text = sb.toString();
        Path in = Files.writeString(dir.resolve("corpus.txt"), text);
        Path json = llama2Style();
        CorpusPreparation.prepare(in, json.toString(), dir.resolve("out"), 0.1, null, 41);
        TokenFiles train = TokenFiles.open(TokenFiles.resolve(dir.resolve("out").toString(), false));
        TokenFiles val = TokenFiles.open(TokenFiles.resolve(dir.resolve("out").toString(), true));
        int[] all = new int[(int) (train.size() + val.size())];
        train.copy(0, all, 0, (int) train.size());
        val.copy(0, all, (int) train.size(), (int) val.size());
        assertTrue(val.size() > 0, "a validation part");
        assertArrayEquals(HfTokenizer.load(json).encode(text), all, "the chunks, each after the first a continuation, give the whole's ids");
    }

    static int[] concat(int[] a, int[] b) {
        int[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    @Test
    void refusesWhatItDoesNotReadNamingTheFileWhereAndTheValue() throws IOException {
        String model = bpe(List.of("a", "b"), List.of(), "");
        String[][] cases = {
                {"normalizer", "{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"AAAA\"}",
                        ": normalizer.type 'Precompiled' is not supported, ttpipe reads the normalizers NFC, NFD, NFKC, NFKD, Lowercase,"},
                {"normalizer", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"BertNormalizer\"}]}",
                        ": normalizer.normalizers[1].type 'BertNormalizer' is not supported"},
                {"pre_tokenizer", "{\"type\":\"Whitespace\"}", ": pre_tokenizer.type 'Whitespace' is not supported, ttpipe reads the"
                        + " pre-tokenizers ByteLevel, Split, Metaspace and Sequence"},
                {"pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Sideways\"}",
                        ": pre_tokenizer.behavior 'Sideways', expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous"},
                {"pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}",
                        ": pre_tokenizer.pattern.Regex '(', expected a regular expression Java reads"},
                {"decoder", "{\"type\":\"WordPiece\"}", ": decoder.type 'WordPiece' is not supported, ttpipe reads the decoders"},
                {"post_processor", "{\"type\":\"Mystery\"}", ": post_processor.type 'Mystery' is not supported"},
                {"model", "{\"type\":\"Unigram\",\"vocab\":[]}", ": model.type 'Unigram' is not supported, ttpipe reads BPE models"},
                {"model", bpe(List.of("a"), List.of("a b"), ""), ": model.merges[0] 'a b', expected tokens of model.vocab ('b' is not one)"},
                {"model", bpe(List.of("a"), List.of(), "\"unk_token\":\"<unk>\""), ": model.unk_token '<unk>', expected a token of model.vocab"},
                {"model", bpe(List.of("a"), List.of(), "").replace("\"dropout\":null", "\"dropout\":0.1"),
                        ": model.dropout 0.1, expected null"},
        };
        for (String[] c : cases) {
            String json = "{\"normalizer\":null,\"pre_tokenizer\":null,\"decoder\":null,\"post_processor\":null,\"model\":" + model + "}";
            json = json.replace("\"" + c[0] + "\":" + (c[0].equals("model") ? model : "null"), "\"" + c[0] + "\":" + c[1]);
            Path f = Files.writeString(dir.resolve("bad.json"), json);
            DataException e = assertThrows(DataException.class, () -> HfTokenizer.load(f), c[1]);
            assertTrue(e.getMessage().startsWith(f + c[2]), e.getMessage());
            assertFalse(e.getMessage().contains("\n"), "one line");
        }
        DataException none = assertThrows(DataException.class, () -> HfTokenizer.load(dir));
        assertEquals(dir + ": a folder with no tokenizer.json, expected a Hugging Face tokenizer.json or its folder", none.getMessage());
    }
}

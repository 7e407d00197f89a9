package dev.ttpipe.stages.data;

import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Real tokenizers (Llama 2, Llama 3, Qwen3) against the ids Hugging Face's own library gives for a mixed text
 * (prose, code, CJK, emoji, combining marks), from ../shared/data/tokenizers; skipped when that is absent.
 */
class HfTokenizerOracleTest {
    static final Path SHARED = Path.of("../../shared/data/tokenizers");

    /** The shared tokenizers folder, or a skip saying it is absent. */
    static Path tokenizers(String name) {
        Path dir = Files.isDirectory(SHARED) ? SHARED : Path.of("../shared/data/tokenizers");
        assumeTrue(Files.isRegularFile(dir.resolve(name).resolve("tokenizer.json")),
                "skipped: " + SHARED.resolve(name).toAbsolutePath().normalize() + " is absent");
        return dir;
    }

    @ParameterizedTest
    @ValueSource(strings = {"llama2", "llama3", "qwen3"})
    void givesHuggingFacesIdsWithAndWithoutSpecialTokensAndDecodesBack(String name) throws IOException {
        Path dir = tokenizers(name);
        HfTokenizer tok = HfTokenizer.load(dir.resolve(name));
        String text = Files.readString(dir.resolve("oracle-text.txt"), StandardCharsets.UTF_8);
        Map<?, ?> oracle = (Map<?, ?>) MiniJson.parse(Files.readString(dir.resolve(name).resolve("oracle-ids.json"), StandardCharsets.UTF_8));
        int[] ids = tok.encode(text);
        assertArrayEquals(ints(oracle.get("ids")), ids, name);
        assertArrayEquals(ints(oracle.get("ids_with_special_tokens")), tok.encodeWithSpecialTokens(text), name);
        // Hugging Face's Llama 3 decode also cleans up spaces before punctuation (its tokenizer_config.json asks
        // for it), so the oracle says it does not round-trip; ttpipe's decode is the decoder alone, and does.
        assertEquals(text, tok.decode(ids), name);
    }

    @ParameterizedTest
    @ValueSource(strings = {"llama2", "llama3", "qwen3"})
    void preparesTheTextInChunksToTheIdsOfTheWholeInTheWidthTheVocabularyNeeds(String name, @TempDir Path tmp) throws IOException {
        Path dir = tokenizers(name);
        String text = Files.readString(dir.resolve("oracle-text.txt"), StandardCharsets.UTF_8);
        Path in = Files.writeString(tmp.resolve("text.txt"), text, StandardCharsets.UTF_8);
        CorpusPreparation.Result r = CorpusPreparation.prepare(in, dir.resolve(name).toString(), tmp.resolve("out"), 0.1, null, 97);
        TokenFiles train = TokenFiles.open(r.trainFiles()), val = TokenFiles.open(r.valFiles());
        assertEquals(name.equals("llama2") ? "llm.c uint16" : "llm.c uint32", train.format());
        int[] all = new int[(int) (train.size() + val.size())];
        train.copy(0, all, 0, (int) train.size());
        val.copy(0, all, (int) train.size(), (int) val.size());
        assertTrue(val.size() > 0);
        assertArrayEquals(r.tokenizer().encode(text), all, name + ": chunks of 97 characters, the later ones continuations");
        assertTrue(Files.isRegularFile(tmp.resolve("out").resolve("tokenizer.json")), "the tokenizer.json beside the token files");
    }

    static int[] ints(Object list) {
        return ((List<?>) list).stream().mapToInt(x -> ((Number) x).intValue()).toArray();
    }
}

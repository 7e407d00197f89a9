package dev.ttpipe.stages.data;

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
import java.util.List;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class TokenFilesTest {
    @TempDir
    Path dir;

    @Test
    void gpt2BpeGivesGpt2sKnownIdsWithoutNetwork() {
        Gpt2Tokenizer t = Gpt2Tokenizer.get();
        assertArrayEquals(new int[]{15496, 995}, t.encode("Hello world"));
        assertEquals(50257, t.vocabSize());
        String text = "The quick brown fox\n\njumps over the lazy dog. Ünïcödé ✓ 37+45=82";
        assertEquals(text, t.decode(t.encode(text)));
        assertArrayEquals(new int[]{50256}, new int[]{Gpt2Tokenizer.END_OF_TEXT});
    }

    @Test
    void writesHuggingFacesGpt2TokenizerFilesFromTheBundledRanks() throws IOException {
        Gpt2Tokenizer.get().writeHuggingFaceFiles(dir);
        String vocab = Files.readString(dir.resolve("vocab.json"));
        assertTrue(vocab.contains("\"Hello\":15496") && vocab.contains("\"\u0120world\":995") && vocab.endsWith("\"<|endoftext|>\":50256}"));
        List<String> merges = Files.readAllLines(dir.resolve("merges.txt"));
        assertEquals(List.of("#version: 0.2", "\u0120 t", "\u0120 a", "h e", "i n", "r e"), merges.subList(0, 6));
        assertEquals(1 + 50000, merges.size());            // GPT-2's 50000 merges
    }

    @Test
    void readsGpt2sOwnTokenizerJsonToJtokkitsIds() throws IOException {
        Gpt2Tokenizer.get().writeHuggingFaceFiles(dir);                  // GPT-2's merges, from the bundled ranks, as a tokenizer.json
        HfTokenizer hf = HfTokenizer.load(dir.resolve("tokenizer.json"));
        assertEquals(50257, hf.vocabSize());
        for (String text : new String[]{"Hello world", "The quick brown fox\n\njumps over the lazy dog. Ünïcödé ✓ 37+45=82",
                "  indented\tand   spaced\r\n", "don't we'll I'm ROMEO:\nO Romeo, Romeo! wherefore art thou Romeo?"}) {
            assertArrayEquals(Gpt2Tokenizer.get().encode(text), hf.encode(text), text);
            assertEquals(text, hf.decode(hf.encode(text)));
        }
        assertArrayEquals(new int[]{15496, 50256, 995}, hf.encode("Hello<|endoftext|> world"), "an added token is split out, as in"
                + " Hugging Face");
    }

    private Path rawUint16(String name, int... ids) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(2 * ids.length).order(ByteOrder.LITTLE_ENDIAN);
        for (int id : ids) b.putShort((short) id);
        return Files.write(dir.resolve(name), b.array());
    }

    @Test
    void readsNanoGptAndLlmcFilesMapped() throws IOException {
        Path nano = rawUint16("nano.bin", 1, 2, 65535, 4);
        TokenFiles a = TokenFiles.open(List.of(nano));
        assertEquals(4, a.size());
        assertEquals(65535, a.get(2));
        assertEquals("nanoGPT uint16", a.format());

        Path llmc = dir.resolve("llmc.bin");
        try (TokenFileWriter w = new TokenFileWriter(llmc, 50257)) {
            w.write(new int[]{7, 8, 50256}, 0, 3);
        }
        assertEquals(1024 + 6, Files.size(llmc));
        assertArrayEquals(new int[]{20240520, 1, 3}, header(llmc));
        Path wide = dir.resolve("wide.bin");
        try (TokenFileWriter w = new TokenFileWriter(wide, 128256)) {
            w.write(new int[]{128000, 9}, 0, 2);
        }
        assertArrayEquals(new int[]{20240801, 7, 2}, header(wide), "llm.c's uint32 header (Llama 3)");
        assertEquals(1024 + 8, Files.size(wide));
        byte[] older = Files.readAllBytes(wide);                         // what ttpipe wrote for uint32 before: 20240520, version 2
        ByteBuffer.wrap(older).order(ByteOrder.LITTLE_ENDIAN).putInt(0, 20240520).putInt(4, 2);
        Path v2 = Files.write(dir.resolve("v2.bin"), older);
        TokenFiles all = TokenFiles.open(List.of(nano, llmc, wide, v2));
        int[] got = new int[11];
        all.copy(0, got, 0, 11);
        assertArrayEquals(new int[]{1, 2, 65535, 4, 7, 8, 50256, 128000, 9, 128000, 9}, got);
        assertEquals(llmc + ", byte offset 1028", all.where(6));
        assertEquals(wide + ", byte offset 1028", all.where(8));
        assertEquals("llm.c uint32", TokenFiles.open(List.of(wide)).format());
        TokenFiles.open(List.of(wide)).checkVocabulary(128256);
        DataException beyond = assertThrows(DataException.class, () -> TokenFiles.open(List.of(wide)).checkVocabulary(100000));
        assertTrue(beyond.getMessage().startsWith(wide + ": byte offset 1024 (token 0): id 128000 is beyond the vocabulary of 100000"),
                beyond.getMessage());
    }

    private static int[] header(Path f) throws IOException {
        ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(f)).order(ByteOrder.LITTLE_ENDIAN);
        return new int[]{b.getInt(0), b.getInt(4), b.getInt(8)};
    }

    @Test
    void refusesToWriteAnIdThatDoesNotFitAUint16File() throws IOException {
        Path f = dir.resolve("narrow.bin");
        try (TokenFileWriter w = new TokenFileWriter(f, 50257)) {
            w.write(new int[]{1, 2}, 0, 2);
            DataException e = assertThrows(DataException.class, () -> w.write(new int[]{3, 70000}, 0, 2));
            assertEquals(f + ": token 3: id 70000 does not fit a uint16 token file, expected ids from 0 to 65535 (a vocabulary of"
                    + " more than 65,536 ids writes uint32)", e.getMessage());
        }
        Path wide = dir.resolve("wide.bin");
        try (TokenFileWriter w = new TokenFileWriter(wide, 70001)) {
            w.write(new int[]{70000}, 0, 1);
        }
        assertEquals(70000, TokenFiles.open(List.of(wide)).get(0));
    }

    @Test
    void resolvesDirectoriesAndGlobsIntoTrainingAndValidationShards() throws IOException {
        rawUint16("fineweb_train_000001.bin", 1);
        rawUint16("fineweb_train_000000.bin", 1);
        rawUint16("fineweb_val_000000.bin", 1);
        Files.writeString(dir.resolve("notes.txt"), "x");
        assertEquals(List.of("fineweb_train_000000.bin", "fineweb_train_000001.bin"), names(TokenFiles.resolve(dir.toString(), false)));
        assertEquals(List.of("fineweb_val_000000.bin"), names(TokenFiles.resolve(dir.toString(), true)));
        assertEquals(List.of("fineweb_train_000000.bin", "fineweb_train_000001.bin"),
                names(TokenFiles.resolve(dir + "/*_train_*.bin", false)));
        assertTrue(TokenFiles.isTokenPath(dir + "/*.bin"));
    }

    private static List<String> names(List<Path> files) {
        List<String> out = new ArrayList<>();
        for (Path f : files) out.add(f.getFileName().toString());
        return out;
    }

    @Test
    void refusesAnOddSizedFileNamingItAndTheCutOffset() throws IOException {
        Path f = Files.write(dir.resolve("odd.bin"), new byte[]{1, 0, 2});
        DataException e = assertThrows(DataException.class, () -> TokenFiles.open(List.of(f)));
        assertEquals(f + ": 3 bytes, an odd size: a nanoGPT token file is uint16 tokens, 2 bytes each, and its last token at"
                + " byte offset 2 is cut (expected an even size, or an llm.c header with magic 20240520 or 20240801)", e.getMessage());
    }

    @Test
    void refusesABadMagicATruncatedLlmcFileAndAnIdBeyondTheVocabulary() throws IOException {
        Path f = dir.resolve("t.bin");
        try (TokenFileWriter w = new TokenFileWriter(f, 50257)) {
            w.write(new int[]{5, 6, 60000}, 0, 3);
        }
        byte[] bytes = Files.readAllBytes(f);
        DataException beyond = assertThrows(DataException.class, () -> TokenFiles.open(List.of(f)).checkVocabulary(50257));
        assertEquals(f + ": byte offset 1028 (token 2): id 60000 is beyond the vocabulary of 50257 ids, expected ids below 50257"
                + " (a file made with another tokenizer?)", beyond.getMessage());

        Path bad = Files.write(dir.resolve("bad.bin"), bytes);
        ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).putInt(0, 12345);
        Files.write(bad, bytes);
        DataException magic = assertThrows(DataException.class, () -> TokenFiles.open(List.of(bad)));
        assertTrue(magic.getMessage().startsWith(bad + ": byte offset 0: magic 12345, expected 20240520 or 20240801"), magic.getMessage());

        Path cut = Files.write(dir.resolve("cut.bin"), Arrays.copyOf(Files.readAllBytes(f), 1028));
        DataException truncated = assertThrows(DataException.class, () -> TokenFiles.open(List.of(cut)));
        assertTrue(truncated.getMessage().startsWith(cut + ": 1028 bytes, but its llm.c header (byte offset 8) says 3 tokens"),
                truncated.getMessage());
    }

    @Test
    void preparesAStreamedCorpusWhoseTokensEqualTheWholeTextsAtOnce() throws IOException {
        StringBuilder sb = new StringBuilder();
        Random r = new Random(1);
        String[] words = {"the", "pipeline", "  stage", "\n", "\n\n", "ü", "✓", ".", " 1F0", "Hello", " world", "\t"};
        for (int i = 0; i < 4000; i++) sb.append(words[r.nextInt(words.length)]).append(r.nextBoolean() ? " " : "");
        String text = sb.toString();
        Path in = Files.writeString(dir.resolve("corpus.txt"), text, StandardCharsets.UTF_8);
        Path hfDir = Files.createDirectories(dir.resolve("hf"));
        Gpt2Tokenizer.get().writeHuggingFaceFiles(hfDir);
        for (String tok : new String[]{"gpt2", "char", hfDir.toString()}) {
            Path out = dir.resolve("out-" + Path.of(tok).getFileName());
            List<long[]> progress = new ArrayList<>();
            CorpusPreparation.Result res = CorpusPreparation.prepare(in, tok, out, 0.1, (d, t, n) -> progress.add(new long[]{d, t, n}),
                    97);
            assertTrue(progress.size() > 10, "progress reported per chunk");
            TokenFiles train = TokenFiles.open(TokenFiles.resolve(out.toString(), false));
            TokenFiles val = TokenFiles.open(TokenFiles.resolve(out.toString(), true));
            assertTrue(val.size() > 0 && train.size() > 5 * val.size(), tok + ": " + train.size() + " / " + val.size());
            int[] all = new int[(int) (train.size() + val.size())];
            train.copy(0, all, 0, (int) train.size());
            val.copy(0, all, (int) train.size(), (int) val.size());
            Tokenizer t = tok.equals("gpt2") ? Gpt2Tokenizer.get() : tok.equals("char") ? CharTokenizer.load(out.resolve("vocab.txt"))
                    : HfTokenizer.load(out);                             // the tokenizer.json copied beside the token files
            assertEquals("llm.c uint16", train.format());
            assertArrayEquals(t.encode(text), all, tok);
            assertEquals(text, t.decode(all));
            assertEquals(res.trainTokens() + res.valTokens(), all.length);
        }
    }

    @Test
    void refusesTextThatIsNotUtf8NamingTheFile() throws IOException {
        Path in = Files.write(dir.resolve("latin1.txt"), new byte[]{'a', 'b', (byte) 0xE9, 'c', '\n'});
        DataException e = assertThrows(DataException.class, () -> CorpusPreparation.prepare(in, "gpt2", dir.resolve("o"), 0.0, null));
        assertTrue(e.getMessage().startsWith(in + ": not valid UTF-8 text"), e.getMessage());
    }
}

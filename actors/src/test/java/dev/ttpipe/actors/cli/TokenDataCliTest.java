package dev.ttpipe.actors.cli;

import dev.ttpipe.stages.checkpoint.MiniJson;
import dev.ttpipe.stages.data.Gpt2Tokenizer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Random;

import static dev.ttpipe.actors.cli.CliTest.assertOneLineBadInput;
import static dev.ttpipe.actors.cli.CliTest.config;
import static dev.ttpipe.actors.cli.CliTest.run;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** ttpipe prepare, then training on its token files, as a user runs them; bad token files in one line. */
class TokenDataCliTest {
    static String corpus() {
        StringBuilder sb = new StringBuilder();
        Random r = new Random(3);
        for (int i = 0; i < 600; i++) {
            int a = r.nextInt(10), b = r.nextInt(10);
            sb.append("The sum of ").append(a).append(" and ").append(b).append(" is ").append(a + b).append(".\n");
        }
        return sb.toString();
    }

    static final String JOB = String.join("\n",
            "training_config: {batch_size: 4, max_steps: 2, learning_rate: 0.003, runs_dir: RUNS, data_path: DATA, tokenizer_type: TOK}",
            "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 2, max_sequence_length: 16}",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 2, blocks_per_rank: {0: 1, 1: 1}, num_microbatches: 2, schedule: 1f1b}",
            "");

    @Test
    void preparesGpt2AndCharTokenFilesAndTrainsAPipelineOnThem(@TempDir Path dir) throws Exception {
        Path text = Files.writeString(dir.resolve("corpus.txt"), corpus());
        for (String[] t : new String[][]{{"gpt2", "bpe", "50257 ids"}, {"char", "char", "char tokenizer"}}) {
            Path out = dir.resolve("tok-" + t[0]);
            CliTest.Result p = run("prepare", text.toString(), "--tokenizer", t[0], "--out", out.toString());
            assertEquals(0, p.code(), p.err());
            assertTrue(p.err().contains("prepare: 100%"), p.err());
            assertFalse(p.err().contains("\r"), "not a terminal: plain progress lines, no carriage returns: " + p.err());
            assertTrue(EightyColumnsTest.wider(p.out() + p.err()).isEmpty(), p.out() + p.err());
            assertTrue(Files.isRegularFile(out.resolve("train_000000.bin")) && Files.isRegularFile(out.resolve("val_000000.bin")));
            String job = JOB.replace("RUNS", dir.resolve("runs").toString()).replace("DATA", out.toString()).replace("TOK", t[1]);
            CliTest.Result r = run("train", config(dir, job).toString());
            assertEquals(0, r.code(), r.err());
            assertTrue(r.joined().contains("1 validation file(s)") && r.joined().contains(t[2]), r.out());
            assertTrue(r.out().contains("validation loss"), r.out());
        }
    }

    @Test
    void trainsWithAHuggingFaceTokenizerJson(@TempDir Path dir) throws Exception {
        Path text = Files.writeString(dir.resolve("corpus.txt"), corpus());
        Path tok = Files.createDirectories(dir.resolve("tok"));
        Gpt2Tokenizer.get().writeHuggingFaceFiles(tok);
        String job = JOB.replace("RUNS", dir.resolve("runs").toString()).replace("DATA", text.toString()).replace("TOK", "bpe")
                .replace("tokenizer_type: bpe", "tokenizer_type: bpe, tokenizer_path: " + tok.resolve("tokenizer.json"));
        CliTest.Result r = run("train", config(dir, job).toString());
        assertEquals(0, r.code(), r.err());
        assertTrue(r.joined().contains("hf tokenizer, 50257 ids"), r.out());
    }

    /**
     * A byte-level tokenizer.json whose vocabulary is GPT-2's 256 byte characters plus one added token at id 70000:
     * more ids than uint16 holds.
     */
    static Path wideByteLevelTokenizer(Path dir) throws Exception {
        char[] spell = Gpt2Tokenizer.bytesToUnicode();
        StringBuilder vocab = new StringBuilder("{");
        for (int b = 0; b < 256; b++) vocab.append(b == 0 ? "" : ",").append(MiniJson.str(String.valueOf(spell[b]))).append(':').append(b);
        return Files.writeString(dir.resolve("tokenizer.json"), "{\"added_tokens\":[{\"id\":70000,\"content\":\"<|wide|>\","
                + "\"special\":true,\"normalized\":false}],\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":{\"type\":\"ByteLevel\","
                + "\"add_prefix_space\":false,\"use_regex\":true},\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
                + "\"model\":{\"type\":\"BPE\",\"vocab\":" + vocab + "},\"merges\":[]}}");
    }

    @Test
    void preparesUint32TokenFilesWithATokenizerJsonBeyond65536IdsAndTrainsOnThem(@TempDir Path dir) throws Exception {
        Path text = Files.writeString(dir.resolve("corpus.txt"), corpus());
        Path tok = wideByteLevelTokenizer(Files.createDirectories(dir.resolve("tok")));
        Path out = dir.resolve("data");
        CliTest.Result p = run("prepare", text.toString(), "--tokenizer", tok.getParent().toString(), "--out", out.toString());
        assertEquals(0, p.code(), p.err());
        assertTrue(p.joined().contains("hf tokenizer (70001 ids)") && p.joined().contains("uint32 tokens")
                && p.joined().contains("tokenizer_path: " + out), p.out());
        byte[] head = Files.readAllBytes(out.resolve("train_000000.bin"));
        ByteBuffer h = ByteBuffer.wrap(head).order(ByteOrder.LITTLE_ENDIAN);
        assertEquals(20240801, h.getInt(0));
        assertEquals(7, h.getInt(4));
        assertEquals(1024 + 4L * h.getInt(8), head.length);
        String job = JOB.replace("RUNS", dir.resolve("runs").toString()).replace("DATA", out.toString())
                .replace("tokenizer_type: TOK", "tokenizer_type: bpe, tokenizer_path: " + out);
        CliTest.Result r = run("train", config(dir, job).toString());
        assertEquals(0, r.code(), r.err());
        assertTrue(r.joined().contains("llm.c uint32") && r.joined().contains("hf tokenizer, 70001 ids"), r.out());
        assertTrue(r.out().contains("validation loss"), r.out());
    }

    @Test
    void preparesLlama3sTokenizerToUint32FilesThatTrain(@TempDir Path dir) throws Exception {
        Path llama3 = Path.of("../../shared/data/tokenizers/llama3");
        if (!Files.isDirectory(llama3)) llama3 = Path.of("../shared/data/tokenizers/llama3");
        assumeTrue(Files.isRegularFile(llama3.resolve("tokenizer.json")), "skipped: ../shared/data/tokenizers/llama3 is absent");
        Path text = Files.writeString(dir.resolve("corpus.txt"), corpus());
        Path out = dir.resolve("data");
        CliTest.Result p = run("prepare", text.toString(), "--tokenizer", llama3.toString(), "--out", out.toString(), "--json");
        assertEquals(0, p.code(), p.err());
        assertTrue(p.out().contains("\"vocab_size\":128256") && p.out().contains("\"token_type\":\"uint32\""), p.out());
        String job = JOB.replace("RUNS", dir.resolve("runs").toString()).replace("DATA", out.toString())
                .replace("tokenizer_type: TOK", "tokenizer_type: bpe, tokenizer_path: " + out);
        CliTest.Result r = run("train", config(dir, job).toString());
        assertEquals(0, r.code(), r.err());
        assertTrue(r.joined().contains("llm.c uint32") && r.joined().contains("128256 ids") && r.out().contains("validation loss"), r.out());
    }

    @Test
    void refusesATokenizerItCannotReadInOneLine(@TempDir Path dir) throws Exception {
        Path text = Files.writeString(dir.resolve("corpus.txt"), corpus());
        assertOneLineBadInput(run("prepare", text.toString(), "--tokenizer", "llama", "--out", dir.resolve("o").toString()),
                "--tokenizer: 'llama' given, expected gpt2, char, a tokenizer.json or a folder holding one");
        Path tok = wideByteLevelTokenizer(dir);
        Files.writeString(tok, Files.readString(tok).replace("{\"type\":\"NFC\"}", "{\"type\":\"Precompiled\"}"));
        assertOneLineBadInput(run("prepare", text.toString(), "--tokenizer", tok.toString(), "--out", dir.resolve("o").toString()),
                tok + ": normalizer.type 'Precompiled' is not supported, ttpipe reads the normalizers NFC");
    }

    @Test
    void refusesAnOddSizedTokenFileAndAnIdBeyondTheVocabularyInOneLine(@TempDir Path dir) throws Exception {
        Path odd = Files.write(dir.resolve("odd.bin"), new byte[2001]);
        String job = JOB.replace("RUNS", dir.toString()).replace("DATA", odd.toString()).replace("TOK", "bpe");
        assertOneLineBadInput(run("train", config(dir, job).toString()), odd + ": 2001 bytes, an odd size",
                "byte offset 2000 is cut");
        byte[] big = new byte[2000];
        big[1000] = (byte) 0xff;
        big[1001] = (byte) 0xff;                                   // token 500 = 65535 > 50256
        Path beyond = Files.write(dir.resolve("beyond.bin"), big);
        job = JOB.replace("RUNS", dir.toString()).replace("DATA", beyond.toString()).replace("TOK", "bpe");
        assertOneLineBadInput(run("train", config(dir, job).toString()), beyond + ": byte offset 1000 (token 500): id 65535 is"
                + " beyond the vocabulary of 50257 ids");
        job = JOB.replace("RUNS", dir.toString()).replace("DATA", beyond.toString()).replace("TOK", "char");
        assertOneLineBadInput(run("train", config(dir, job).toString()), "holds token files with no vocab.txt beside them");
    }
}

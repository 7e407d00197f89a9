package dev.ttpipe.actors.cli;

import dev.ttpipe.stages.data.Gpt2Tokenizer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Random;

import static dev.ttpipe.actors.cli.CliTest.assertOneLineBadInput;
import static dev.ttpipe.actors.cli.CliTest.config;
import static dev.ttpipe.actors.cli.CliTest.run;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

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
            assertTrue(Files.isRegularFile(out.resolve("train_000000.bin")) && Files.isRegularFile(out.resolve("val_000000.bin")));
            String job = JOB.replace("RUNS", dir.resolve("runs").toString()).replace("DATA", out.toString()).replace("TOK", t[1]);
            CliTest.Result r = run("train", config(dir, job).toString());
            assertEquals(0, r.code(), r.err());
            assertTrue(r.out().contains("1 validation file(s)") && r.out().contains(t[2]), r.out());
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
        assertTrue(r.out().contains("hf tokenizer, 50257 ids"), r.out());
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

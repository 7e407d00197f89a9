package dev.ttpipe.stages.checkpoint;

import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.StagesException;
import dev.ttpipe.stages.data.DataException;
import dev.ttpipe.stages.data.HfTokenizer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A Hugging Face folder that holds what ttpipe must not take as it is: sizes that are not positive integers, token ids
 * that are negative, a config.json that counts fewer blocks than the weights hold, an index that points outside the
 * folder. Each is one line naming the file and the key.
 */
class BadModelFoldersTest {
    @TempDir
    Path dir;

    private CheckpointException configError(String json) throws IOException {
        Files.writeString(dir.resolve(HfModel.CONFIG), json);
        return assertThrows(CheckpointException.class, () -> HfModel.config(dir));
    }

    @Test
    void sizesThatAreNotPositiveIntegersAreOneLine() throws IOException {
        Path file = dir.resolve(HfModel.CONFIG);
        assertEquals(file + ": n_head: 0 given, expected a positive integer",
                configError(HfWeightsTest.GPT2_CONFIG.replace("\"n_head\":2", "\"n_head\":0")).getMessage());
        assertEquals(file + ": n_embd: -16 given, expected a positive integer",
                configError(HfWeightsTest.GPT2_CONFIG.replace("\"n_embd\":16", "\"n_embd\":-16")).getMessage());
        assertEquals(file + ": n_layer: 1.5 given, expected a positive integer",
                configError(HfWeightsTest.GPT2_CONFIG.replace("\"n_layer\":2", "\"n_layer\":1.5")).getMessage());
        assertEquals(file + ": n_inner: 0 given, expected a positive integer",
                configError(HfWeightsTest.GPT2_CONFIG.replace("\"n_inner\":null", "\"n_inner\":0")).getMessage());
        assertEquals(file + ": num_attention_heads: 0 given, expected a positive integer",
                configError(HfWeightsTest.LLAMA_CONFIG.replace("\"num_attention_heads\":4", "\"num_attention_heads\":0")).getMessage());
        // and a model built in code with no heads is refused by name, not divided by
        StagesException e = assertThrows(StagesException.class, () -> ModelSpec.gpt2(61, 16, 0, 2, 16));
        assertEquals("transformer_config: embedding_dim 16, num_heads 0, num_groups 0, num_blocks 2, intermediate_dim 64,"
                + " max_sequence_length 16 given, expected positive sizes", e.getMessage());
    }

    /** One line that starts with {@code where} and names the value and what was expected. */
    private static void assertOneLine(Exception e, String where, String value, String expected) {
        String m = e.getMessage();
        assertTrue(m.startsWith(where) && m.contains(value) && m.contains(expected) && !m.contains("\n"), m);
    }

    @Test
    void negativeOrNonIntegerTokenIdsAreOneLine() throws IOException {
        String tokenizer = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":ID},\"merges\":[]},"
                + "\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}";
        Path file = Files.writeString(dir.resolve("tokenizer.json"), tokenizer.replace("ID", "-5"));
        DataException e = assertThrows(DataException.class, () -> HfTokenizer.load(file));
        assertEquals(file + ": model.vocab.b -5, expected a token id from 0 to 16777215", e.getMessage());
        Files.writeString(file, tokenizer.replace("ID", "\"1\""));
        e = assertThrows(DataException.class, () -> HfTokenizer.load(file));
        assertOneLine(e, file + ": model.vocab.b", "'1'", "a token id from 0 to 16777215");
        Files.writeString(file, tokenizer.replace("ID", "1").replace("[]},", "[]},\"added_tokens\":[{\"id\":-1,\"content\":\"<x>\"}],"));
        e = assertThrows(DataException.class, () -> HfTokenizer.load(file));
        assertOneLine(e, file + ": added_tokens[0].id", "-1", "from 0");
        Files.writeString(file, tokenizer.replace("ID", "1"));
        assertEquals(2, HfTokenizer.load(file).vocabSize());
    }

    @Test
    void aSmallerLayerCountThanTheWeightsHoldIsRefusedNamingTheExtraTensors() throws IOException {
        Files.writeString(dir.resolve(HfModel.CONFIG), HfWeightsTest.GPT2_CONFIG.replace("\"n_layer\":2", "\"n_layer\":1"));
        HfWeightsTest.writeSafetensors(dir.resolve(HfModel.WEIGHTS), HfWeightsTest.gpt2(new Random(5), "F32"), "F32");
        ModelSpec oneBlock = HfModel.config(dir).spec();
        CheckpointException e = assertThrows(CheckpointException.class, () -> HfModel.open(dir, oneBlock));
        assertEquals(dir.resolve(HfModel.CONFIG) + ": n_layer 1 given, but " + dir.resolve(HfModel.WEIGHTS) + " holds 12 tensors of"
                + " blocks beyond it (transformer.h.1.attn.c_attn.bias, transformer.h.1.attn.c_attn.weight,"
                + " transformer.h.1.attn.c_proj.bias, ...), expected n_layer to"
                + " count every block of the weights", e.getMessage());
    }

    @Test
    void indexEntriesOutsideTheFolderAreRefused() throws IOException {
        Files.writeString(dir.resolve(HfModel.CONFIG), HfWeightsTest.GPT2_CONFIG);
        ModelSpec spec = HfModel.config(dir).spec();
        for (String outside : new String[]{"../model.safetensors", "/etc/passwd", "a/../../b.safetensors"}) {
            Files.writeString(dir.resolve(HfModel.INDEX), "{\"weight_map\":{\"wte.weight\":\"" + outside + "\"}}");
            CheckpointException e = assertThrows(CheckpointException.class, () -> HfModel.open(dir, spec));
            assertEquals(dir.resolve(HfModel.INDEX) + ": weight_map: '" + outside + "' given, expected a file name inside the folder"
                    + " (no absolute path, no '..')", e.getMessage());
        }
        assertEquals(dir.resolve("shards/a.safetensors"), ListedFile.resolve(dir, "shards/a.safetensors", "index"));
    }
}

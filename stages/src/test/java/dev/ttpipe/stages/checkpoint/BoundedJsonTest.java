package dev.ttpipe.stages.checkpoint;

import dev.ttpipe.stages.data.DataException;
import dev.ttpipe.stages.data.HfTokenizer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link MiniJson} is bounded: 100,000 nested brackets, an endless string or number, are one line with the offset
 * and the limit, in every reader of the stages module (config.json, an index, a safetensors header,
 * tokenizer.json), never a StackOverflowError.
 */
class BoundedJsonTest {
    /** 100,000 nested arrays, the input that overflowed the stack of the recursive reader. */
    static final String NESTED = "[".repeat(100_000) + "]".repeat(100_000);
    static final String DEPTH_ERROR = "nested deeper than the limit of " + MiniJson.MAX_DEPTH + " levels at offset " + MiniJson.MAX_DEPTH;

    @TempDir
    Path dir;

    @Test
    void nestingDeeperThanTheLimitIsOneLineWithTheOffset() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> MiniJson.parse(NESTED));
        assertEquals(DEPTH_ERROR, e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> MiniJson.parse("{\"a\":".repeat(100_000)));
        assertTrue(e.getMessage().startsWith("nested deeper than the limit of 512 levels"), e.getMessage());
        String deepest = "[".repeat(MiniJson.MAX_DEPTH) + "]".repeat(MiniJson.MAX_DEPTH);
        assertEquals(List.of(), unwrap(MiniJson.parse(deepest), MiniJson.MAX_DEPTH - 1));
    }

    @Test
    void stringsAndNumbersLongerThanTheLimitAreRefusedAtTheirStart() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> MiniJson.parse("[1, \"" + "x".repeat(MiniJson.MAX_STRING + 1) + "\"]"));
        assertEquals("a string longer than the limit of " + MiniJson.MAX_STRING + " characters at offset 4", e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> MiniJson.parse("[" + "9".repeat(MiniJson.MAX_NUMBER + 1) + "]"));
        assertEquals("a number longer than the limit of " + MiniJson.MAX_NUMBER + " characters at offset 1", e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> MiniJson.parse("\"\\u12G4\""));
        assertEquals("bad \\u escape at offset 3", e.getMessage());
        assertEquals(Map.of("a", "\u00e9"), MiniJson.parse("{\"a\":\"\\u00E9\"}"));
    }

    @Test
    void nestedConfigJsonIsOneLineNamingTheFile() throws IOException {
        Files.writeString(dir.resolve(HfModel.CONFIG), NESTED);
        CheckpointException e = assertThrows(CheckpointException.class, () -> HfModel.config(dir));
        assertEquals(dir.resolve(HfModel.CONFIG) + ": cannot be read (" + DEPTH_ERROR + ")", e.getMessage());
    }

    @Test
    void nestedIndexIsOneLineNamingTheFile() throws IOException {
        Files.writeString(dir.resolve(HfModel.CONFIG), HfWeightsTest.GPT2_CONFIG);
        Files.writeString(dir.resolve(HfModel.INDEX), "{\"weight_map\":" + NESTED + "}");
        CheckpointException e = assertThrows(CheckpointException.class, () -> HfModel.open(dir, HfModel.config(dir).spec()));
        assertEquals(dir.resolve(HfModel.INDEX) + ": cannot be read (nested deeper than the limit of 512 levels at offset 525)",
                e.getMessage());
    }

    @Test
    void nestedSafetensorsHeaderIsOneLineNamingTheFile() throws IOException {
        byte[] header = ("{\"__metadata__\":" + NESTED + "}").getBytes(StandardCharsets.US_ASCII);
        Path file = dir.resolve("model.safetensors");
        Files.write(file, ByteBuffer.allocate(8 + header.length).order(ByteOrder.LITTLE_ENDIAN).putLong(header.length).put(header).array());
        CheckpointException e = assertThrows(CheckpointException.class, () -> new SafeTensors.Reader(file));
        assertEquals(file + ": header is not valid JSON (nested deeper than the limit of 512 levels at offset 527)", e.getMessage());
    }

    @Test
    void nestedTokenizerJsonIsOneLineNamingTheFile() throws IOException {
        Path file = Files.writeString(dir.resolve("tokenizer.json"), "{\"model\":{\"vocab\":" + NESTED + "}}");
        DataException e = assertThrows(DataException.class, () -> HfTokenizer.load(file));
        assertEquals(file + ": cannot be read (nested deeper than the limit of 512 levels at offset 528), expected a tokenizer.json",
                e.getMessage());
    }

    private static Object unwrap(Object v, int levels) {
        for (int k = 0; k < levels; k++) v = ((List<?>) v).get(0);
        return v;
    }
}

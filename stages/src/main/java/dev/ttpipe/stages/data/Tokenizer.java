package dev.ttpipe.stages.data;

import java.io.IOException;
import java.nio.file.Path;

/**
 * Text to token ids and back. {@link CharTokenizer} (one id per character of a corpus) and
 * {@link Gpt2Tokenizer} (GPT-2's byte-level BPE, bundled: no download). Implementations are immutable
 * and thread-safe.
 */
public interface Tokenizer {
    /** {@code char} or {@code gpt2}: what {@code ttpipe prepare --tokenizer} and the run record call it. */
    String name();

    int vocabSize();

    /** @throws IllegalArgumentException when the text holds something the vocabulary cannot encode */
    int[] encode(String text);

    boolean canEncode(String text);

    String decode(int[] tokens);

    /** One token's text (a BPE token may be part of a character: then the replacement character). */
    String decode(int token);

    /** Writes what reloads this tokenizer (the character list; for BPE its name) into {@code file}. */
    void save(Path file) throws IOException;

    /** What identifies the vocabulary in a checkpoint's trainer_state.json. */
    String vocabulary();
}

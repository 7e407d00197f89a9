package dev.ttpipe.stages.data;

import java.io.IOException;
import java.nio.file.Path;

/**
 * Text to token ids and back. {@link CharTokenizer} (one id per character of a corpus),
 * {@link Gpt2Tokenizer} (GPT-2's byte-level BPE, bundled: no download) and {@link HfTokenizer} (a Hugging Face
 * {@code tokenizer.json}). Implementations are immutable and thread-safe.
 */
public interface Tokenizer {
    /** {@code char}, {@code gpt2} or {@code hf}: what {@code ttpipe prepare --tokenizer} and the run record call it. */
    String name();

    int vocabSize();

    /** @throws IllegalArgumentException when the text holds something the vocabulary cannot encode */
    int[] encode(String text);

    boolean canEncode(String text);

    /**
     * The ids of a text that continues an earlier one (a corpus read in chunks): as {@link #encode}, less what a
     * tokenizer puts only at the start of a text (SentencePiece's leading "▁").
     */
    default int[] encodeContinuing(String text) {
        return encode(text);
    }

    /** The ids with the special tokens the tokenizer puts around a text (a BOS), as Hugging Face's {@code add_special_tokens}. */
    default int[] encodeWithSpecialTokens(String text) {
        return encode(text);
    }

    /**
     * Whether a text may be cut at {@code at} as far as this tokenizer's own tokens go: not inside an added token.
     * The caller picks the place, where the pre-tokenizer splits anyway (see {@link CorpusPreparation}).
     */
    default boolean mayCutAt(CharSequence text, int at) {
        return true;
    }

    String decode(int[] tokens);

    /** One token's text (a BPE token may be part of a character: then the replacement character). */
    String decode(int token);

    /** Writes what reloads this tokenizer (the character list; for BPE its name) into {@code file}. */
    void save(Path file) throws IOException;

    /** What identifies the vocabulary in a checkpoint's trainer_state.json. */
    String vocabulary();
}

package dev.ttpipe.stages.data;

import com.knuddels.jtokkit.Encodings;
import com.knuddels.jtokkit.api.Encoding;
import com.knuddels.jtokkit.api.EncodingType;
import com.knuddels.jtokkit.api.IntArrayList;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * GPT-2's byte-level BPE (tiktoken's {@code r50k_base}, 50257 ids, {@code <|endoftext|>} = 50256),
 * from jtokkit, which bundles the merge table: no network. Any text encodes. Thread-safe.
 */
public final class Gpt2Tokenizer implements Tokenizer {
    public static final int VOCAB = 50257;
    public static final int END_OF_TEXT = 50256;
    private static final Gpt2Tokenizer INSTANCE = new Gpt2Tokenizer();

    private final Encoding encoding = Encodings.newLazyEncodingRegistry().getEncoding(EncodingType.R50K_BASE);

    private Gpt2Tokenizer() {
    }

    public static Gpt2Tokenizer get() {
        return INSTANCE;
    }

    @Override
    public String name() {
        return "gpt2";
    }

    @Override
    public String vocabulary() {
        return "bpe:gpt2 (r50k_base, " + VOCAB + " ids)";
    }

    @Override
    public int vocabSize() {
        return VOCAB;
    }

    /** Ordinary text (a literal "<|endoftext|>" in it is text, not the special token, as tiktoken's encode_ordinary). */
    @Override
    public int[] encode(String text) {
        return encoding.encodeOrdinary(text).toArray();
    }

    @Override
    public boolean canEncode(String text) {
        return true;
    }

    @Override
    public String decode(int[] tokens) {
        return new String(decodeBytes(tokens), StandardCharsets.UTF_8);
    }

    /** The UTF-8 bytes of the tokens (a streaming printer joins them before decoding split characters). */
    public byte[] decodeBytes(int[] tokens) {
        IntArrayList list = new IntArrayList(tokens.length);
        for (int t : tokens) list.add(t);
        return encoding.decodeBytes(list);
    }

    @Override
    public String decode(int token) {
        return decode(new int[]{token});
    }

    @Override
    public void save(Path file) throws IOException {
        Files.writeString(file, "gpt2\n", StandardCharsets.UTF_8);
    }
}

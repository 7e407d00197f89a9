package dev.ttpipe.stages.data;

import java.io.IOException;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;

/**
 * Training and validation tokens with their tokenizer: a text tokenised in memory and split into a
 * training part (the first 1 - f of the tokens) and a validation part (the last f), or memory-mapped
 * token files ({@link TokenFiles}). Batches are windows at offsets drawn from (seed, pass), so every
 * run with the same seed sees the same data whatever its pipeline.
 */
public final class TextDataset {
    private final Tokenizer tokenizer;
    private final TokenSource train;
    private final TokenSource validation;

    public TextDataset(String text, Tokenizer tokenizer, double validationFraction) {
        this.tokenizer = tokenizer;
        int[] all = tokenizer.encode(text);
        int nVal = (int) Math.round(all.length * validationFraction);
        this.train = TokenSource.of(Arrays.copyOfRange(all, 0, all.length - nVal));
        this.validation = TokenSource.of(Arrays.copyOfRange(all, all.length - nVal, all.length));
    }

    private TextDataset(Tokenizer tokenizer, TokenSource train, TokenSource validation) {
        this.tokenizer = tokenizer;
        this.train = train;
        this.validation = validation;
    }

    /** Tokens already made (token files): {@code validation} null takes the last {@code validationFraction} of {@code train}. */
    public static TextDataset ofTokens(Tokenizer tokenizer, TokenSource train, TokenSource validation, double validationFraction) {
        if (validation != null) return new TextDataset(tokenizer, train, validation);
        long nVal = Math.round(train.size() * validationFraction);
        return new TextDataset(tokenizer, train.slice(0, train.size() - nVal), train.slice(train.size() - nVal, train.size()));
    }

    public static TextDataset of(String text, double validationFraction) {
        return new TextDataset(text, CharTokenizer.fromText(text), validationFraction);
    }

    /** Reads a UTF-8 file; malformed input is an error naming the file. */
    public static String readUtf8(Path file) throws IOException {
        byte[] bytes = Files.readAllBytes(file);
        try {
            return StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(bytes)).toString();
        } catch (CharacterCodingException e) {
            throw new IOException(file + ": not valid UTF-8 text (" + e.getMessage() + ")");
        }
    }

    public Tokenizer tokenizer() {
        return tokenizer;
    }

    public long trainTokens() {
        return train.size();
    }

    public long validationTokens() {
        return validation.size();
    }

    /** The training batch of forward pass {@code pass}. */
    public Batch trainBatch(long seed, int pass, int batchSize, int seqLen) {
        return sample(train, seed, pass, batchSize, seqLen, "training");
    }

    /** Validation batch number {@code index} (the same windows every time it is asked for). */
    public Batch validationBatch(long seed, int index, int batchSize, int seqLen) {
        return sample(validation, seed ^ 0x5DEECE66DL, index, batchSize, seqLen, "validation");
    }

    private static Batch sample(TokenSource tokens, long seed, int pass, int batchSize, int seqLen, String part) {
        long span = tokens.size() - seqLen - 1;
        if (span < 1) {
            throw new IllegalArgumentException("the " + part + " text has " + tokens.size() + " tokens, too few for sequences of "
                    + seqLen + " (need at least " + (seqLen + 2) + ")");
        }
        int[] in = new int[batchSize * seqLen];
        int[] tg = new int[batchSize * seqLen];
        long state = seed * 0x9E3779B97F4A7C15L + pass;
        for (int i = 0; i < batchSize; i++) {
            state += 0x9E3779B97F4A7C15L;
            long z = state;
            z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
            z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
            z ^= z >>> 31;
            long off = Math.floorMod(z, span);
            tokens.copy(off, in, i * seqLen, seqLen);
            tokens.copy(off + 1, tg, i * seqLen, seqLen);
        }
        return new Batch(batchSize, seqLen, in, tg);
    }
}

package dev.ttpipe.stages.data;

import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.Reader;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.Locale;

/**
 * Tokenises a UTF-8 text into llm.c token files, streaming: the text is read a chunk at a time and
 * never held whole, so a corpus larger than memory works. The first {@code 1 - f} of the bytes
 * become {@code train_NNNNNN.bin}, the rest {@code val_NNNNNN.bin} (a new shard every
 * {@link #SHARD_TOKENS} tokens), uint16 or uint32 as the vocabulary needs; a char tokenizer's vocabulary
 * goes to {@code vocab.txt}, a {@code tokenizer.json} is copied beside the files (either found there by a
 * run whose {@code tokenizer_path} is the directory).
 *
 * <p>Chunks end just after a line break that has a non-space character on both sides (and no added token
 * across it): GPT-2's, Llama 3's and Qwen3's pre-tokenizers split there, and Llama 2's vocabulary has the line
 * break as a byte of its own, so with the later chunks encoded as continuations ({@link Tokenizer#encodeContinuing})
 * the tokens equal those of the whole text at once.
 */
public final class CorpusPreparation {
    public static final long SHARD_TOKENS = 100_000_000L;
    private static final int CHUNK_CHARS = 1 << 20;

    /** Called after each chunk: bytes of the text read so far, of {@code total}, and tokens written. */
    public interface Progress {
        void update(long bytesDone, long totalBytes, long tokens);
    }

    /** What a preparation wrote. */
    public record Result(Tokenizer tokenizer, List<Path> trainFiles, List<Path> valFiles, long trainTokens, long valTokens,
                         long bytes) {
    }

    private CorpusPreparation() {
    }

    /**
     * @param tokenizer {@code char} (the vocabulary is the text's characters: one extra streaming pass), {@code gpt2},
     *                  or a Hugging Face {@code tokenizer.json} or the folder that holds it
     * @throws DataException naming the file and byte offset where the text is not UTF-8, or what a tokenizer.json
     *                       holds that ttpipe does not read
     */
    public static Result prepare(Path text, String tokenizer, Path outDir, double valFraction, Progress progress) throws IOException {
        return prepare(text, tokenizer, outDir, valFraction, progress, CHUNK_CHARS);
    }

    /** {@link #prepare} reading {@code chunkChars} characters at a time (tests make chunk boundaries many). */
    static Result prepare(Path text, String tokenizer, Path outDir, double valFraction, Progress progress, int chunkChars)
            throws IOException {
        long size = Files.size(text);
        Tokenizer tok = switch (tokenizer) {
            case "gpt2" -> Gpt2Tokenizer.get();
            case "char" -> charVocabulary(text);
            default -> HfTokenizer.load(Path.of(tokenizer));
        };
        Files.createDirectories(outDir);
        if (tok instanceof HfTokenizer hf) {
            Path copy = outDir.resolve("tokenizer.json");
            if (!Files.exists(copy) || !Files.isSameFile(copy, hf.file())) Files.copy(hf.file(), copy, StandardCopyOption.REPLACE_EXISTING);
        } else {
            tok.save(outDir.resolve(tok instanceof CharTokenizer ? "vocab.txt" : "tokenizer.txt"));
        }
        Run run = new Run(tok, outDir, size, progress, chunkChars);
        long split = splitPoint(text, size, valFraction, tok);
        List<Path> train = encode(text, 0, split, "train", run);
        long trainTokens = run.tokens;
        List<Path> val = encode(text, split, size, "val", run);
        return new Result(tok, train, val, trainTokens, run.tokens - trainTokens, size);
    }

    /** What one preparation has done so far. */
    private static final class Run {
        final Tokenizer tok;
        final Path outDir;
        final long totalBytes;
        final Progress progress;
        final int chunkChars;
        long bytes;
        long tokens;
        boolean started;                                    // a chunk was encoded: the next continues the text

        Run(Tokenizer tok, Path outDir, long totalBytes, Progress progress, int chunkChars) {
            this.tok = tok;
            this.outDir = outDir;
            this.totalBytes = totalBytes;
            this.progress = progress;
            this.chunkChars = chunkChars;
        }

        int[] encode(String chunk) {
            int[] ids = started ? tok.encodeContinuing(chunk) : tok.encode(chunk);
            started = true;
            return ids;
        }
    }

    /** Pass 1 for the char tokenizer: the set of code points, streaming. */
    private static CharTokenizer charVocabulary(Path text) throws IOException {
        BitSet seen = new BitSet();
        try (Reader r = reader(text, 0, Files.size(text))) {
            char[] buf = new char[CHUNK_CHARS];
            char high = 0;
            for (int n; (n = read(r, buf, text)) > 0; ) {
                for (int i = 0; i < n; i++) {
                    char c = buf[i];
                    if (Character.isHighSurrogate(c)) {
                        high = c;
                    } else if (Character.isLowSurrogate(c) && high != 0) {
                        seen.set(Character.toCodePoint(high, c));
                        high = 0;
                    } else {
                        seen.set(c);
                    }
                }
            }
        }
        return CharTokenizer.fromCodePoints(seen.stream().toArray());
    }

    /**
     * The byte where validation starts: the first clean cut (see the class) at or after {@code (1 - f) x size},
     * else the first UTF-8 character start there.
     */
    static long splitPoint(Path text, long size, double valFraction, Tokenizer tok) throws IOException {
        if (valFraction <= 0) return size;
        long at = (long) Math.floor(size * (1 - valFraction));
        try (FileChannel ch = FileChannel.open(text, StandardOpenOption.READ)) {
            ByteBuffer b = ByteBuffer.allocate(1 << 16);
            long firstCharStart = -1;
            int prev = at > 0 ? readByte(ch, at - 1) : 0;
            for (long pos = at; pos < size; ) {
                b.clear();
                int n = ch.read(b, pos);
                if (n <= 0) break;
                for (int i = 0; i < n; i++, pos++) {
                    int c = b.get(i) & 0xff;
                    if (firstCharStart < 0 && (c & 0xC0) != 0x80) firstCharStart = pos;
                    if (prev == '\n' && pos >= 2 && isCleanCut(ch, pos, size, tok)) return pos;
                    prev = c;
                }
                if (pos - at > (4 << 20)) break;                      // no clean cut near: take the character start
            }
            return firstCharStart < 0 ? size : firstCharStart;
        }
    }

    /** {@link #isCleanCut(CharSequence, int, Tokenizer)} at a byte of the file, on the text around it. */
    private static boolean isCleanCut(FileChannel ch, long pos, long size, Tokenizer tok) throws IOException {
        long from = Math.max(0, pos - 256);
        ByteBuffer window = ByteBuffer.allocate((int) (Math.min(size, pos + 256) - from));
        ch.read(window, from);
        byte[] bytes = window.array();
        int start = 0;
        while (start < bytes.length && (bytes[start] & 0xC0) == 0x80) start++;   // from a character's start
        int cut = (int) (pos - from);
        String before = new String(bytes, start, Math.max(0, cut - start), StandardCharsets.UTF_8);
        String after = new String(bytes, cut, bytes.length - cut, StandardCharsets.UTF_8);
        return isCleanCut(before + after, before.length(), tok);
    }

    /** Just after a line break with a non-space character on both sides, and no added token across it. */
    static boolean isCleanCut(CharSequence s, int i, Tokenizer tok) {
        return i >= 2 && i < s.length() && s.charAt(i - 1) == '\n' && !UnicodeWhiteSpace.is(Character.codePointBefore(s, i - 1))
                && !UnicodeWhiteSpace.is(Character.codePointAt(s, i)) && tok.mayCutAt(s, i);
    }

    private static int readByte(FileChannel ch, long pos) throws IOException {
        ByteBuffer one = ByteBuffer.allocate(1);
        ch.read(one, pos);
        return one.get(0) & 0xff;
    }

    private static List<Path> encode(Path text, long from, long to, String part, Run run) throws IOException {
        List<Path> files = new ArrayList<>();
        TokenFileWriter w = null;
        try (CountingStream counted = new CountingStream(slice(text, from, to));
             Reader r = new InputStreamReader(counted, strictUtf8())) {
            char[] buf = new char[run.chunkChars];
            StringBuilder pending = new StringBuilder();
            boolean end = false;
            while (!end) {
                int n = read(r, buf, text);
                if (n > 0) pending.append(buf, 0, n);
                else end = true;
                int cut = end ? pending.length() : cleanCut(pending, run.tok, 8 * run.chunkChars);
                if (cut <= 0) continue;
                int[] ids = run.encode(pending.substring(0, cut));
                pending.delete(0, cut);
                for (int i = 0; i < ids.length; ) {
                    if (w == null || w.tokens() >= SHARD_TOKENS) {
                        if (w != null) w.close();
                        Path f = run.outDir.resolve(String.format(Locale.ROOT, "%s_%06d.bin", part, files.size()));
                        files.add(f);
                        w = new TokenFileWriter(f, run.tok.vocabSize());
                    }
                    int k = (int) Math.min(ids.length - i, SHARD_TOKENS - w.tokens());
                    w.write(ids, i, k);
                    i += k;
                    run.tokens += k;
                }
                if (run.progress != null) run.progress.update(run.bytes + counted.count, run.totalBytes, run.tokens);
            }
            run.bytes += counted.count;
        } finally {
            if (w != null) w.close();
        }
        if (files.isEmpty()) {                                              // an empty part: still a valid, empty file
            Path f = run.outDir.resolve(String.format(Locale.ROOT, "%s_%06d.bin", part, 0));
            new TokenFileWriter(f, run.tok.vocabSize()).close();
            files.add(f);
        }
        return files;
    }

    /**
     * Where to end a chunk: at the last clean cut; for a text without one in 8 chunks (no line breaks), before a space
     * that follows a non-space; for the char tokenizer anywhere but inside a surrogate pair. 0: read on.
     */
    private static int cleanCut(StringBuilder s, Tokenizer tok, int limit) {
        int n = s.length();
        if (tok instanceof CharTokenizer) return n > 0 && Character.isHighSurrogate(s.charAt(n - 1)) ? n - 1 : n;
        for (int i = n - 1; i >= 2; i--) {
            if (s.charAt(i - 1) == '\n' && isCleanCut(s, i, tok)) return i;
        }
        if (n > limit) {
            for (int i = n - 1; i > 0; i--) {
                if (s.charAt(i) == ' ' && !UnicodeWhiteSpace.is(s.charAt(i - 1)) && tok.mayCutAt(s, i)) return i;
            }
        }
        return 0;
    }

    private static int read(Reader r, char[] buf, Path file) throws IOException {
        try {
            int n = 0;
            while (n < buf.length) {
                int k = r.read(buf, n, buf.length - n);
                if (k < 0) break;
                n += k;
            }
            return n;
        } catch (CharacterCodingException e) {
            throw new DataException(file + ": not valid UTF-8 text (" + e + "), expected a UTF-8 text file");
        }
    }

    private static Reader reader(Path text, long from, long to) throws IOException {
        return new InputStreamReader(slice(text, from, to), strictUtf8());
    }

    private static CharsetDecoder strictUtf8() {
        return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT);
    }

    private static InputStream slice(Path text, long from, long to) throws IOException {
        FileChannel ch = FileChannel.open(text, StandardOpenOption.READ);
        ch.position(from);
        InputStream in = Channels.newInputStream(ch);
        return new BufferedInputStream(new InputStream() {
            long left = to - from;

            @Override
            public int read() throws IOException {
                if (left <= 0) return -1;
                int c = in.read();
                if (c >= 0) left--;
                return c;
            }

            @Override
            public int read(byte[] b, int off, int len) throws IOException {
                if (left <= 0) return -1;
                int n = in.read(b, off, (int) Math.min(len, left));
                if (n > 0) left -= n;
                return n;
            }

            @Override
            public void close() throws IOException {
                in.close();
            }
        }, 1 << 20);
    }

    private static final class CountingStream extends InputStream {
        private final InputStream in;
        long count;

        CountingStream(InputStream in) {
            this.in = in;
        }

        @Override
        public int read() throws IOException {
            int c = in.read();
            if (c >= 0) count++;
            return c;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = in.read(b, off, len);
            if (n > 0) count += n;
            return n;
        }

        @Override
        public void close() throws IOException {
            in.close();
        }
    }
}

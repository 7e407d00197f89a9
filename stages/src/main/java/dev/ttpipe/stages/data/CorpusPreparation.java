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
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.Locale;

/**
 * Tokenises a UTF-8 text into llm.c token files, streaming: the text is read a chunk at a time and
 * never held whole, so a corpus larger than memory works. The first {@code 1 - f} of the bytes
 * become {@code train_NNNNNN.bin}, the rest {@code val_NNNNNN.bin} (a new shard every
 * {@link #SHARD_TOKENS} tokens); a char tokenizer's vocabulary goes to {@code vocab.txt} (found there
 * by a run whose {@code data_path} is the directory).
 *
 * <p>Chunks end just before a newline that follows a non-space character: GPT-2's pre-tokenizer
 * never joins across such a point, so the tokens equal those of the whole text at once.
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
     * @param tokenizer {@code char} (the vocabulary is the text's characters: one extra streaming pass) or {@code gpt2}
     * @throws DataException naming the file and byte offset where the text is not UTF-8
     */
    public static Result prepare(Path text, String tokenizer, Path outDir, double valFraction, Progress progress) throws IOException {
        return prepare(text, tokenizer, outDir, valFraction, progress, CHUNK_CHARS);
    }

    /** {@link #prepare} reading {@code chunkChars} characters at a time (tests make chunk boundaries many). */
    static Result prepare(Path text, String tokenizer, Path outDir, double valFraction, Progress progress, int chunkChars)
            throws IOException {
        long size = Files.size(text);
        Files.createDirectories(outDir);
        Tokenizer tok;
        if (tokenizer.equals("gpt2")) {
            tok = Gpt2Tokenizer.get();
            tok.save(outDir.resolve("tokenizer.txt"));
        } else if (tokenizer.equals("char")) {
            tok = charVocabulary(text);
            tok.save(outDir.resolve("vocab.txt"));
        } else {
            throw new IllegalArgumentException("tokenizer " + tokenizer + ", expected char or gpt2");
        }
        long split = splitPoint(text, size, valFraction);
        long[] done = {0, 0};
        List<Path> train = encode(text, 0, split, tok, outDir, "train", size, done, progress, chunkChars);
        long trainTokens = done[1];
        List<Path> val = encode(text, split, size, tok, outDir, "val", size, done, progress, chunkChars);
        return new Result(tok, train, val, trainTokens, done[1] - trainTokens, size);
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
     * The byte where validation starts: the first newline at or after {@code (1 - f) x size} that follows
     * a non-space byte (a clean cut for BPE), else the first UTF-8 character start there.
     */
    static long splitPoint(Path text, long size, double valFraction) throws IOException {
        if (valFraction <= 0) return size;
        long at = (long) Math.floor(size * (1 - valFraction));
        try (FileChannel ch = FileChannel.open(text, StandardOpenOption.READ)) {
            ByteBuffer b = ByteBuffer.allocate(1 << 16);
            long firstCharStart = -1;
            int prev = at > 0 ? readByte(ch, at - 1) : '\n';
            for (long pos = at; pos < size; ) {
                b.clear();
                int n = ch.read(b, pos);
                if (n <= 0) break;
                for (int i = 0; i < n; i++, pos++) {
                    int c = b.get(i) & 0xff;
                    if (firstCharStart < 0 && (c & 0xC0) != 0x80) firstCharStart = pos;
                    if (c == '\n' && pos > 0 && !isSpace(prev)) return pos;
                    prev = c;
                }
                if (pos - at > (4 << 20)) break;                      // no clean cut near: take the character start
            }
            return firstCharStart < 0 ? size : firstCharStart;
        }
    }

    private static boolean isSpace(int c) {
        return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == 0x0B || c == 0x0C;
    }

    private static int readByte(FileChannel ch, long pos) throws IOException {
        ByteBuffer one = ByteBuffer.allocate(1);
        ch.read(one, pos);
        return one.get(0) & 0xff;
    }

    private static List<Path> encode(Path text, long from, long to, Tokenizer tok, Path outDir, String part, long total,
                                     long[] done, Progress progress, int chunkChars) throws IOException {
        List<Path> files = new ArrayList<>();
        TokenFileWriter w = null;
        try (CountingStream counted = new CountingStream(slice(text, from, to));
             Reader r = new InputStreamReader(counted, strictUtf8())) {
            char[] buf = new char[chunkChars];
            StringBuilder pending = new StringBuilder();
            boolean end = false;
            while (!end) {
                int n = read(r, buf, text);
                if (n > 0) pending.append(buf, 0, n);
                else end = true;
                int cut = end ? pending.length() : cleanCut(pending, tok instanceof Gpt2Tokenizer, 8 * chunkChars);
                if (cut <= 0) continue;
                int[] ids = tok.encode(pending.substring(0, cut));
                pending.delete(0, cut);
                for (int i = 0; i < ids.length; ) {
                    if (w == null || w.tokens() >= SHARD_TOKENS) {
                        if (w != null) w.close();
                        Path f = outDir.resolve(String.format(Locale.ROOT, "%s_%06d.bin", part, files.size()));
                        files.add(f);
                        w = new TokenFileWriter(f, tok.vocabSize());
                    }
                    int k = (int) Math.min(ids.length - i, SHARD_TOKENS - w.tokens());
                    w.write(ids, i, k);
                    i += k;
                    done[1] += k;
                }
                if (progress != null) progress.update(done[0] + counted.count, total, done[1]);
            }
            done[0] += counted.count;
        } finally {
            if (w != null) w.close();
        }
        if (files.isEmpty()) {                                              // an empty part: still a valid, empty file
            Path f = outDir.resolve(String.format(Locale.ROOT, "%s_%06d.bin", part, 0));
            new TokenFileWriter(f, tok.vocabSize()).close();
            files.add(f);
        }
        return files;
    }

    /** Where to end a chunk: before the last newline that follows a non-space (BPE), or the end less a lone high surrogate. */
    private static int cleanCut(StringBuilder s, boolean bpe, int limit) {
        int n = s.length();
        if (!bpe) return n > 0 && Character.isHighSurrogate(s.charAt(n - 1)) ? n - 1 : n;
        for (int i = n - 1; i > 0; i--) {
            if (s.charAt(i) == '\n' && !Character.isWhitespace(s.charAt(i - 1))) return i;
        }
        // No clean cut in 8 chunks (a text without line breaks): cut before a space that follows a non-space.
        if (n > limit) {
            for (int i = n - 1; i > 0; i--) {
                if (s.charAt(i) == ' ' && !Character.isWhitespace(s.charAt(i - 1))) return i;
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

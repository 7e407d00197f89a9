package dev.ttpipe.stages.data;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * Writes an llm.c token file streaming: a 1024-byte header (magic 20240520, version 1 for uint16
 * tokens when the vocabulary fits, 2 for uint32, the token count), then the tokens little-endian.
 * The count is filled in on {@link #close}. Not thread-safe.
 */
public final class TokenFileWriter implements AutoCloseable {
    /** Tokens per file at most (the header's count is an int32; llm.c shards at 100M). */
    public static final long MAX_TOKENS = Integer.MAX_VALUE;

    private final Path file;
    private final FileChannel ch;
    private final int width;
    private final ByteBuffer buf = ByteBuffer.allocate(1 << 20).order(ByteOrder.LITTLE_ENDIAN);
    private long tokens;

    public TokenFileWriter(Path file, int vocabSize) throws IOException {
        this.file = file;
        this.width = vocabSize <= 65536 ? 2 : 4;
        this.ch = FileChannel.open(file, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.WRITE);
        ch.write(header(0), 0);
        ch.position(TokenFiles.HEADER_BYTES);
    }

    private ByteBuffer header(long count) {
        ByteBuffer h = ByteBuffer.allocate(TokenFiles.HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        h.putInt(0, TokenFiles.MAGIC).putInt(4, width == 2 ? 1 : 2).putInt(8, (int) count);
        return h;
    }

    public void write(int[] ids, int from, int n) throws IOException {
        if (tokens + n > MAX_TOKENS) throw new IOException(file + ": more than " + MAX_TOKENS + " tokens for one file");
        for (int i = from; i < from + n; i++) {
            if (buf.remaining() < width) flush();
            if (width == 2) buf.putShort((short) ids[i]);
            else buf.putInt(ids[i]);
        }
        tokens += n;
    }

    public long tokens() {
        return tokens;
    }

    private void flush() throws IOException {
        buf.flip();
        while (buf.hasRemaining()) ch.write(buf);
        buf.clear();
    }

    @Override
    public void close() throws IOException {
        try {
            flush();
            ch.write(header(tokens), 0);
            ch.force(true);
        } finally {
            ch.close();
        }
    }
}

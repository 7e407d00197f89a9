package dev.ttpipe.stages.data;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * Writes an llm.c token file streaming: a 1024-byte header, then the tokens little-endian. uint16 tokens
 * (magic 20240520, version 1) when every id of the vocabulary fits, else uint32 (magic 20240801, version 7);
 * the header's token count is filled in on {@link #close}. An id the width cannot hold is refused. Not thread-safe.
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
        if (width == 2) h.putInt(0, TokenFiles.MAGIC).putInt(4, TokenFiles.VERSION_UINT16);
        else h.putInt(0, TokenFiles.MAGIC_UINT32).putInt(4, TokenFiles.VERSION_UINT32);
        h.putInt(8, (int) count);
        return h;
    }

    /** @throws DataException for a negative id, or one beyond 65535 in a uint16 file */
    public void write(int[] ids, int from, int n) throws IOException {
        if (tokens + n > MAX_TOKENS) throw new IOException(file + ": more than " + MAX_TOKENS + " tokens for one file");
        for (int i = from; i < from + n; i++) {
            if (ids[i] < 0 || width == 2 && ids[i] > 65535) refuse(tokens + i - from, ids[i]);
            if (buf.remaining() < width) flush();
            if (width == 2) buf.putShort((short) ids[i]);
            else buf.putInt(ids[i]);
        }
        tokens += n;
    }

    private void refuse(long token, int id) {
        throw new DataException(file + ": token " + token + ": id " + id + " does not fit a " + (width == 2 ? "uint16" : "uint32")
                + " token file, expected ids from 0 to " + (width == 2 ? "65535 (a vocabulary of more than 65,536 ids writes uint32)"
                : Integer.MAX_VALUE));
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

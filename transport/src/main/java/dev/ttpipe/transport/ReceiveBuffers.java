package dev.ttpipe.transport;

import org.agrona.BufferUtil;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Deque;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Direct buffers that frames are reassembled into, pooled by size class (powers of two from 4 KiB,
 * each class keeping up to 256 MiB of free buffers, at least 4), so that a steady stream of
 * same-sized activations allocates nothing, even when the stages let a few dozen pile up. The receive thread acquires;
 * whoever materializes or discards the payload releases, from any thread. Buffers above 1 GiB are
 * allocated to size and not pooled. Thread-safe.
 */
final class ReceiveBuffers implements AutoCloseable {
    static final ByteBuffer EMPTY = ByteBuffer.allocateDirect(0);
    private static final int MIN_CLASS = 12;          // 4 KiB
    private static final int MAX_CLASS = 30;          // 1 GiB
    /** Each size class keeps free buffers up to this many bytes (but at least {@link #KEEP_AT_LEAST}). */
    private static final long KEEP_BYTES_PER_CLASS = 256L << 20;
    private static final int KEEP_AT_LEAST = 4;

    @SuppressWarnings("unchecked")
    private final Deque<ByteBuffer>[] free = new Deque[MAX_CLASS + 1];
    private final AtomicInteger[] kept = new AtomicInteger[MAX_CLASS + 1];
    private volatile boolean closed;

    ReceiveBuffers() {
        for (int c = MIN_CLASS; c <= MAX_CLASS; c++) {
            free[c] = new ConcurrentLinkedDeque<>();
            kept[c] = new AtomicInteger();
        }
    }

    /** A little-endian buffer of at least {@code length} bytes, position 0, limit {@code length}. */
    ByteBuffer acquire(int length) {
        if (length == 0) return EMPTY;
        int c = sizeClass(length);
        ByteBuffer b = c > MAX_CLASS ? null : free[c].pollFirst();
        if (b != null) {
            kept[c].decrementAndGet();
        } else {
            b = ByteBuffer.allocateDirect(c > MAX_CLASS ? length : 1 << c);
        }
        b.order(ByteOrder.LITTLE_ENDIAN).clear().limit(length);
        return b;
    }

    /** Gives {@code b} back (the caller no longer touches it). */
    void release(ByteBuffer b) {
        if (b == null || b.capacity() == 0) return;
        int c = Integer.numberOfTrailingZeros(b.capacity());
        boolean pooled = !closed && b.capacity() == 1 << c && c >= MIN_CLASS && c <= MAX_CLASS;
        if (pooled && kept[c].incrementAndGet() <= Math.max(KEEP_AT_LEAST, KEEP_BYTES_PER_CLASS >> c)) {
            free[c].offerFirst(b); // last in, first out: the next frame lands in memory that is still in cache
            if (closed) drain(c);
            return;
        }
        if (pooled) kept[c].decrementAndGet();
        BufferUtil.free(b);
    }

    /** Frees the pooled buffers; later releases free theirs at once. */
    @Override
    public void close() {
        closed = true;
        for (int c = MIN_CLASS; c <= MAX_CLASS; c++) drain(c);
    }

    private void drain(int c) {
        for (ByteBuffer b; (b = free[c].pollFirst()) != null; ) {
            kept[c].decrementAndGet();
            BufferUtil.free(b);
        }
    }

    static int sizeClass(int length) {
        int c = 32 - Integer.numberOfLeadingZeros(Math.max(length, 1 << MIN_CLASS) - 1);
        return Math.max(MIN_CLASS, c);
    }
}

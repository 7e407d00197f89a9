package dev.ttpipe.transport;

import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A frame that arrived over Aeron, whole and checked, holding what it was assembled into ({@code T}: a
 * reassembly buffer, or a tensor already on the receiving submesh) until it is materialized or discarded,
 * exactly once; with the times its first and last chunks arrived.
 */
abstract class ReceivedFrame<T> implements TensorPayload {
    final FrameHeader header;
    final String channel;
    private final AtomicBoolean used = new AtomicBoolean();
    private final long firstChunkNs, lastChunkNs;
    private T held;

    ReceivedFrame(FrameHeader header, String channel, T held, long firstChunkNs, long lastChunkNs) {
        this.header = header;
        this.channel = channel;
        this.held = held;
        this.firstChunkNs = firstChunkNs;
        this.lastChunkNs = lastChunkNs;
    }

    @Override
    public final FrameHeader header() {
        return header;
    }

    /** Frees what the frame holds, unless it was already materialized or discarded. */
    @Override
    public final void discard() {
        if (used.get()) return;
        free(take("discard"));
    }

    /** What the frame holds, handed over once: a second call, or one after {@link #discard}, throws. */
    final T take(String op) {
        if (!used.compareAndSet(false, true)) {
            throw new IllegalStateException(op + ": " + channel + " " + header + " was already materialized or discarded");
        }
        T t = held;
        held = null;
        return t;
    }

    /** Gives back what a discarded frame held. */
    abstract void free(T held);

    @Override
    public final long firstChunkNs() {
        return firstChunkNs;
    }

    @Override
    public final long lastChunkNs() {
        return lastChunkNs;
    }

    @Override
    public String toString() {
        return channel + " " + header;
    }
}

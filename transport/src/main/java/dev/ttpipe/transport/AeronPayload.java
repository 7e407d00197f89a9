package dev.ttpipe.transport;

import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A frame that arrived over Aeron, whole and checked, in one reassembly buffer: materializing it
 * copies the pieces onto the receiving submesh's devices (one memcpy per device on the cpu backend)
 * and gives the buffer back to the pool; discarding only gives the buffer back.
 */
final class AeronPayload implements TensorPayload {
    private final FrameHeader header;
    private final MeshShape senderMesh;
    private final String channel;
    private final ReceiveBuffers buffers;
    private final AtomicBoolean used = new AtomicBoolean();
    private final long firstChunkNs, lastChunkNs;
    private ByteBuffer bytes;

    AeronPayload(FrameHeader header, MeshShape senderMesh, String channel, ByteBuffer bytes, ReceiveBuffers buffers,
                 long firstChunkNs, long lastChunkNs) {
        this.header = header;
        this.firstChunkNs = firstChunkNs;
        this.lastChunkNs = lastChunkNs;
        this.senderMesh = senderMesh;
        this.channel = channel;
        this.bytes = bytes;
        this.buffers = buffers;
    }

    @Override
    public FrameHeader header() {
        return header;
    }

    @Override
    public Tensor materialize(Submesh dst) {
        ByteBuffer b = take("materialize");
        try {
            if (!dst.shape().equals(senderMesh)) {
                throw new TransportException(channel + ": " + header + " holds one piece per device of a " + senderMesh
                        + " submesh; it cannot be materialized on " + dst.describe() + " (shape " + dst.shape() + ")");
            }
            return TensorBytes.toTensor(dst, b, header.shape(), header.layout(), header.dtype());
        } finally {
            buffers.release(b);
        }
    }

    @Override
    public void discard() {
        if (used.get()) return;
        buffers.release(take("discard"));
    }

    private ByteBuffer take(String op) {
        if (!used.compareAndSet(false, true)) {
            throw new IllegalStateException(op + ": " + channel + " " + header + " was already materialized or discarded");
        }
        ByteBuffer b = bytes;
        bytes = null;
        return b;
    }

    @Override
    public long firstChunkNs() {
        return firstChunkNs;
    }

    @Override
    public long lastChunkNs() {
        return lastChunkNs;
    }

    @Override
    public String toString() {
        return channel + " " + header;
    }
}

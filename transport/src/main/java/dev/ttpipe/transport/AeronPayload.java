package dev.ttpipe.transport;

import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

import java.nio.ByteBuffer;

/**
 * A frame that arrived over Aeron, whole and checked, in one reassembly buffer: materializing it
 * copies the pieces onto the receiving submesh's devices (one memcpy per device on the cpu backend)
 * and gives the buffer back to the pool; discarding only gives the buffer back.
 */
final class AeronPayload extends ReceivedFrame<ByteBuffer> {
    private final MeshShape senderMesh;
    private final ReceiveBuffers buffers;

    AeronPayload(FrameHeader header, MeshShape senderMesh, String channel, ByteBuffer bytes, ReceiveBuffers buffers,
                 long firstChunkNs, long lastChunkNs) {
        super(header, channel, bytes, firstChunkNs, lastChunkNs);
        this.senderMesh = senderMesh;
        this.buffers = buffers;
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
    void free(ByteBuffer bytes) {
        buffers.release(bytes);
    }
}

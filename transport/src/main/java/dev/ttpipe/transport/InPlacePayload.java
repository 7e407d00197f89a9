package dev.ttpipe.transport;

import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * A frame that arrived over Aeron, whole and checked, assembled by the receive thread straight into
 * a tensor on the receiving rank's submesh: materializing it there copies nothing (the tensor is
 * handed over), discarding it closes the tensor. Until then the payload owns the tensor.
 */
final class InPlacePayload extends ReceivedFrame<Tensor> {
    InPlacePayload(FrameHeader header, String channel, Tensor tensor, long firstChunkNs, long lastChunkNs) {
        super(header, channel, tensor, firstChunkNs, lastChunkNs);
    }

    /** The tensor itself on the submesh it was assembled on; elsewhere moved ({@code adopt}) or copied. */
    @Override
    public Tensor materialize(Submesh dst) {
        Tensor t = take("materialize");
        if (t.submesh() == dst) return t;
        return elsewhere(t, dst);
    }

    /** Not the bound submesh (a stage that was rebound): adopt it from the same mesh, else copy its pieces. */
    private Tensor elsewhere(Tensor t, Submesh dst) {
        try (t) {
            if (!dst.shape().equals(t.submesh().shape())) {
                throw new TransportException(channel + ": " + header + " holds one piece per device of a "
                        + t.submesh().shape() + " submesh; it cannot be materialized on " + dst.describe() + " (shape "
                        + dst.shape() + ")");
            }
            if (dst.mesh() == t.submesh().mesh()) return dst.ops().adopt(t);
            int n = dst.shape().size();
            ByteBuffer bytes = ByteBuffer.allocateDirect((int) (t.bytesPerDevice() * n)).order(ByteOrder.LITTLE_ENDIAN);
            for (int d = 0; d < n; d++) TensorBytes.copyPiece(t, d, bytes);
            return TensorBytes.toTensor(dst, bytes.flip(), header.shape(), header.layout(), header.dtype());
        }
    }

    @Override
    void free(Tensor tensor) {
        tensor.close();
    }
}

package dev.ttpipe.transport;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.Publication;
import org.agrona.concurrent.UnsafeBuffer;

import java.nio.ByteBuffer;
import java.util.concurrent.TimeUnit;
import java.util.zip.CRC32C;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A second Aeron client that publishes hand-made frames on a rank's stream as if it were rank
 * {@code from} (session id = rank), so that a test can corrupt them or cut their chunks anywhere.
 */
final class RawPublisher implements AutoCloseable {
    private final long job;
    private final int from;
    private final int to;
    private final Aeron client;
    private final ExclusivePublication raw;
    private long sequence;

    RawPublisher(AeronTransport transport, long job, int from, int to) {
        this.job = job;
        this.from = from;
        this.to = to;
        client = Aeron.connect(new Aeron.Context().aeronDirectoryName(transport.aeronDirectory().toString()));
        raw = client.addExclusivePublication("aeron:ipc?session-id=" + from, AeronTransport.STREAM_BASE + to);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (!raw.isConnected() && System.nanoTime() < deadline) Thread.onSpinWait();
        assertTrue(raw.isConnected(), "the raw publication did not connect");
    }

    /**
     * One frame of {@code header} (its dtype, shape and layout on {@code mesh}), the payload cut into
     * chunks at {@code cuts} (0, ..., payload.length), each chunk's checksums and header CRC written.
     */
    UnsafeBuffer[] frame(FrameHeader header, MeshShape mesh, byte[] payload, int... cuts) {
        return chunks(job, sequence++, from, to, header, mesh, payload, cuts);
    }

    /**
     * The chunks of one frame of {@code header} as rank {@code from} sends it to rank {@code to}: the
     * payload cut at {@code cuts} (0, ..., payload.length), each chunk's checksums and header CRC written.
     */
    static UnsafeBuffer[] chunks(long job, long seq, int from, int to, FrameHeader header, MeshShape mesh, byte[] payload,
                                 int... cuts) {
        int chunks = cuts.length - 1;
        DType dtype = header.dtype();
        Shape shape = header.shape();
        Layout layout = header.layout();
        CRC32C crc = new CRC32C();
        UnsafeBuffer[] out = new UnsafeBuffer[chunks];
        for (int i = 0; i < chunks; i++) {
            int len = cuts[i + 1] - cuts[i];
            UnsafeBuffer b = new UnsafeBuffer(ByteBuffer.allocateDirect(FrameCodec.LENGTH + len));
            FrameCodec c = new FrameCodec().wrapForEncode(b, 0);
            c.encodeFrame(job, seq, from, to, header, dtype, shape, layout, mesh, payload.length, chunks);
            crc.update(payload, cuts[i], len);
            c.encodeChunk(i, cuts[i], len, (int) crc.getValue());
            b.putBytes(FrameCodec.LENGTH, payload, cuts[i], len);
            seal(b);
            out[i] = b;
        }
        return out;
    }

    /** Rewrites the header CRC after a deliberate change, so that the change itself is what the receiver sees. */
    static void seal(UnsafeBuffer b) {
        CRC32C crc = new CRC32C();
        ByteBuffer bytes = b.byteBuffer().duplicate();
        bytes.limit(FrameCodec.HEADER_CRC_OFFSET).position(0);
        crc.update(bytes);
        new FrameCodec().wrapForEncode(b, 0).encodeHeaderCrc((int) crc.getValue());
    }

    /** Offers each message whole, retrying while back-pressured. */
    void publish(UnsafeBuffer... messages) {
        for (UnsafeBuffer m : messages) {
            long r;
            while ((r = raw.offer(m, 0, m.capacity())) < 0) {
                assertTrue(r == Publication.BACK_PRESSURED || r == Publication.ADMIN_ACTION, "offer: " + r);
                Thread.onSpinWait();
            }
        }
    }

    @Override
    public void close() {
        raw.close();
        client.close();
    }
}

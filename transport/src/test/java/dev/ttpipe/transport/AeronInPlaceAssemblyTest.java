package dev.ttpipe.transport;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.cpu.CpuMeshDevice;
import org.agrona.concurrent.UnsafeBuffer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A rank bound with its submesh receives each frame straight into a tensor on that submesh: the
 * tensor is allocated when the first chunk arrives, every fragment is written into its pieces (one
 * that straddles two devices' pieces split between them), and materializing hands that tensor over.
 * A frame dropped on the way, or one that finds no room, leaves nothing allocated. Frames are
 * published raw (as rank 5, session 5) so that their chunks can be cut anywhere.
 */
class AeronInPlaceAssemblyTest {
    static final long JOB = 11;
    static final String CHANNEL = "aeron:ipc 5->1";
    static final MeshShape SUBMESH = new MeshShape(1, 2);
    static final int K = 40;                                   // fp32 [2, 40] sharded on dim 0: 2 pieces of 160 bytes
    static final Shape SHAPE = Shape.of(2, K);
    static final Layout SHARDED = Layout.shard(0, 1);
    static final int PAYLOAD = 2 * K * 4;
    /** Chunk boundaries: chunk 1 runs from inside device 0's piece (byte 100) to inside device 1's (byte 220). */
    static final int[] CUTS = {0, 100, 220, PAYLOAD};

    private MeshDevice mesh;
    private Submesh dst;
    private AeronTransport transport;
    private Received received;
    private RawPublisher raw;

    @BeforeEach
    void start() {
        mesh = CpuMeshDevice.open(new MeshShape(1, 4), MeshOptions.defaults().withThreads(1).withMemoryPerDevice(1 << 20));
        List<Submesh> subs = mesh.createSubmeshes(SUBMESH);
        dst = subs.get(1);
        transport = AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1, 5).withTermLength(64 << 10));
        received = new Received();
        transport.bind(1, dst, received);
        raw = new RawPublisher(transport, JOB, 5, 1);
    }

    @AfterEach
    void stop() {
        raw.close();
        transport.close();
        mesh.close();
    }

    /** fp32 {@code shape} with {@code layout} on a 1x2 submesh, its payload cut into chunks at {@code cuts}. */
    private UnsafeBuffer[] frame(int microbatch, Shape shape, Layout layout, byte[] payload, int... cuts) {
        FrameHeader h = new FrameHeader(JOB, 0, 5, 1, microbatch, TensorKind.ACTIVATION, DType.FP32, shape, layout, 0, 0);
        return raw.frame(h, SUBMESH, payload, cuts);
    }

    /** The sharded [2, 40] frame: device 0's piece holds mb + 0..39, device 1's mb + 1000..1039. */
    private UnsafeBuffer[] shardedFrame(int microbatch) {
        return frame(microbatch, SHAPE, SHARDED, payload(microbatch), CUTS);
    }

    private static byte[] payload(int microbatch) {
        byte[] bytes = new byte[PAYLOAD];
        ByteBuffer p = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        for (int d = 0; d < 2; d++) for (int i = 0; i < K; i++) p.putFloat(microbatch + 1000 * d + i);
        return bytes;
    }

    private static float[] piece(int microbatch, int device) {
        float[] x = new float[K];
        for (int i = 0; i < K; i++) x[i] = microbatch + 1000 * device + i;
        return x;
    }

    private void publish(UnsafeBuffer... messages) {
        raw.publish(messages);
    }

    /** A good sharded frame arrives in place on {@code dst} with both pieces intact. */
    private void arrivesInPlace(int microbatch) {
        long before = dst.maxInUse();
        publish(shardedFrame(microbatch));
        TensorPayload p = received.next();
        assertEquals(microbatch, p.header().microbatch());
        assertInstanceOf(InPlacePayload.class, p);
        assertEquals(before + PAYLOAD / 2, dst.maxInUse(), "the tensor is on the submesh before it is materialized");
        try (Tensor t = p.materialize(dst)) {
            assertSame(dst, t.submesh());
            assertEquals(SHAPE, t.shape());
            assertEquals(SHARDED, t.layout());
            assertArrayEquals(piece(microbatch, 0), t.toHostLocal(0));
            assertArrayEquals(piece(microbatch, 1), t.toHostLocal(1));
        }
        assertEquals(before, dst.maxInUse());
        assertTrue(received.errors.isEmpty(), () -> "unexpected errors " + received.errors);
    }

    @Test
    void aChunkStraddlingTwoPiecesLandsInBoth() {
        arrivesInPlace(1);
        arrivesInPlace(2); // the allocator's cached buffers are reused
    }

    @Test
    void replicatedPiecesAndOneChunkPerByteRangeArriveToo() {
        byte[] bytes = new byte[2 * 64];
        ByteBuffer p = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < 32; i++) p.putFloat(i * 0.5f);
        publish(frame(3, Shape.of(16), Layout.REPLICATED, bytes, 0, 4, 60, 64, 68, 128));
        try (Tensor t = received.next().materialize(dst)) {
            float[] second = new float[16];
            for (int i = 0; i < 16; i++) second[i] = (16 + i) * 0.5f;
            assertArrayEquals(second, t.toHostLocal(1));
        }
    }

    @Test
    void aCorruptedFramesTensorIsFreed() {
        long before = dst.maxInUse();
        UnsafeBuffer[] f = shardedFrame(1);
        f[2].putByte(FrameCodec.LENGTH + 3, (byte) (f[2].getByte(FrameCodec.LENGTH + 3) ^ 0x01)); // the last chunk
        publish(f);
        Received.Error e = received.nextError();
        assertEquals(CHANNEL, e.channel());
        assertTrue(e.problem().contains("checksum mismatch in chunk 2 of 3"), e.problem());
        assertEquals(before, dst.maxInUse(), "the dropped frame's tensor was closed");
        assertTrue(received.payloads.isEmpty(), "a bad frame was delivered");
        arrivesInPlace(2);
    }

    @Test
    void aFrameThatFindsNoRoomIsDroppedAndReported() {
        int k = 200_000; // [2, 200000] fp32 sharded: 800 KB per device, with 1 MiB per device
        byte[] big = new byte[2 * k * 4];
        try (Tensor hog = dst.ops().zeros(Shape.of(2, 100_000), SHARDED, DType.FP32)) { // 400 KB per device
            long before = dst.maxInUse();
            publish(frame(1, Shape.of(2, k), SHARDED, big, 0, 8000, big.length)[0]); // the rest is never looked at
            Received.Error e = received.nextError();
            assertEquals(CHANNEL, e.channel());
            assertTrue(e.problem().contains("does not fit on rank 1's submesh") && e.problem().contains("out of memory"),
                    e.problem());
            assertEquals(before, dst.maxInUse(), "nothing left charged");
            assertTrue(received.payloads.isEmpty());
            assertEquals(new DroppedFrames(0, 0, 0, 1), transport.droppedFrames(1), "counted as no room, not as corrupt");
        }
        arrivesInPlace(2); // the rest of the dropped frame was skipped, the next one arrives
    }

    @Test
    void withoutASubmeshItIsReassembledAsBefore() {
        transport.bind(1, received);
        publish(shardedFrame(4));
        TensorPayload p = received.next();
        assertInstanceOf(AeronPayload.class, p);
        try (Tensor t = p.materialize(dst)) {
            assertArrayEquals(piece(4, 1), t.toHostLocal(1));
        }
        transport.bind(1, dst, received);
        arrivesInPlace(5);
    }

    @Test
    void materializedElsewhereItIsMovedThere() {
        publish(shardedFrame(6));
        TensorPayload p = received.next();
        Submesh other = mesh.createSubmeshes(SUBMESH).get(0);
        try (Tensor t = p.materialize(other)) {
            assertSame(other, t.submesh());
            assertArrayEquals(piece(6, 0), t.toHostLocal(0));
            assertArrayEquals(piece(6, 1), t.toHostLocal(1));
        }
        assertEquals(0, dst.maxInUse());
        assertEquals(0, other.maxInUse());
    }
}

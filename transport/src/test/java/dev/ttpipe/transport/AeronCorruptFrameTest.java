package dev.ttpipe.transport;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.cpu.CpuMeshDevice;
import org.agrona.concurrent.UnsafeBuffer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Frames that fail their checksum or do not parse are dropped and reported with the channel's name;
 * none becomes a tensor, and the next good frame still arrives. The bad frames are published raw,
 * by a second Aeron client, on rank 1's stream as session 5 (what rank 5's channel would use).
 */
class AeronCorruptFrameTest {
    static final long JOB = 7;
    static final String CHANNEL = "aeron:ipc 5->1";
    static final MeshShape MESH = new MeshShape(1, 2);
    static final Shape SHAPE = Shape.of(16);                 // replicated on 2 devices: 2 x 64 bytes

    private AeronTransport transport;
    private Received received;
    private RawPublisher raw;

    @BeforeEach
    void start() {
        transport = AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1, 5).withTermLength(64 << 10));
        received = new Received();
        transport.bind(1, received);
        raw = new RawPublisher(transport, JOB, 5, 1);
    }

    @AfterEach
    void stop() {
        raw.close();
        transport.close();
    }

    /** A 2-chunk frame of fp32 [16] replicated on a 1x2 submesh: chunk i carries payload bytes [64 i, 64 i + 64). */
    private UnsafeBuffer[] frame(int microbatch) {
        byte[] payload = new byte[128];
        ByteBuffer p = ByteBuffer.wrap(payload).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < 32; i++) p.putFloat(microbatch + i);
        FrameHeader h = new FrameHeader(JOB, 3, 5, 1, microbatch, TensorKind.GRADIENT, DType.FP32, SHAPE,
                Layout.REPLICATED, 0, 0);
        return raw.frame(h, MESH, payload, 0, 64, 128);
    }

    private void publish(UnsafeBuffer... messages) {
        raw.publish(messages);
    }

    /** The next good frame arrives, with its values, and nothing arrived before it. */
    private void goodFrameStillArrives(int microbatch) {
        publish(frame(microbatch));
        TensorPayload p = received.next();
        assertEquals(microbatch, p.header().microbatch(), "the dropped frame must not be delivered");
        try (MeshDevice mesh = CpuMeshDevice.open(MESH, MeshOptions.defaults().withThreads(1));
             Tensor t = p.materialize(mesh.asSubmesh())) {
            float[] expected = new float[16];
            for (int i = 0; i < 16; i++) expected[i] = microbatch + 16 + i; // device 1's copy is the second half
            assertArrayEquals(expected, t.toHostLocal(1));
        }
        assertTrue(received.payloads.isEmpty());
        assertTrue(received.errors.isEmpty(), () -> "unexpected errors " + received.errors);
    }

    private void assertDropped(String... fragments) {
        Received.Error e = received.nextError();
        assertEquals(CHANNEL, e.channel());
        for (String f : fragments) assertTrue(e.problem().contains(f), e.problem());
        assertTrue(received.payloads.isEmpty(), "a bad frame was delivered");
    }

    /** Another job's frame is dropped without an error report: after a recovery those are expected. */
    private void assertForeign(String fragment) {
        Received.Error e = received.nextForeign();
        assertEquals(CHANNEL, e.channel());
        assertTrue(e.problem().contains(fragment), e.problem());
        assertTrue(received.payloads.isEmpty(), "a foreign frame was delivered");
        assertTrue(received.errors.isEmpty(), "a foreign frame was reported as an error: " + received.errors);
    }

    /**
     * Every frame dropped is counted once by reason, however many chunks it had: another job's,
     * one that names another receiver or sender than its stream, one on a session that is no rank
     * of the job, and corrupt ones. Good frames are not counted.
     */
    @Test
    void everyDroppedFrameIsCountedOnceByReason() throws Exception {
        assertEquals(DroppedFrames.NONE, transport.droppedFrames(1));
        UnsafeBuffer[] foreign = frame(1);                       // two chunks of job 8: one frame dropped
        for (UnsafeBuffer c : foreign) {
            c.putLong(FrameCodec.JOB_ID_OFFSET, 8, ByteOrder.LITTLE_ENDIAN);
            RawPublisher.seal(c);
        }
        publish(foreign);
        received.nextForeign();
        UnsafeBuffer[] toRank0 = frame(2);                       // for rank 0, on rank 1's stream
        for (UnsafeBuffer c : toRank0) {
            c.putInt(FrameCodec.TO_RANK_OFFSET, 0, ByteOrder.LITTLE_ENDIAN);
            RawPublisher.seal(c);
        }
        publish(toRank0);
        assertDropped("frame for rank 0 arrived at rank 1");
        UnsafeBuffer[] posing = frame(3);                        // says rank 0 sent it, on rank 5's session
        for (UnsafeBuffer c : posing) {
            c.putInt(FrameCodec.FROM_RANK_OFFSET, 0, ByteOrder.LITTLE_ENDIAN);
            RawPublisher.seal(c);
        }
        publish(posing);
        assertDropped("frame says it comes from rank 0, its stream session 5 is rank 5's");
        UnsafeBuffer[] bad = frame(4);
        bad[1].putByte(FrameCodec.LENGTH + 3, (byte) (bad[1].getByte(FrameCodec.LENGTH + 3) ^ 0x01));
        publish(bad);
        assertDropped("checksum mismatch");
        publish(new UnsafeBuffer(new byte[300]));
        assertDropped("bad magic");
        try (RawPublisher stranger = new RawPublisher(transport, JOB, 9, 1)) { // session 9: no rank of this job
            FrameHeader h = new FrameHeader(JOB, 3, 9, 1, 0, TensorKind.GRADIENT, DType.FP32, SHAPE, Layout.REPLICATED, 0, 0);
            stranger.publish(stranger.frame(h, MESH, new byte[128], 0, 64, 128));
            Received.Error e = received.nextError();
            assertEquals("aeron:ipc session 9->1", e.channel());
            assertTrue(e.problem().contains("frame from stream session 9, which is no rank of this job"), e.problem());
        }
        goodFrameStillArrives(5);
        assertEquals(new DroppedFrames(1, 3, 2, 0), transport.droppedFrames(1));
        assertEquals("1 foreign_job, 3 wrong_peer, 2 corrupt", transport.droppedFrames(1).toString());
        assertEquals(DroppedFrames.NONE, transport.droppedFrames(0), "rank 0 is not bound here");
    }

    @Test
    void corruptedPayloadFailsTheChecksumAndIsDropped() {
        UnsafeBuffer[] f = frame(1);
        f[1].putByte(FrameCodec.LENGTH + 17, (byte) (f[1].getByte(FrameCodec.LENGTH + 17) ^ 0x10));
        publish(f);
        assertDropped("checksum mismatch in chunk 1 of 2", "mb 1");
        goodFrameStillArrives(2);
    }

    @Test
    void corruptedHeaderFailsTheHeaderChecksum() {
        UnsafeBuffer[] f = frame(1);
        f[0].putInt(FrameCodec.MICROBATCH_OFFSET, 99);
        publish(f);
        assertDropped("header checksum mismatch");
        goodFrameStillArrives(2);
    }

    @Test
    void bytesThatAreNotAFrameAreDropped() {
        UnsafeBuffer garbage = new UnsafeBuffer(new byte[300]);
        for (int i = 0; i < 300; i++) garbage.putByte(i, (byte) (i * 31));
        publish(garbage);
        assertDropped("bad magic");
        publish(new UnsafeBuffer(new byte[10]));
        assertDropped("10 bytes is shorter than the 128-byte frame header");
        goodFrameStillArrives(2);
    }

    @Test
    void payloadLengthThatDoesNotMatchShapeAndLayoutIsDropped() {
        UnsafeBuffer[] f = frame(1);
        for (UnsafeBuffer c : f) {
            c.putLong(FrameCodec.PAYLOAD_LENGTH_OFFSET, 124, ByteOrder.LITTLE_ENDIAN);
            RawPublisher.seal(c);
        }
        publish(f);
        assertDropped("payload of 124 bytes, but FP32[16] with layout [R, R] on a [1, 2] submesh is 128");
        goodFrameStillArrives(2);
    }

    @Test
    void impossibleDtypeOrShardIsDropped() {
        UnsafeBuffer[] f = frame(1);
        f[0].putByte(FrameCodec.DTYPE_OFFSET, (byte) 9);
        RawPublisher.seal(f[0]);
        publish(f);
        assertDropped("unknown dtype 9");
        UnsafeBuffer[] g = frame(2);
        g[0].putByte(FrameCodec.PLACEMENT1_OFFSET, (byte) 1);      // S(...) on mesh axis 1
        g[0].putByte(FrameCodec.PLACEMENT1_OFFSET + 1, (byte) 4);  // of dim 4, but the shape has one dim
        RawPublisher.seal(g[0]);
        publish(g);
        assertDropped("unknown layout codes");
        goodFrameStillArrives(3);
    }

    @Test
    void chunksOutOfOrderOrOutOfRangeAreDropped() {
        UnsafeBuffer[] f = frame(1);
        publish(f[1]);                                   // chunk 1 without chunk 0
        assertDropped("chunk 1 of frame 0 arrived without the frame's first chunk");
        UnsafeBuffer[] g = frame(2);
        g[1].putInt(FrameCodec.CHUNK_INDEX_OFFSET, 5, ByteOrder.LITTLE_ENDIAN);
        RawPublisher.seal(g[1]);
        publish(g);
        assertDropped("chunk index 5 of 2 chunks");
        UnsafeBuffer[] h = frame(3);
        h[1].putLong(FrameCodec.CHUNK_OFFSET_OFFSET, 32, ByteOrder.LITTLE_ENDIAN);
        RawPublisher.seal(h[1]);
        publish(h);
        assertDropped("chunk 1 of 2 says bytes [32, 96) of 128, expected it to start at 64");
        goodFrameStillArrives(4);
    }

    @Test
    void frameOfAnotherJobIsDropped() {
        UnsafeBuffer[] f = frame(1);
        for (UnsafeBuffer c : f) {
            c.putLong(FrameCodec.JOB_ID_OFFSET, 8, ByteOrder.LITTLE_ENDIAN);
            RawPublisher.seal(c);
        }
        publish(f[0]);
        assertForeign("frame of job 8 on the transport of job 7");
        publish(f[1]);
        goodFrameStillArrives(2); // chunk 1 of that frame is skipped without a second report
    }

    @Test
    void aFrameCutShortByAnotherJobsFrameIsAnErrorNotAForeignFrame() {
        // found by FrameAssemblerFuzzTest: the frame in progress was reported only as another job's, so nothing failed
        UnsafeBuffer[] f = frame(1);
        UnsafeBuffer[] g = frame(2);
        for (UnsafeBuffer c : g) {
            c.putLong(FrameCodec.JOB_ID_OFFSET, 8, ByteOrder.LITTLE_ENDIAN);
            RawPublisher.seal(c);
        }
        publish(f[0], g[0]);
        assertDropped("frame 0 (1RECV_B1", "a frame of job 8 on the transport of job 7 arrived after 1 of its 2 chunks");
        assertForeign("frame of job 8 on the transport of job 7");
        publish(g[1]);
        goodFrameStillArrives(3);
    }

    @Test
    void afterAdoptingAJobIdFramesOfTheOldOneAreDroppedAndTheNewOnesArrive() {
        transport.adoptJob(0x5eed);                             // what every rank does when rank 0's Coordinator says so
        publish(frame(1));                                      // still stamped with job 7
        assertForeign("frame of job 7 on the transport of job 5eed");
        UnsafeBuffer[] f = frame(2);
        for (UnsafeBuffer c : f) {
            c.putLong(FrameCodec.JOB_ID_OFFSET, 0x5eed, ByteOrder.LITTLE_ENDIAN);
            RawPublisher.seal(c);
        }
        publish(f);
        assertEquals(2, received.next().header().microbatch());
        assertEquals(0x5eed, transport.jobId());
    }
}

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
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A {@link FrameFault} given in the Aeron transport's config corrupts exactly the frames it accepts,
 * after their checksum: the receiver drops each one and reports it on the channel, and every other
 * frame arrives intact. {@link FrameFault#once} spends itself on its first frame.
 */
class FrameFaultTest {
    static final long JOB = 5, NEW_JOB = 0x5eed;

    private MeshDevice mesh;
    private List<Submesh> subs;
    private AeronTransport transport;

    @BeforeEach
    void start() {
        mesh = CpuMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults().withThreads(1));
        subs = mesh.createSubmeshes(new MeshShape(1, 1));
    }

    @AfterEach
    void stop() {
        if (transport != null) transport.close();
        mesh.close();
    }

    private static FrameHeader header(int mb) {
        return header(JOB, mb);
    }

    private static FrameHeader header(long job, int mb) {
        return new FrameHeader(job, 0, 0, 1, mb, TensorKind.ACTIVATION, DType.FP32, Shape.of(1), Layout.REPLICATED, 0, 0);
    }

    /** 600 values of {@code v} on the sender's submesh. */
    private Tensor full(int v) {
        return subs.get(0).ops().full(Shape.of(600), Layout.REPLICATED, DType.FP32, v);
    }

    private void sendFour(FrameFault fault, Received r) {
        transport = AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1).withTermLength(64 << 10).withFault(fault));
        transport.bind(1, r);
        TensorChannel c = transport.channel(0, 1);
        for (int mb = 0; mb < 4; mb++) c.send(header(mb), full(mb));
    }

    private void assertArrives(Received r, int mb) {
        TensorPayload p = r.next();
        assertEquals(mb, p.header().microbatch());
        try (Tensor t = p.materialize(subs.get(1))) {
            float[] x = t.toHostLocal(0);
            assertEquals(mb, x[0]);
            assertEquals(mb, x[x.length - 1]);
        }
    }

    @Test
    void onceCorruptsTheFirstFrameItAcceptsAndNoOther() {
        Received r = new Received();
        sendFour(FrameFault.once(h -> h.microbatch() >= 1), r);
        assertArrives(r, 0);
        Received.Error e = r.nextError();
        assertEquals("aeron:ipc 0->1", e.channel());
        assertTrue(e.problem().contains("checksum mismatch"), e.problem());
        assertArrives(r, 2);
        assertArrives(r, 3);
        assertTrue(r.errors.isEmpty(), () -> "errors: " + r.errors);
    }

    @Test
    void withoutAFaultEveryFrameArrives() {
        Received r = new Received();
        sendFour(FrameFault.NONE, r);
        for (int mb = 0; mb < 4; mb++) assertArrives(r, mb);
        assertFalse(r.errors.stream().findAny().isPresent(), () -> "errors: " + r.errors);
    }

    /**
     * A frame keeps the job it was queued under. A recovery gives the job a fresh id while frames of the
     * abandoned step may still wait in a channel's queue; sent after the change, each must go out stamped
     * with its old job (the receiver drops it as another job's), never with the new one, or it would pass
     * for a frame of the step that redoes it and be used in its place (found as a rare difference in the
     * weights at the end of FaultRecoveryTest's run). The fault hook
     * runs on the channel's thread as each frame goes out, so it can hold a frame there.
     */
    @Test
    void aFrameQueuedBeforeTheJobTookAFreshIdGoesOutAsTheOldJobs() throws Exception {
        CountDownLatch sending = new CountDownLatch(1), release = new CountDownLatch(1);
        // Frame 0 is held on the channel's thread, so frame 1 waits in the queue while the job changes.
        FrameFault hold = h -> {
            if (h.microbatch() == 0) {
                sending.countDown();
                try {
                    release.await(20, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return false;
        };
        transport = AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1).withTermLength(64 << 10).withFault(hold));
        Received r = new Received();
        transport.bind(1, r);
        TensorChannel c = transport.channel(0, 1);
        c.send(header(JOB, 0), full(0));
        assertTrue(sending.await(20, TimeUnit.SECONDS), "frame 0 never reached the channel's thread");
        c.send(header(JOB, 1), full(1));                    // queued under the old job
        transport.adoptJob(NEW_JOB);                            // a recovery: the job takes a fresh id
        release.countDown();
        assertTrue(r.nextForeign().problem().contains("frame of job 5 on the transport of job 5eed"));
        c.send(header(NEW_JOB, 2), full(2));
        TensorPayload p = r.next();
        assertEquals(2, p.header().microbatch(), "a frame queued under the old job was delivered as the new job's");
        assertEquals(NEW_JOB, p.header().jobId());
        p.discard();
        assertTrue(r.payloads.isEmpty(), () -> "more frames arrived: " + r.payloads);
    }
}

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
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A frame keeps the job it was queued under. A recovery gives the job a fresh id while frames of the
 * abandoned step may still wait in a channel's queue; sent after the change, each must go out stamped
 * with its old job (the receiver drops it as another job's), never with the new one, or it would pass
 * for a frame of the step that redoes it and be used in its place. (Found as a rare difference after a
 * recovery: FaultRecoveryTest's run ended with other weights in about 3 runs in 100.)
 */
class AeronQueuedFrameJobTest {
    static final long OLD = 5, NEW = 0x5eed;

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

    private static FrameHeader header(long job, int mb) {
        return new FrameHeader(job, 0, 0, 1, mb, TensorKind.GRADIENT, DType.FP32, Shape.of(1), Layout.REPLICATED, 0, 0);
    }

    private Tensor tensor(int mb) {
        return subs.get(0).ops().full(Shape.of(600), Layout.REPLICATED, DType.FP32, mb);
    }

    @Test
    void aFrameQueuedBeforeTheJobTookAFreshIdGoesOutAsTheOldJobs() throws Exception {
        CountDownLatch sending = new CountDownLatch(1), release = new CountDownLatch(1);
        // The fault hook runs on the channel's thread as each frame goes out: it holds frame 0 there, so
        // frame 1 waits in the queue while the job changes.
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
        transport = AeronTransport.start(AeronTransport.Config.ipc(OLD, 0, 1).withTermLength(64 << 10).withFault(hold));
        Received r = new Received();
        transport.bind(1, r);
        TensorChannel c = transport.channel(0, 1);
        c.send(header(OLD, 0), tensor(0));
        assertTrue(sending.await(20, TimeUnit.SECONDS), "frame 0 never reached the channel's thread");
        c.send(header(OLD, 1), tensor(1));                  // queued under the old job
        transport.adoptJob(NEW);                            // a recovery: the job takes a fresh id
        release.countDown();
        assertTrue(r.nextForeign().problem().contains("frame of job 5 on the transport of job 5eed"));
        c.send(header(NEW, 2), tensor(2));
        TensorPayload p = r.next();
        assertEquals(2, p.header().microbatch(), "a frame queued under the old job was delivered as the new job's");
        assertEquals(NEW, p.header().jobId());
        p.discard();
        assertTrue(r.payloads.isEmpty(), () -> "more frames arrived: " + r.payloads);
    }
}

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

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A {@link FrameFault} given in the Aeron transport's config corrupts exactly the frames it accepts,
 * after their checksum: the receiver drops each one and reports it on the channel, and every other
 * frame arrives intact. {@link FrameFault#once} spends itself on its first frame.
 */
class FrameFaultTest {
    static final long JOB = 5;

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
        return new FrameHeader(JOB, 0, 0, 1, mb, TensorKind.ACTIVATION, DType.FP32, Shape.of(1), Layout.REPLICATED, 0, 0);
    }

    private void sendFour(FrameFault fault, Received r) {
        transport = AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1).withTermLength(64 << 10).withFault(fault));
        transport.bind(1, r);
        TensorChannel c = transport.channel(0, 1);
        for (int mb = 0; mb < 4; mb++) c.send(header(mb), subs.get(0).ops().full(Shape.of(600), Layout.REPLICATED, DType.FP32, mb));
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
}

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
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Starting, failing to connect, and closing: what is left behind (nothing) and what the errors say. */
class AeronLifecycleTest {
    static final long JOB = 5;

    private static FrameHeader header(Tensor t) {
        return new FrameHeader(JOB, 0, 0, 1, 0, TensorKind.ACTIVATION, t.dtype(), t.shape(), t.layout(), 0, 0);
    }

    @Test
    void closeLeavesNoDirectoryAndNoThreads() throws Exception {
        try (MeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults().withThreads(1))) {
            List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 1));
            Set<Thread> before = Thread.getAllStackTraces().keySet();
            AeronTransport t = AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1).withTermLength(64 << 10));
            Path dir = t.aeronDirectory();
            assertTrue(Files.isDirectory(dir), "the driver's directory exists while it runs");
            assertTrue(dir.getFileName().toString().startsWith("ttpipe-aeron-" + ProcessHandle.current().pid() + "-"), dir.toString());
            Received r = new Received();
            t.bind(1, r);
            Tensor x = subs.get(0).ops().full(Shape.of(1000), Layout.REPLICATED, DType.FP32, 2f);
            t.channel(0, 1).send(header(x), x).orTimeout(10, TimeUnit.SECONDS).join();
            r.next().discard();
            List<Thread> started = Thread.getAllStackTraces().keySet().stream().filter(th -> !before.contains(th)).toList();
            assertTrue(started.stream().anyMatch(th -> th.getName().startsWith("ttpipe-aeron-send")), started.toString());

            t.close();
            assertFalse(Files.exists(dir), "the driver's directory is gone after close");
            for (Thread th : started) th.join(5_000);
            List<Thread> alive = started.stream().filter(Thread::isAlive).toList();
            assertEquals(List.of(), alive, "threads the transport started are still running after close");
            t.close(); // idempotent
        }
    }

    @Test
    void sendToARankNobodyReceivesForFailsNamingTheChannel() {
        try (MeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(1));
             AeronTransport t = AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1).withTermLength(64 << 10)
                     .withConnectTimeout(Duration.ofMillis(300)))) {
            Tensor x = mesh.asSubmesh().ops().full(Shape.of(8), Layout.REPLICATED, DType.FP32, 1f);
            CompletionException e = assertThrows(CompletionException.class,
                    () -> t.channel(0, 1).send(header(x), x).orTimeout(10, TimeUnit.SECONDS).join());
            assertInstanceOf(TransportException.class, e.getCause());
            assertTrue(e.getCause().getMessage().startsWith("aeron:ipc 0->1: no receiver connected within 0.3 s"),
                    e.getCause().getMessage());
            assertTrue(x.isClosed(), "the channel owns the tensor and closes it, sent or not");
        }
    }

    @Test
    void aFrameOfAnotherJobIsRefusedAtSend() {
        try (MeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(1));
             AeronTransport t = AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1).withTermLength(64 << 10))) {
            Tensor x = mesh.asSubmesh().ops().full(Shape.of(8), Layout.REPLICATED, DType.FP32, 1f);
            FrameHeader other = new FrameHeader(JOB + 1, 0, 0, 1, 0, TensorKind.ACTIVATION, x.dtype(), x.shape(),
                    x.layout(), 0, 0);
            CompletionException e = assertThrows(CompletionException.class, () -> t.channel(0, 1).send(other, x).join());
            assertTrue(e.getCause().getMessage().contains("belongs to job 6, this transport carries job 5"),
                    e.getCause().getMessage());
        }
    }

    @Test
    void materializingOnASubmeshOfAnotherShapeFailsAndFreesTheBuffer() {
        try (MeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 3), MeshOptions.defaults().withThreads(1));
             AeronTransport t = AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1).withTermLength(64 << 10))) {
            List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 1));
            Received r = new Received();
            t.bind(1, r);
            Tensor x = subs.get(0).ops().full(Shape.of(8), Layout.REPLICATED, DType.FP32, 1f);
            t.channel(0, 1).send(header(x), x).join();
            TensorPayload p = r.next();
            TransportException e = assertThrows(TransportException.class, () -> p.materialize(mesh.asSubmesh()));
            assertTrue(e.getMessage().contains("one piece per device of a [1, 1] submesh"), e.getMessage());
            assertThrows(IllegalStateException.class, () -> p.materialize(subs.get(1)));
        }
    }

    @Test
    void configErrorsNameTheSettingAndWhatWasExpected() {
        IllegalArgumentException ipcRemote = assertThrows(IllegalArgumentException.class, () -> AeronTransport.Config.of(JOB,
                Map.of(0, AeronTransport.Endpoint.ipc(), 1, AeronTransport.Endpoint.ipc()), Set.of(0)));
        assertTrue(ipcRemote.getMessage().contains("rank 1 is bound to ipc but is not a rank of this process [0]"),
                ipcRemote.getMessage());
        IllegalArgumentException term = assertThrows(IllegalArgumentException.class,
                () -> AeronTransport.Config.ipc(JOB, 0).withTermLength(100_000));
        assertTrue(term.getMessage().contains("term length 100000: expected a power of two"), term.getMessage());
        IllegalArgumentException mtu = assertThrows(IllegalArgumentException.class,
                () -> AeronTransport.Config.ipc(JOB, 0).withTermLength(64 << 10).withUdpMtu(65504));
        assertTrue(mtu.getMessage().contains("udp mtu 65504 exceeds half the term length 65536, expected a smaller mtu or "
                + "a term length of at least 131072"), mtu.getMessage());
        assertEquals("10.0.0.2:40100", AeronTransport.Endpoint.parse("10.0.0.2:40100").toString());
        assertEquals("[::1]:9", AeronTransport.Endpoint.parse("[::1]:9").toString());
        assertTrue(AeronTransport.Endpoint.parse("IPC").isIpc());
        IllegalArgumentException port = assertThrows(IllegalArgumentException.class,
                () -> AeronTransport.Endpoint.parse("host:http"));
        assertTrue(port.getMessage().contains("port 'http' is not a number"), port.getMessage());
    }
}

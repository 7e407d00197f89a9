package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MemoryStats;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.MeshSocket;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Placement;
import dev.ttpipe.device.ReduceOp;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * What the contract suite cannot see of the ttnn backend: the library's accounting agrees with
 * the Java one, submeshes run concurrently, a socket carries tensors between threads in order,
 * closing wakes a waiting receiver, and the backend opens by name.
 */
class TtnnBackendTest {
    @BeforeEach
    void needsTheReferenceLibrary() {
        assumeTrue(BridgeLibrary.locate().isPresent(), "the reference bridge library was not built (no C compiler?); "
                + "tried " + BridgeLibrary.candidates(null));
    }

    private static void assertAccountingAgrees(TtnnMeshDevice mesh, String when) {
        for (int id = 0; id < mesh.shape().size(); id++) {
            MemoryStats java = mesh.devices().get(id).memory();
            MemoryStats lib = mesh.nativeMemory(id);
            assertEquals(java, lib, when + ": device " + id + " (Java " + java + ", library " + lib + ")");
        }
    }

    @Test
    void opensByNameAndSaysWhatItRunsOn() {
        try (MeshDevice mesh = Backends.open("ttnn", new MeshShape(1, 2), MeshOptions.defaults())) {
            assertEquals("ttnn", mesh.backend());
            assertTrue(mesh instanceof TtnnMeshDevice t && t.implementation().startsWith("reference")
                    && t.library().toString().endsWith(".so"), mesh.toString());
        }
    }

    @Test
    void theMeshsEnvironmentIsExportedToTheNativeSideBeforeTheLibraryOpens() {
        String name = "TTPIPE_TEST_GLOBAL_ENV_" + ProcessHandle.current().pid();
        assertEquals(null, NativeEnvironment.get(name));
        try (MeshDevice mesh = Backends.open("ttnn", new MeshShape(1, 1),
                MeshOptions.defaults().withEnvironment(Map.of(name, "from global_env")))) {
            assertEquals("from global_env", NativeEnvironment.get(name), "C's getenv in this process, as TTNN reads it");
        }
    }

    @Test
    void theLibrarysAccountingAgreesWithTheJavaAccounting() throws InterruptedException {
        try (TtnnMeshDevice mesh = TtnnMeshDevice.open(new MeshShape(2, 2), MeshOptions.defaults())) {
            List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 2));
            Ops ops = subs.get(0).ops();
            Tensor x = ops.full(Shape.of(8, 6), Layout.shard(0, 1), DType.FP32, 1f);
            Tensor w = ops.full(Shape.of(6, 4), Layout.REPLICATED, DType.BF16, 0.5f);
            Tensor y = ops.matmul(x, w, false, false);
            Tensor v = ops.reshape(y, Shape.of(32));
            assertAccountingAgrees(mesh, "after ops");
            y.close();
            assertAccountingAgrees(mesh, "a view keeps the memory");
            try (MeshSocket s = mesh.openSocket(subs.get(0), subs.get(1))) {
                s.send(x);
                s.send(w);
                assertAccountingAgrees(mesh, "in flight");
                try (Tensor rx = s.recv(1000)) {
                    assertEquals(Shape.of(8, 6), rx.shape());
                    assertAccountingAgrees(mesh, "one received");
                }
            }
            assertAccountingAgrees(mesh, "socket closed with one still queued");
            assertEquals(0, mesh.devices().get(2).memory().inUse());
            for (Tensor t : new Tensor[]{x, w, v}) t.close();
            assertAccountingAgrees(mesh, "all closed");
            assertEquals(0, mesh.nativeMemory(0).inUse());
            mesh.devices().forEach(dev -> dev.resetPeak());
            assertAccountingAgrees(mesh, "peaks reset");
        }
    }

    @Test
    void twoSubmeshesRunOnTwoThreadsAndASocketKeepsOrder() throws Exception {
        try (TtnnMeshDevice mesh = TtnnMeshDevice.open(new MeshShape(1, 4), MeshOptions.defaults())) {
            List<Submesh> stages = mesh.createSubmeshes(new MeshShape(1, 2));
            int count = 200;
            AtomicReference<Throwable> failure = new AtomicReference<>();
            try (MeshSocket socket = mesh.openSocket(stages.get(0), stages.get(1))) {
                Thread sender = new Thread(() -> {
                    Ops ops = stages.get(0).ops();
                    try {
                        for (int i = 0; i < count; i++) {
                            try (Tensor t = ops.full(Shape.of(4, 8), Layout.REPLICATED, DType.FP32, i);
                                 Tensor r = ops.allReduce(t, 1, ReduceOp.MEAN)) {
                                socket.send(r);
                            }
                        }
                    } catch (Throwable t) {
                        failure.compareAndSet(null, t);
                    }
                });
                Thread receiver = new Thread(() -> {
                    Ops ops = stages.get(1).ops();
                    try {
                        for (int i = 0; i < count; i++) {
                            try (Tensor t = socket.recv(10_000)) {
                                if (t == null) throw new AssertionError("tensor " + i + " did not arrive");
                                try (Tensor g = ops.gelu(t)) {
                                    assertEquals(i, t.toHost()[31], 0f, "tensor " + i + " in order");
                                    assertEquals(stages.get(1), g.submesh());
                                }
                            }
                        }
                    } catch (Throwable t) {
                        failure.compareAndSet(null, t);
                    }
                });
                sender.start();
                receiver.start();
                sender.join(60_000);
                receiver.join(60_000);
                assertFalse(sender.isAlive() || receiver.isAlive(), "both threads finished");
            }
            if (failure.get() != null) throw new AssertionError(failure.get());
            assertEquals(0, mesh.nativeMemory(2).inUse());
        }
    }

    @Test
    void closingTheMeshWakesAReceiverWaitingOnASocket() throws Exception {
        TtnnMeshDevice mesh = TtnnMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults());
        List<Submesh> stages = mesh.createSubmeshes(new MeshShape(1, 1));
        MeshSocket socket = mesh.openSocket(stages.get(0), stages.get(1));
        AtomicReference<Throwable> outcome = new AtomicReference<>();
        Thread receiver = new Thread(() -> {
            try {
                outcome.set(new AssertionError("returned " + socket.recv(600_000)));
            } catch (Throwable t) {
                outcome.set(t);
            }
        });
        receiver.setDaemon(true);
        receiver.start();
        awaitWaitingInReceive(receiver);
        mesh.close();
        receiver.join(60_000); // far less than the receive timeout: only the close can end the wait in time
        assertFalse(receiver.isAlive(), "the receiver still waits after the mesh closed");
        assertTrue(outcome.get() instanceof DeviceException, "the receiver stops with a DeviceException: " + outcome.get());
        socket.close();
    }

    /** Waits until {@code t} is inside the socket's receive loop (past recv's open check), at most a minute. */
    private static void awaitWaitingInReceive(Thread t) throws InterruptedException {
        for (int i = 0; i < 60_000; i++) {
            for (StackTraceElement frame : t.getStackTrace()) {
                if (frame.getClassName().equals(TtnnMeshSocket.class.getName()) && frame.getMethodName().equals("receive")) {
                    return;
                }
            }
            if (!t.isAlive()) throw new AssertionError("the receiver ended before it waited");
            Thread.sleep(1); // poll the condition; no timing rides on it
        }
        throw new AssertionError("the receiver never reached the socket's receive loop");
    }

    @Test
    void aSocketDropsWhatWasNotReceivedWhenClosed() throws InterruptedException {
        try (TtnnMeshDevice mesh = TtnnMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults())) {
            List<Submesh> stages = mesh.createSubmeshes(new MeshShape(1, 1));
            MeshSocket s = mesh.openSocket(stages.get(0), stages.get(1));
            try (Tensor t = stages.get(0).ops().fromHostLocal(new float[][]{{1, 2}}, Shape.of(2),
                    new Layout(Placement.REPLICATE, Placement.PARTIAL), DType.FP32)) {
                s.send(t);
                s.send(t);
                assertEquals(8 + 8, mesh.devices().get(1).memory().inUse());
                try (Tensor r = s.recv(0)) {
                    assertArrayEquals(new float[]{1, 2}, r.toHost());
                    assertEquals(t.layout(), r.layout());
                }
            }
            s.close();
            assertEquals(0, mesh.devices().get(1).memory().inUse());
            assertEquals(0, mesh.nativeMemory(1).inUse());
        }
    }

    @Test
    void emptyAndScalarTensorsCrossTheBridge() {
        try (TtnnMeshDevice mesh = TtnnMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults())) {
            Ops ops = mesh.asSubmesh().ops();
            try (Tensor empty = ops.zeros(Shape.of(0, 4), Layout.shard(1, 1), DType.FP32);
                 Tensor scalar = ops.full(Shape.of(), Layout.REPLICATED, DType.FP32, 3f);
                 Tensor ids = ops.fromHostInts(new int[0], Shape.of(0), Layout.REPLICATED);
                 Tensor twice = ops.scale(scalar, 2f);
                 Tensor one = ops.reshape(twice, Shape.of(1))) {
                assertEquals(0, empty.toHost().length);
                assertEquals(0, empty.toHostLocal(1).length);
                assertEquals(0, ids.toHostInts().length);
                assertArrayEquals(new float[]{6f}, one.toHost());
                assertEquals(6.0 * 6.0, ops.sumSquares(twice), 0.0);
            }
        }
    }
}

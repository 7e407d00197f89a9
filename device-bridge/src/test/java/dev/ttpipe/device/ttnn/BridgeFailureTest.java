package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.DeviceOutOfMemoryException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Everything that can go wrong between Java and the library becomes a Java exception naming the
 * C function, and the JVM carries on: an ABI version mismatch, a missing symbol, a library that is
 * not there, shapes that do not fit passed straight to the binding (around the Java checks), the
 * null handle, a double free, a stale handle, a handle of another kind, out of memory.
 */
class BridgeFailureTest {
    private static Path library;
    private TtnnMeshDevice mesh;

    /** A binding with one function no bridge library has. */
    static final class ExtraSymbolBinding {
        static native int ttpipe_noop();

        static native int ttpipe_not_in_the_abi(long handle);
    }

    @BeforeEach
    void openMeshOnTheReferenceLibrary() {
        assumeTrue(BridgeLibrary.locate().isPresent(), "the reference bridge library was not built (no C compiler?); "
                + "tried " + BridgeLibrary.candidates(null));
        library = BridgeLibrary.locate().orElseThrow();
        mesh = TtnnMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults().withMemoryPerDevice(1000));
    }

    @AfterEach
    void closeMesh() {
        if (mesh != null) mesh.close();
    }

    private static BridgeException failing(int status, String function) {
        assertNotEquals(0, status, function + " should fail");
        DeviceException e = assertThrows(DeviceException.class, () -> Bridge.check(status, function));
        assertTrue(e instanceof BridgeException, "a BridgeException: " + e);
        BridgeException b = (BridgeException) e;
        assertEquals(function, b.function());
        assertTrue(b.getMessage().contains(function), b.getMessage());
        return b;
    }

    private long alloc(long submesh, int... dims) {
        long[] out = new long[1];
        Bridge.check(NativeBridge.ttpipe_tensor_alloc(submesh, 0, dims.length, dims, out), "ttpipe_tensor_alloc");
        return out[0];
    }

    private long submesh() {
        return ((TtnnSubmesh) mesh.asSubmesh()).handle();
    }

    // ---- loading -------------------------------------------------------------------------------------

    @Test
    void anAbiVersionMismatchIsRefusedBeforeAnythingIsBound() {
        BridgeLoadException e = assertThrows(BridgeLoadException.class,
                () -> BridgeLibrary.bind(NativeBridge.class, library, 999, List.of(library.toString())));
        assertEquals("ttpipe_abi_version", e.function());
        assertTrue(e.getMessage().contains("ttpipe_abi_version() of " + library + " is 1")
                && e.getMessage().contains("needs ABI version 999"), e.getMessage());
        assertEquals(0, NativeBridge.ttpipe_noop(), "the binding in use is untouched");
    }

    @Test
    void aMissingSymbolIsNamedAndNothingIsBound() {
        BridgeLoadException e = assertThrows(BridgeLoadException.class,
                () -> BridgeLibrary.bind(ExtraSymbolBinding.class, library, BridgeLibrary.ABI_VERSION, List.of()));
        assertEquals("ttpipe_not_in_the_abi", e.function());
        assertTrue(e.getMessage().contains("has no function ttpipe_not_in_the_abi"), e.getMessage());
        assertThrows(UnsatisfiedLinkError.class, ExtraSymbolBinding::ttpipe_noop, "not registered");
    }

    @Test
    void aMissingLibraryNamesEveryPathTriedAndHowToBuildIt() {
        BridgeLoadException e = assertThrows(BridgeLoadException.class, () -> BridgeLibrary.find("/no/such/dir/lib.so"));
        assertEquals(List.of("/no/such/dir/lib.so"), e.tried());
        assertTrue(e.getMessage().contains("/no/such/dir/lib.so") && e.getMessage().contains("mvn -pl device-bridge package")
                && e.getMessage().contains("cmake -S device-bridge/native/ttnn"), e.getMessage());
        DeviceException open = assertThrows(DeviceException.class, () -> TtnnMeshDevice.open(new MeshShape(1, 1),
                MeshOptions.defaults().withBridgeLibrary("/no/such/dir/lib.so")));
        assertTrue(open.getMessage().contains("/no/such/dir/lib.so"), open.getMessage());
    }

    @Test
    void theDefaultSearchTriesTheBuildNextToTheClassesThenTheBuildTree() {
        List<Path> c = BridgeLibrary.candidates(null);
        if (System.getProperty(BridgeLibrary.PROPERTY) == null && System.getenv(BridgeLibrary.ENV) == null) {
            assertTrue(c.get(0).toString().endsWith("target/native/" + BridgeLibrary.REFERENCE_FILE), c.toString());
            assertTrue(c.stream().anyMatch(p -> p.toString().endsWith("device-bridge/target/native/"
                    + BridgeLibrary.REFERENCE_FILE)), c.toString());
        }
        String before = System.getProperty(BridgeLibrary.PROPERTY);
        try {
            System.setProperty(BridgeLibrary.PROPERTY, "/opt/ttpipe/libttpipe_bridge_ttnn.so");
            assertEquals(List.of(Path.of("/opt/ttpipe/libttpipe_bridge_ttnn.so")), BridgeLibrary.candidates(null));
        } finally {
            if (before == null) System.clearProperty(BridgeLibrary.PROPERTY);
            else System.setProperty(BridgeLibrary.PROPERTY, before);
        }
        assertEquals(List.of(Path.of("/x/y.so")), BridgeLibrary.candidates("/x/y.so"));
    }

    // ---- failing calls --------------------------------------------------------------------------------

    @Test
    void shapesThatDoNotFitPassedAroundTheJavaChecksAreRejectedByTheLibrary() {
        long sub = submesh();
        long a = alloc(sub, 2, 3), b = alloc(sub, 4, 5), out = alloc(sub, 2, 5);
        BridgeException e = failing(NativeBridge.ttpipe_matmul(out, a, b, 0, 0, 1f, 0f), "ttpipe_matmul");
        assertEquals("INVALID_ARGUMENT", e.statusName());
        assertTrue(e.getMessage().contains("a [2, 3] and b [4, 5] do not multiply"), e.getMessage());
        failing(NativeBridge.ttpipe_add(out, a, b), "ttpipe_add");
        failing(NativeBridge.ttpipe_softmax(out, a, 1f, 0, 7, -1), "ttpipe_softmax");
        failing(NativeBridge.ttpipe_all_gather(out, a, 0, 2), "ttpipe_all_gather");
        float[] tooShort = new float[5];
        BridgeException w = failing(NativeBridge.ttpipe_tensor_write(a, 2, new int[]{2, 3}, -1, -1, tooShort, 5),
                "ttpipe_tensor_write");
        assertTrue(w.getMessage().contains("5 elements given, the shape needs 6"), w.getMessage());
        failing(NativeBridge.ttpipe_tensor_read_local(a, 2, new float[6], 6), "ttpipe_tensor_read_local");
        failing(NativeBridge.ttpipe_tensor_view(a, 1, new int[]{7}, new long[1]), "ttpipe_tensor_view");
        failing(NativeBridge.ttpipe_tensor_alloc(sub, 9, 1, new int[]{2}, new long[1]), "ttpipe_tensor_alloc");
        failing(NativeBridge.ttpipe_tensor_alloc(sub, 0, 9, new int[9], new long[1]), "ttpipe_tensor_alloc");
        failing(NativeBridge.ttpipe_tensor_alloc(sub, 0, 1, new int[]{-4}, new long[1]), "ttpipe_tensor_alloc");
        failing(NativeBridge.ttpipe_device_memory(mesh.handle(), 2, new long[3]), "ttpipe_device_memory");
        for (long h : new long[]{a, b, out}) Bridge.check(NativeBridge.ttpipe_tensor_free(h), "ttpipe_tensor_free");
    }

    @Test
    void theNullHandleAStaleHandleAndAHandleOfAnotherKindAreRejected() {
        long sub = submesh();
        BridgeException nul = failing(NativeBridge.ttpipe_gelu(0, 0), "ttpipe_gelu");
        assertEquals("INVALID_HANDLE", nul.statusName());
        assertTrue(nul.getMessage().contains("null handle"), nul.getMessage());
        long t = alloc(sub, 4);
        Bridge.check(NativeBridge.ttpipe_tensor_free(t), "ttpipe_tensor_free");
        BridgeException stale = failing(NativeBridge.ttpipe_scale(t, t, 2f), "ttpipe_scale");
        assertTrue(stale.getMessage().contains("stale"), stale.getMessage());
        long reused = alloc(sub, 4); // likely the same slot, a new generation
        failing(NativeBridge.ttpipe_tensor_fill(t, 1f), "ttpipe_tensor_fill");
        BridgeException kind = failing(NativeBridge.ttpipe_tensor_fill(mesh.handle(), 1f), "ttpipe_tensor_fill");
        assertTrue(kind.getMessage().contains("is a mesh handle, expected a tensor handle"), kind.getMessage());
        BridgeException forged = failing(NativeBridge.ttpipe_tensor_free((3L << 56) | (1L << 24) | 0xABCDEL),
                "ttpipe_tensor_free");
        assertTrue(forged.getMessage().contains("never issued"), forged.getMessage());
        failing(NativeBridge.ttpipe_socket_send(sub, reused), "ttpipe_socket_send");
        Bridge.check(NativeBridge.ttpipe_tensor_free(reused), "ttpipe_tensor_free");
    }

    @Test
    void aDoubleFreeIsAnErrorNotACrash() {
        long t = alloc(submesh(), 8);
        Bridge.check(NativeBridge.ttpipe_tensor_free(t), "ttpipe_tensor_free");
        BridgeException e = failing(NativeBridge.ttpipe_tensor_free(t), "ttpipe_tensor_free");
        assertEquals("INVALID_HANDLE", e.statusName());
        assertTrue(e.getMessage().contains("already freed"), e.getMessage());
        assertEquals(0, mesh.nativeMemory(0).inUse(), "freed once");
    }

    @Test
    void theLibrarysOwnOutOfMemoryBecomesADeviceOutOfMemoryException() {
        int[] dims = {300}; // 1200 bytes on devices of 1000
        int status = NativeBridge.ttpipe_tensor_alloc(submesh(), 0, 1, dims, new long[1]);
        DeviceOutOfMemoryException e = assertThrows(DeviceOutOfMemoryException.class,
                () -> Bridge.check(status, "ttpipe_tensor_alloc"));
        assertEquals(1200, e.requested());
        assertEquals(0, e.inUse());
        assertEquals(1000, e.capacity());
        assertTrue(e.getMessage().contains("ttpipe_tensor_alloc") && e.getMessage().contains("ttnn device 0"),
                e.getMessage());
        assertEquals(0, mesh.nativeMemory(1).inUse(), "all or nothing");
    }

    @Test
    void dataErrorsFoundByTheLibraryNameTheOpAndLeaveNothingAllocated() {
        Ops ops = mesh.asSubmesh().ops();
        try (Tensor ids = ops.fromHostInts(new int[]{0, 7}, Shape.of(2), Layout.REPLICATED);
             Tensor table = ops.zeros(Shape.of(4, 2), Layout.REPLICATED, DType.FP32)) {
            long before = mesh.nativeMemory(0).inUse();
            BridgeException e = assertThrows(BridgeException.class, () -> ops.embedding(ids, table));
            assertEquals("ttpipe_embedding", e.function());
            assertEquals("OUT_OF_RANGE", e.statusName());
            assertTrue(e.getMessage().startsWith("embedding: ttpipe_embedding: id 7"), e.getMessage());
            assertEquals(before, mesh.nativeMemory(0).inUse());
            assertEquals(before, mesh.devices().get(0).memory().inUse(), "the Java accounting agrees");
        }
    }

    @Test
    void handlesOfAClosedMeshAreStaleAndClosingItsTensorsLaterIsHarmless() {
        TtnnMeshDevice other = TtnnMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults());
        Ops ops = other.asSubmesh().ops();
        Tensor t = ops.full(Shape.of(3), Layout.REPLICATED, DType.FP32, 2f);
        long h = ((TtnnTensor) t).handle();
        assertArrayEquals(new float[]{2, 2, 2}, t.toHost());
        other.close();
        BridgeException e = failing(NativeBridge.ttpipe_tensor_fill(h, 1f), "ttpipe_tensor_fill");
        assertTrue(e.getMessage().contains("stale"), e.getMessage());
        failing(NativeBridge.ttpipe_mesh_close(other.handle()), "ttpipe_mesh_close");
        t.close();
        t.close();
        other.close();
    }
}

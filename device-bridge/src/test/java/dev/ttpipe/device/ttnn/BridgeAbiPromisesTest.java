package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.MeshSocket;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Promises of the bridge ABI (ttpipe_bridge.h) that the TTNN shim once broke, checked through JNA on the
 * library that is loaded (the reference C emulation in the build): INT32 is signed, so the -100 ignore
 * index reads back as -100; socket_recv waits up to its timeout; a call that fails changes none of its
 * outputs, however many it has; last_oom gives the device and the sizes of the allocation refused.
 */
class BridgeAbiPromisesTest {
    private static final int FP32 = 0, INT32 = 2, REPLICATE = -1;
    private static final float SENTINEL = 7f;

    private TtnnMeshDevice mesh;

    @BeforeEach
    void openMeshOnTheReferenceLibrary() {
        assumeTrue(BridgeLibrary.locate().isPresent(), "the reference bridge library was not built (no C compiler?); "
                + "tried " + BridgeLibrary.candidates(null));
        mesh = TtnnMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults().withMemoryPerDevice(4096));
    }

    @AfterEach
    void closeMesh() {
        if (mesh != null) mesh.close();
    }

    private long whole() {
        return ((TtnnSubmesh) mesh.asSubmesh()).handle();
    }

    private static long alloc(long submesh, int dtype, int... dims) {
        long[] out = new long[1];
        Bridge.check(NativeBridge.ttpipe_tensor_alloc(submesh, dtype, dims.length, dims, out), "ttpipe_tensor_alloc");
        return out[0];
    }

    /** An FP32 tensor with every element SENTINEL on every device. */
    private static long sentinel(long submesh, int... dims) {
        long t = alloc(submesh, FP32, dims);
        Bridge.check(NativeBridge.ttpipe_tensor_fill(t, SENTINEL), "ttpipe_tensor_fill");
        return t;
    }

    private static float[] local(long tensor, int device, int count) {
        float[] out = new float[count];
        Bridge.check(NativeBridge.ttpipe_tensor_read_local(tensor, device, out, count), "ttpipe_tensor_read_local");
        return out;
    }

    private static void assertUntouched(String what, long tensor, int count) {
        float[] expected = new float[count];
        Arrays.fill(expected, SENTINEL);
        for (int d = 0; d < 2; d++) assertArrayEquals(expected, local(tensor, d, count), what + " on device " + d);
    }

    private static void assertFails(int status, String function) {
        assertNotEquals(Bridge.OK, status, function + " should fail");
        assertTrue(NativeBridge.ttpipe_last_error().startsWith(function), NativeBridge.ttpipe_last_error());
    }

    // ---- INT32 is signed ----------------------------------------------------------------------------

    @Test
    void aNegativeInt32RoundTripsAsTheIgnoreIndexNotAsFourBillion() {
        long t = alloc(whole(), INT32, 4);
        int[] written = {-100, 0, 7, Integer.MIN_VALUE};
        Bridge.check(NativeBridge.ttpipe_tensor_write_ints(t, 1, new int[]{4}, REPLICATE, REPLICATE, written, 4),
                "ttpipe_tensor_write_ints");
        int[] ints = new int[4];
        Bridge.check(NativeBridge.ttpipe_tensor_read_ints(t, 1, new int[]{4}, REPLICATE, REPLICATE, ints, 4),
                "ttpipe_tensor_read_ints");
        assertArrayEquals(written, ints);
        float[] floats = new float[4];
        Bridge.check(NativeBridge.ttpipe_tensor_read(t, 1, new int[]{4}, REPLICATE, REPLICATE, floats, 4),
                "ttpipe_tensor_read");
        assertEquals(-100f, floats[0], "ints convert by value");
        assertEquals(-100f, local(t, 1, 4)[0], "device 1's replica");

        long sharded = alloc(whole(), INT32, 2); // [4] sharded over the two devices
        Bridge.check(NativeBridge.ttpipe_tensor_write_ints(sharded, 1, new int[]{4}, REPLICATE, 0, written, 4),
                "ttpipe_tensor_write_ints");
        assertEquals(7f, local(sharded, 1, 2)[0], "device 1 holds elements 2 and 3");
        Bridge.check(NativeBridge.ttpipe_tensor_read_ints(sharded, 1, new int[]{4}, REPLICATE, 0, ints, 4),
                "ttpipe_tensor_read_ints");
        assertArrayEquals(written, ints);

        Ops ops = mesh.asSubmesh().ops();
        try (Tensor targets = ops.fromHostInts(new int[]{3, -100, 1}, Shape.of(3), Layout.REPLICATED)) {
            assertArrayEquals(new int[]{3, -100, 1}, targets.toHostInts(), "through the backend");
        }
    }

    // ---- socket_recv waits up to timeout_ms -----------------------------------------------------------

    @Test
    void aRecvWhoseTimeoutExpiresReturnsNothingOnlyAfterWaiting() throws Exception {
        List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 1));
        long from = ((TtnnSubmesh) subs.get(0)).handle(), to = ((TtnnSubmesh) subs.get(1)).handle();
        long[] socket = new long[1];
        Bridge.check(NativeBridge.ttpipe_socket_open(from, to, socket), "ttpipe_socket_open");
        long[] received = {-1};

        long t0 = System.nanoTime();
        Bridge.check(NativeBridge.ttpipe_socket_recv(socket[0], 0, received), "ttpipe_socket_recv");
        long noWait = System.nanoTime() - t0;
        assertEquals(0, received[0], "none sent: the null handle, and TTPIPE_OK");

        received[0] = -1;
        t0 = System.nanoTime();
        Bridge.check(NativeBridge.ttpipe_socket_recv(socket[0], 300, received), "ttpipe_socket_recv");
        long waited = System.nanoTime() - t0;
        assertEquals(0, received[0], "none sent in time");
        assertTrue(waited >= TimeUnit.MILLISECONDS.toNanos(250), "returned after " + waited / 1_000_000 + " ms of 300");
        assertTrue(waited > noWait, "a timeout of 300 ms waits longer than one of 0");
        assertTrue(waited < TimeUnit.SECONDS.toNanos(30), "returned after " + waited / 1_000_000 + " ms");

        // a tensor sent while the receiver waits ends the wait, long before its timeout
        long tensor = alloc(from, FP32, 4);
        CompletableFuture<Long> sentAt = CompletableFuture.supplyAsync(() -> {
            sleep(100);
            long at = System.nanoTime();
            Bridge.check(NativeBridge.ttpipe_socket_send(socket[0], tensor), "ttpipe_socket_send");
            return at;
        });
        Bridge.check(NativeBridge.ttpipe_socket_recv(socket[0], 60_000, received), "ttpipe_socket_recv");
        long returnedAt = System.nanoTime();
        assertNotEquals(0, received[0], "the tensor sent");
        assertTrue(returnedAt >= sentAt.get(), "recv returned after the send, not before");
        Bridge.check(NativeBridge.ttpipe_tensor_free(received[0]), "ttpipe_tensor_free");

        // closing the socket ends a wait with TTPIPE_E_CLOSED
        CompletableFuture<Integer> waiting = CompletableFuture.supplyAsync(
                () -> NativeBridge.ttpipe_socket_recv(socket[0], 60_000, new long[1]));
        sleep(100);
        Bridge.check(NativeBridge.ttpipe_socket_close(socket[0]), "ttpipe_socket_close");
        assertEquals(4, waiting.get(30, TimeUnit.SECONDS), "TTPIPE_E_CLOSED");
        Bridge.check(NativeBridge.ttpipe_tensor_free(tensor), "ttpipe_tensor_free");
    }

    @Test
    void theBackendsRecvReturnsNullAfterItsTimeout() throws Exception {
        List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 1));
        try (MeshSocket socket = mesh.openSocket(subs.get(0), subs.get(1))) {
            long t0 = System.nanoTime();
            assertNull(socket.recv(200));
            assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(150), "waited");
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    // ---- a failing call changes nothing, however many outputs it has -----------------------------------

    @Test
    void aMultiOutputEntryThatFailsOnItsLastOutputLeavesTheOthersUnchanged() {
        long sub = whole();
        long x = alloc(sub, FP32, 3, 4), gamma = alloc(sub, FP32, 4);
        Bridge.check(NativeBridge.ttpipe_tensor_fill(x, 1.5f), "ttpipe_tensor_fill");
        Bridge.check(NativeBridge.ttpipe_tensor_fill(gamma, 1f), "ttpipe_tensor_fill");

        // layernorm: y and mean fit, rstd does not
        long y = sentinel(sub, 3, 4), mean = sentinel(sub, 3), rstdWrong = sentinel(sub, 4);
        assertFails(NativeBridge.ttpipe_layernorm(y, mean, rstdWrong, x, gamma, 0, 1e-5f), "ttpipe_layernorm");
        assertUntouched("y", y, 12);
        assertUntouched("mean", mean, 3);
        assertUntouched("rstd", rstdWrong, 4);

        // rmsnorm: y fits, rstd does not
        assertFails(NativeBridge.ttpipe_rmsnorm(y, rstdWrong, x, gamma, 1e-5f), "ttpipe_rmsnorm");
        assertUntouched("y", y, 12);

        // layernorm backward: d_gamma fits, d_beta does not
        long rstd = sentinel(sub, 3), dGamma = sentinel(sub, 4), dBetaWrong = sentinel(sub, 3);
        assertFails(NativeBridge.ttpipe_layernorm_backward_weight(x, x, mean, rstd, dGamma, dBetaWrong, 1),
                "ttpipe_layernorm_backward_weight");
        assertUntouched("d_gamma", dGamma, 4);

        // adamw: param and exp_avg fit, exp_avg_sq does not
        long param = sentinel(sub, 4), grad = sentinel(sub, 4), expAvg = sentinel(sub, 4), expAvgSqWrong = sentinel(sub, 3);
        assertFails(NativeBridge.ttpipe_adamw(param, grad, expAvg, expAvgSqWrong, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1f),
                "ttpipe_adamw");
        assertUntouched("param", param, 4);
        assertUntouched("exp_avg", expAvg, 4);

        // sgd with momentum: param fits, the momentum buffer does not
        long bufferWrong = sentinel(sub, 3);
        assertFails(NativeBridge.ttpipe_sgd(param, grad, bufferWrong, 0.1f, 0.9f, 0f, 0f, 0, 2, 1f), "ttpipe_sgd");
        assertUntouched("param", param, 4);

        // cross-entropy: a target out of range on device 1 only; neither sum nor count is written
        long logits = alloc(sub, FP32, 1, 4), targets = alloc(sub, INT32, 1); // [2, 4] and [2], rows sharded
        Bridge.check(NativeBridge.ttpipe_tensor_fill(logits, 0f), "ttpipe_tensor_fill");
        Bridge.check(NativeBridge.ttpipe_tensor_write_ints(targets, 1, new int[]{2}, REPLICATE, 0, new int[]{1, 9}, 2),
                "ttpipe_tensor_write_ints");
        double[] sum = {SENTINEL};
        long[] count = {7};
        int status = NativeBridge.ttpipe_cross_entropy(logits, targets, -100, REPLICATE, 0, sum, count);
        assertEquals(5, status, "TTPIPE_E_OUT_OF_RANGE: " + NativeBridge.ttpipe_last_error());
        assertEquals(SENTINEL, sum[0]);
        assertEquals(7, count[0]);

        // submeshes: out too short for the four 1x1 submeshes of a 2x2 mesh; out and the mesh are as before
        try (TtnnMeshDevice four = TtnnMeshDevice.open(new MeshShape(2, 2), MeshOptions.defaults())) {
            long handles = NativeBridge.ttpipe_live_handles();
            long[] out = {11, 12, 13};
            int[] made = {-1};
            assertFails(NativeBridge.ttpipe_mesh_create_submeshes(four.handle(), 1, 1, out, 3, made),
                    "ttpipe_mesh_create_submeshes");
            assertArrayEquals(new long[]{11, 12, 13}, out);
            assertEquals(-1, made[0]);
            assertEquals(handles, NativeBridge.ttpipe_live_handles(), "no submesh handle left behind");
        }
    }

    // ---- last_oom gives real figures -------------------------------------------------------------------

    @Test
    void lastOomAfterARefusedAllocationGivesTheDeviceAndTheSizes() throws InterruptedException {
        List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 1));
        long second = ((TtnnSubmesh) subs.get(1)).handle(); // device 1 of the mesh
        alloc(second, FP32, 250);                           // 1000 bytes in use of 4096
        long[] out = new long[1];
        int status = NativeBridge.ttpipe_tensor_alloc(second, FP32, 1, new int[]{1000}, out); // 4000 more
        assertEquals(Bridge.E_OUT_OF_MEMORY, status, NativeBridge.ttpipe_last_error());
        long[] oom = new long[4];
        Bridge.check(NativeBridge.ttpipe_last_oom(oom), "ttpipe_last_oom");
        assertArrayEquals(new long[]{1, 4000, 1000, 4096}, oom, "device, bytes requested, bytes in use, capacity");
        assertEquals(0, out[0], "no handle");
        assertEquals(1000, mesh.nativeMemory(1).inUse(), "nothing was charged");

        long[] fresh = new long[4];
        Thread other = new Thread(() -> Bridge.check(NativeBridge.ttpipe_last_oom(fresh), "ttpipe_last_oom"));
        other.start();
        other.join();
        assertArrayEquals(new long[]{-1, -1, -1, -1}, fresh, "per thread, and -1 before any");
    }
}

package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Creating and freeing tensor handles leaks nothing: after many cycles the library holds as many
 * handles and host bytes as before (its own counters, exact), the devices' accounting is back to
 * zero, and the process's resident memory (VmRSS) has not grown beyond noise.
 */
class HandleCyclesTest {
    private static final long RSS_SLACK_BYTES = 16L << 20;

    @BeforeEach
    void needsTheReferenceLibrary() {
        assumeTrue(BridgeLibrary.locate().isPresent(), "the reference bridge library was not built (no C compiler?); "
                + "tried " + BridgeLibrary.candidates(null));
    }

    /** VmRSS of this process in bytes (Linux), or -1. */
    static long rss() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmRSS:")) return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
            }
        } catch (IOException | NumberFormatException e) {
            return -1;
        }
        return -1;
    }

    private static void nativeCycles(int cycles) {
        try (TtnnMeshDevice mesh = TtnnMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults())) {
            long sub = ((TtnnSubmesh) mesh.asSubmesh()).handle();
            int[] dims = {16, 64}; // 4 KiB per device
            long[] out = new long[1];
            Runnable cycle = () -> {
                Bridge.check(NativeBridge.ttpipe_tensor_alloc(sub, 0, 2, dims, out), "ttpipe_tensor_alloc");
                Bridge.check(NativeBridge.ttpipe_tensor_fill(out[0], 1f), "ttpipe_tensor_fill");
                Bridge.check(NativeBridge.ttpipe_tensor_free(out[0]), "ttpipe_tensor_free");
            };
            for (int i = 0; i < 20_000; i++) cycle.run(); // warm up the JIT and malloc's arenas
            long handles = NativeBridge.ttpipe_live_handles();
            long bytes = NativeBridge.ttpipe_host_bytes();
            long rss = rss();
            for (int i = 0; i < cycles; i++) cycle.run();
            assertEquals(handles, NativeBridge.ttpipe_live_handles(), "live handles");
            assertEquals(bytes, NativeBridge.ttpipe_host_bytes(), "host bytes held for device memory");
            assertEquals(0, mesh.nativeMemory(0).inUse());
            long grown = rss() - rss;
            if (rss > 0) assertTrue(grown < RSS_SLACK_BYTES, "VmRSS grew by " + grown + " bytes over " + cycles + " cycles");
        }
    }

    private static void tensorCycles(int cycles) {
        try (TtnnMeshDevice mesh = TtnnMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults())) {
            Ops ops = mesh.asSubmesh().ops();
            Shape shape = Shape.of(16, 64);
            for (int i = 0; i < 20_000; i++) ops.zeros(shape, Layout.shard(0, 1), DType.FP32).close();
            long handles = NativeBridge.ttpipe_live_handles();
            long bytes = NativeBridge.ttpipe_host_bytes();
            for (int i = 0; i < cycles; i++) {
                Tensor t = ops.zeros(shape, Layout.shard(0, 1), DType.FP32);
                Tensor v = ops.reshape(t, Shape.of(1024));
                t.close();
                v.close();
            }
            assertEquals(handles, NativeBridge.ttpipe_live_handles(), "live handles");
            assertEquals(bytes, NativeBridge.ttpipe_host_bytes(), "host bytes held for device memory");
            assertEquals(0, mesh.devices().get(1).memory().inUse());
            assertEquals(0, mesh.nativeMemory(1).inUse());
        }
    }

    @Test
    void aHundredThousandHandleCyclesLeakNothing() {
        nativeCycles(100_000);
    }

    @Test
    void aHundredThousandTensorAndViewCyclesThroughTheJavaApiLeakNothing() {
        tensorCycles(100_000);
    }

    @Test
    @Tag("long")
    void aMillionHandleCyclesLeakNothing() {
        nativeCycles(1_000_000);
        tensorCycles(1_000_000);
    }
}

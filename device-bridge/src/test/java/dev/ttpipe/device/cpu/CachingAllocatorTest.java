package dev.ttpipe.device.cpu;

import dev.ttpipe.device.AdamWParams;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.NormOutput;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Placement;
import dev.ttpipe.device.ReduceOp;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class CachingAllocatorTest {
    @Test
    void aRepeatedStepMallocsNothingAfterWarmup() {
        try (CpuMeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults().withThreads(2))) {
            Ops ops = mesh.asSubmesh().ops();
            Layout data = Layout.shard(0, 1);
            Tensor w = ops.full(Shape.of(24, 16), Layout.REPLICATED, DType.FP32, 0.01f);
            Tensor wBf16 = ops.typecast(w, DType.BF16);
            Tensor gamma = ops.full(Shape.of(24), Layout.REPLICATED, DType.FP32, 1f);
            Tensor grad = ops.zeros(Shape.of(24, 16), new Layout(Placement.REPLICATE, Placement.PARTIAL), DType.FP32);
            Tensor m = ops.zeros(Shape.of(24, 16), Layout.REPLICATED, DType.FP32);
            Tensor v = ops.zeros(Shape.of(24, 16), Layout.REPLICATED, DType.FP32);
            Tensor x = ops.full(Shape.of(8, 16), data, DType.FP32, 0.5f);
            Tensor targets = ops.fromHostInts(new int[]{1, 2, 3, 4, 5, 6, 7, 8}, Shape.of(8), data);
            Runnable step = () -> {
                try (Tensor h = ops.linear(x, w, null); NormOutput n = ops.layerNorm(h, gamma, null, 1e-5f);
                     Tensor g = ops.gelu(n.y()); Tensor hb = ops.linear(x, wBf16, null);
                     Tensor dl = ops.crossEntropyBackward(g, targets, -100, 0.125f);
                     Tensor dg = ops.geluBackward(dl, n.y());
                     Tensor dh = ops.layerNormBackwardInput(dg, h, gamma, n.mean(), n.rstd())) {
                    ops.matmulInto(grad, dh, x, true, false, 1f, 0f);
                    try (Tensor full = ops.allReduce(grad, 1, ReduceOp.MEAN)) {
                        ops.adamw(w, full, m, v, new AdamWParams(1e-3f, 0.9f, 0.99f, 1e-8f, 0f, 1, 1f));
                    }
                    ops.crossEntropy(g, targets, -100);
                    ops.sumSquares(hb);
                }
            };
            step.run();
            step.run();
            long mallocs = mesh.nativeAllocations();
            List<Long> inUse = mesh.devices().stream().map(d -> d.memory().inUse()).toList();
            for (int i = 0; i < 5; i++) step.run();
            assertEquals(mallocs, mesh.nativeAllocations(), "steady state reuses cached buffers");
            assertEquals(inUse, mesh.devices().stream().map(d -> d.memory().inUse()).toList(), "accounting unchanged");
            assertTrue(mesh.nativeBytesReserved() > 0);
            for (Tensor t : new Tensor[]{w, wBf16, gamma, grad, m, v, x, targets}) t.close();
            assertEquals(0, mesh.asSubmesh().maxInUse());
        }
    }

    @Test
    void sizeClassesBoundTheSlack() {
        assertEquals(64, NativeAllocator.classSize(1));
        assertEquals(64, NativeAllocator.classSize(64));
        assertEquals(72, NativeAllocator.classSize(65));
        assertEquals(128, NativeAllocator.classSize(128));
        assertEquals(1152, NativeAllocator.classSize(1025));
        int last = -1;
        for (long bytes = 1; bytes <= NativeAllocator.MAX_BYTES; bytes = bytes * 3 / 2 + 1) {
            int c = NativeAllocator.classSize(bytes);
            assertTrue(c >= bytes && c <= Math.max(64, bytes * 1.125 + 1), bytes + " -> " + c);
            int index = NativeAllocator.classIndex(c);
            assertTrue(index >= last, "indices grow");
            assertEquals(c, NativeAllocator.classSize(c), "a class size is its own class");
            last = index;
        }
        assertEquals(NativeAllocator.MAX_BYTES, NativeAllocator.classSize(NativeAllocator.MAX_BYTES));
    }

    @Test
    void freedBuffersAreReusedAndTrimmedPastTheSoftLimit() {
        NativeAllocator a = new NativeAllocator("test device", 4096);
        NativeBuffer b1 = a.take(1000);
        a.give(b1);
        assertEquals(b1, a.take(1000), "same class reused");
        assertEquals(1, a.mallocCount());
        a.give(b1);
        NativeBuffer big = a.take(4000); // past the soft limit with 1000 cached: trims first
        assertEquals(0, a.cachedBytes());
        assertEquals(NativeAllocator.classSize(4000), a.reservedBytes());
        a.give(big);
        a.close();
        assertEquals(0, a.reservedBytes());
    }
}

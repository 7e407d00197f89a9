package dev.ttpipe.device.sim;

import dev.ttpipe.device.AdamWParams;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.MeshSocket;
import dev.ttpipe.device.MemoryStats;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Placement;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

class SimBackendTest {
    /** 1 GFLOP/s, 1 GB/s memory and links, 50 us per op: easy to add up by hand. */
    private static final SimCosts COSTS = new SimCosts(1.0, 1.0, 50.0, 1.0, 1.0);

    private static MeshDevice sim(int rows, int cols) {
        return SimMeshDevice.open(new MeshShape(rows, cols), MeshOptions.defaults().withSimCosts(COSTS));
    }

    /**
     * Ten rounds of matmul, gelu and all-gather on a 1 x 2 mesh: the modeled time the queue is charged,
     * added up by hand from the cost model.
     */
    private static double issueRounds(Ops ops, Tensor a, Tensor w, SimCosts costs, List<Tensor> outs) {
        double expected = 0;
        for (int i = 0; i < 10; i++) {
            Tensor h = ops.matmul(a, w, false, false);                          // per device [64, 256] x [256, 256]
            expected += costs.computeSeconds(2.0 * 64 * 256 * 256);
            Tensor g = ops.gelu(h);                                             // reads and writes 64 KiB per device
            expected += costs.memorySeconds(2.0 * 64 * 256 * 4);
            Tensor r = ops.allGather(g, 0, 1);                                  // ring: (n-1) pieces of 64 KiB
            expected += costs.linkSeconds(1.0 * 64 * 256 * 4);
            outs.add(h);
            outs.add(g);
            outs.add(r);
        }
        return expected;
    }

    @Test
    void opsReturnAtOnceWithTheirModeledTimeQueued() {
        // the same program at x100000: about three hours of modeled work, which issuing must not wait for
        SimCosts slow = new SimCosts(1.0, 1.0, 50.0, 1.0, 100_000.0);
        try (MeshDevice mesh = SimMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults().withSimCosts(slow))) {
            SimSubmesh queue = (SimSubmesh) mesh.asSubmesh();
            Ops ops = queue.ops();
            Tensor a = ops.zeros(Shape.of(128, 256), Layout.shard(0, 1), DType.FP32);
            Tensor w = ops.zeros(Shape.of(256, 256), Layout.REPLICATED, DType.FP32);
            double before = SimMeshDevice.modeledSeconds(queue);
            List<Tensor> outs = new ArrayList<>();
            double expected = assertTimeoutPreemptively(Duration.ofSeconds(60), () -> issueRounds(ops, a, w, slow, outs),
                    "issuing waited for the modeled time");
            assertTrue(expected > 3600, "modeled " + expected + " s");
            assertEquals(expected, SimMeshDevice.modeledSeconds(queue) - before, 1e-9 * expected);
            assertTrue(queue.busyUntil() - System.nanoTime() > 1e9 * expected / 2, "the queue runs on after issuing");
            outs.forEach(Tensor::close);
            a.close();
            w.close();
        }
    }

    @Test
    void synchronizeWaitsForTheModeledTime() {
        try (MeshDevice mesh = sim(1, 2)) {
            SimSubmesh queue = (SimSubmesh) mesh.asSubmesh();
            Ops ops = queue.ops();
            Tensor a = ops.zeros(Shape.of(128, 256), Layout.shard(0, 1), DType.FP32);
            Tensor w = ops.zeros(Shape.of(256, 256), Layout.REPLICATED, DType.FP32);
            queue.synchronize();
            double before = SimMeshDevice.modeledSeconds(queue);
            List<Tensor> outs = new ArrayList<>();
            long issuing = System.nanoTime();
            double expected = issueRounds(ops, a, w, COSTS, outs);
            long issued = System.nanoTime();
            assertEquals(expected, SimMeshDevice.modeledSeconds(queue) - before, 1e-9 * expected);
            // the queue's clock: the modeled time after the first op was issued, and no more after the last
            long end = queue.busyUntil();
            long modeledNanos = Math.round(expected * 1e9);
            assertTrue(end >= issuing + modeledNanos - 100, "queue ends " + (end - issuing) + " ns after issuing began");
            assertTrue(end <= issued + modeledNanos + 100, "queue ends " + (end - issued) + " ns after issuing ended");
            queue.synchronize();
            assertTrue(System.nanoTime() >= end, "synchronize returned before the queue's modeled end");
            outs.forEach(Tensor::close);
            a.close();
            w.close();
        }
    }

    @Test
    void valuesArePlaceholdersReadAfterTheQueue() {
        try (MeshDevice mesh = sim(1, 1)) {
            Ops ops = mesh.asSubmesh().ops();
            try (Tensor logits = ops.zeros(Shape.of(4, 10), Layout.REPLICATED, DType.FP32);
                 Tensor targets = ops.fromHostInts(new int[]{1, 2, 3, -100}, Shape.of(4), Layout.REPLICATED);
                 Tensor x = ops.fromHost(new float[]{1, 2, 3}, Shape.of(3), Layout.REPLICATED, DType.BF16)) {
                LossOutput loss = ops.crossEntropy(logits, targets, -100);
                assertTrue(Double.isNaN(loss.sum()));
                assertEquals(4, loss.count(), "ids are not stored: every target counts");
                assertTrue(Double.isNaN(ops.sumSquares(x)));
                assertArrayEquals(new float[3], x.toHost());
                assertArrayEquals(new int[4], targets.toHostInts());
                assertEquals("sim", mesh.backend());
            }
        }
    }

    @Test
    @SuppressWarnings("try")
    void timeScaleMultipliesModeledTime() {
        double[] modeled = new double[2];
        double[] scales = {1.0, 100.0};
        for (int i = 0; i < 2; i++) {
            SimCosts costs = new SimCosts(1.0, 1.0, 0.0, 1.0, scales[i]);
            try (MeshDevice mesh = SimMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withSimCosts(costs))) {
                Submesh queue = mesh.asSubmesh();
                Ops ops = queue.ops();
                try (Tensor a = ops.zeros(Shape.of(1), Layout.REPLICATED, DType.FP32)) {
                    double before = SimMeshDevice.modeledSeconds(queue);
                    ops.scale(a, 2f).close();
                    try (Tensor m = ops.zeros(Shape.of(64, 64), Layout.REPLICATED, DType.FP32);
                         Tensor p = ops.matmul(m, m, false, false)) {
                    }
                    modeled[i] = SimMeshDevice.modeledSeconds(queue) - before;
                }
            }
        }
        // scale reads and writes 4 bytes (8 ns at 1 GB/s), the fill writes 16 KiB, the matmul 2 * 64^3 flops at 1 GFLOP/s
        double byHand = 8e-9 + 16384e-9 + 524288e-9;
        assertEquals(byHand, modeled[0], 1e-12);
        assertEquals(100 * byHand, modeled[1], 1e-10);
    }

    @Test
    void socketTransfersMakeTheReceiverWaitForTheSender() throws InterruptedException {
        try (MeshDevice mesh = sim(1, 2)) {
            List<Submesh> stages = mesh.createSubmeshes(new MeshShape(1, 1));
            SimSubmesh sender = (SimSubmesh) stages.get(0);
            SimSubmesh receiver = (SimSubmesh) stages.get(1);
            Ops first = sender.ops();
            try (MeshSocket socket = mesh.openSocket(sender, receiver);
                 Tensor m = first.zeros(Shape.of(128, 128), Layout.REPLICATED, DType.FP32);
                 Tensor p = first.matmul(m, m, false, false)) {   // ~4.2 ms of modeled compute on stage 0
                double before = SimMeshDevice.modeledSeconds(sender);
                socket.send(p);
                assertEquals(COSTS.linkSeconds(64 * 1024), SimMeshDevice.modeledSeconds(sender) - before, 1e-15,
                        "the transfer is charged to the sender's queue");
                long arrives = sender.busyUntil();
                assertTrue(receiver.busyUntil() < arrives, "the receiver's queue was idle before the transfer");
                try (Tensor got = socket.recv(1000)) {
                    assertEquals(stages.get(1), got.submesh());
                    assertEquals(64 * 1024, mesh.devices().get(1).memory().inUse());
                    assertTrue(receiver.busyUntil() >= arrives, "work on the receiver waits for the transfer to arrive");
                    receiver.synchronize();
                    assertTrue(System.nanoTime() >= arrives, "the receiver synchronized before the transfer arrived");
                }
            }
        }
    }

    @Test
    void anAdoptedTensorIsReadyWhenItsProducerEndsNotWhenTheSendersQueueDoes() {
        // at x100000 each matmul is about 7 minutes of modeled time: its end lies ahead of the clock however slowly
        // this host issues it, so what is compared below is the queues' order, not this host's speed
        SimCosts slow = new SimCosts(1.0, 1.0, 50.0, 1.0, 100_000.0);
        try (MeshDevice mesh = SimMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults().withSimCosts(slow))) {
            List<Submesh> stages = mesh.createSubmeshes(new MeshShape(1, 1));
            SimSubmesh sender = (SimSubmesh) stages.get(0);
            SimSubmesh receiver = (SimSubmesh) stages.get(1);
            Ops first = sender.ops();
            try (Tensor m = first.zeros(Shape.of(128, 128), Layout.REPLICATED, DType.FP32)) {
                Tensor p = first.matmul(m, m, false, false);              // ~420 s of modeled compute
                long produced = sender.queuedUntilNanos();
                assertTrue(produced > System.nanoTime(), "the op waited for its modeled time");
                try (Tensor later = first.matmul(m, m, false, false)) {   // more work queued behind it
                    assertTrue(sender.queuedUntilNanos() > produced);
                    try (Tensor got = receiver.ops().adopt(p)) {
                        assertEquals(produced, receiver.queuedUntilNanos(), "the receiver waits for p's producer, and only for it");
                    }
                }
            }
        }
    }

    @Test
    void aFencedTensorIsReadyWhenEverythingQueuedBeforeTheFenceIs() {
        try (MeshDevice mesh = sim(1, 2)) {
            List<Submesh> stages = mesh.createSubmeshes(new MeshShape(1, 1));
            SimSubmesh sender = (SimSubmesh) stages.get(0);
            Ops first = sender.ops();
            try (Tensor m = first.zeros(Shape.of(128, 128), Layout.REPLICATED, DType.FP32)) {
                Tensor p = first.matmul(m, m, false, false);
                long produced = sender.readyAtNanos(p);
                try (Tensor rest = first.matmul(m, m, false, false)) {      // the rest of the action
                    long actionEnd = sender.queuedUntilNanos();
                    assertTrue(actionEnd > produced);
                    sender.fence(p);
                    assertEquals(actionEnd, sender.readyAtNanos(p));
                    try (Tensor got = stages.get(1).ops().adopt(p)) {
                        assertEquals(actionEnd, stages.get(1).queuedUntilNanos());
                    }
                }
            }
        }
    }

    @Test
    void aSixtyFourStagePipelineRunsOnOneHost() {
        try (MeshDevice mesh = Backends.open("sim", new MeshShape(1, 64), MeshOptions.defaults()
                .withSimCosts(new SimCosts(1000, 1000, 1, 100, 1)))) {
            List<Submesh> stages = mesh.createSubmeshes(new MeshShape(1, 1));
            assertEquals(64, stages.size());
            Tensor x = stages.get(0).ops().zeros(Shape.of(8, 512, 768), Layout.REPLICATED, DType.BF16);
            try (Tensor w = stages.get(0).ops().zeros(Shape.of(768, 768), Layout.REPLICATED, DType.BF16)) {
                for (int s = 0; s < 64; s++) {
                    Ops ops = stages.get(s).ops();
                    if (s > 0) x = ops.adopt(x);
                    try (Tensor ws = s == 0 ? null : ops.zeros(Shape.of(768, 768), Layout.REPLICATED, DType.BF16);
                         Tensor h = ops.matmul(x, s == 0 ? w : ws, false, false)) {
                        x.close();
                        x = ops.gelu(h);
                    }
                }
            }
            stages.get(63).synchronize();
            assertEquals(8L * 512 * 768 * 2, mesh.devices().get(63).memory().inUse());
            x.close();
            for (var d : mesh.devices()) assertEquals(0, d.memory().inUse(), "device " + d.id());
        }
    }

    // ---- the same programs, the same accounting and the same errors as cpu --------------------------------

    @Test
    void memoryAccountingAndOutOfMemoryMatchTheCpuBackend() {
        MeshOptions small = MeshOptions.defaults().withMemoryPerDevice(10_000).withThreads(1).withSimCosts(COSTS);
        List<List<MemoryStats>> seen = new ArrayList<>();
        List<String> errors = new ArrayList<>();
        for (String backend : new String[]{"cpu", "sim"}) {
            try (MeshDevice mesh = Backends.open(backend, new MeshShape(2, 2), small)) {
                Ops ops = mesh.asSubmesh().ops();
                List<MemoryStats> trace = new ArrayList<>();
                Tensor a = ops.zeros(Shape.of(16, 32), Layout.shard(0, 0), DType.FP32);
                Tensor b = ops.zeros(Shape.of(32, 16), Layout.shard(1, 1), DType.BF16);
                Tensor c = ops.matmul(a, ops.typecast(b, DType.FP32), false, false);
                trace.addAll(mesh.asSubmesh().memory());
                try {
                    ops.zeros(Shape.of(64, 64), Layout.REPLICATED, DType.FP32);
                } catch (DeviceException e) {
                    errors.add(e.getMessage().replace(backend + " device", "DEVICE"));
                }
                trace.addAll(mesh.asSubmesh().memory());
                c.close();
                a.close();
                trace.addAll(mesh.asSubmesh().memory());
                seen.add(trace);
            }
        }
        assertEquals(seen.get(0), seen.get(1));
        assertEquals(2, errors.size());
        assertEquals(errors.get(0), errors.get(1));
        assertTrue(errors.get(0).contains("16384"), errors.get(0));
    }

    @Test
    void badInputGivesTheSameErrorsAsCpu() {
        Map<String, Consumer<Ops>> cases = new LinkedHashMap<>();
        cases.put("matmul shapes", ops -> ops.matmul(z(ops, 3, 5), z(ops, 4, 7), false, false));
        cases.put("add shapes", ops -> ops.add(z(ops, 3, 5), z(ops, 4, 7)));
        cases.put("matmul layouts", ops -> ops.matmul(ops.zeros(Shape.of(4, 6), Layout.shard(1, 1), DType.FP32),
                z(ops, 6, 4), false, false));
        cases.put("indivisible shard", ops -> ops.zeros(Shape.of(5, 2), Layout.shard(0, 1), DType.FP32));
        cases.put("gelu partial", ops -> ops.gelu(ops.zeros(Shape.of(4), new Layout(Placement.REPLICATE, Placement.PARTIAL),
                DType.FP32)));
        cases.put("softmax split rows", ops -> ops.softmax(ops.zeros(Shape.of(4, 4), Layout.shard(1, 1), DType.FP32), 1f, false));
        cases.put("closed", ops -> {
            Tensor t = z(ops, 2);
            t.close();
            ops.scale(t, 1f);
        });
        cases.put("int gelu", ops -> ops.gelu(ops.fromHostInts(new int[]{1}, Shape.of(1), Layout.REPLICATED)));
        cases.put("reshape", ops -> ops.reshape(z(ops, 3, 5), Shape.of(4, 4)));
        cases.put("permute", ops -> ops.permute(z(ops, 3, 5), 1, 1));
        cases.put("all_gather", ops -> ops.allGather(z(ops, 4, 4), 0, 1));
        cases.put("reduce_scatter", ops -> ops.reduceScatter(z(ops, 4, 4), 0, 1));
        cases.put("cross entropy targets", ops -> ops.crossEntropy(z(ops, 4, 5),
                ops.fromHostInts(new int[3], Shape.of(3), Layout.REPLICATED), -100));
        cases.put("dropout p", ops -> ops.dropout(z(ops, 4), 1.5f, 1, 0));
        cases.put("adamw step", ops -> ops.adamw(z(ops, 4), z(ops, 4), z(ops, 4), z(ops, 4),
                new AdamWParams(1, 1, 1, 1, 1, 0, 1)));
        cases.put("rope rank", ops -> ops.rope(z(ops, 4, 4), 10000f, false));
        cases.put("linear", ops -> ops.linear(z(ops, 2, 3), z(ops, 4, 5), null));
        cases.put("embedding table", ops -> ops.embedding(ops.fromHostInts(new int[1], Shape.of(1), Layout.REPLICATED), z(ops, 4)));
        for (var e : cases.entrySet()) {
            String[] messages = new String[2];
            String[] backends = {"cpu", "sim"};
            for (int i = 0; i < 2; i++) {
                try (MeshDevice mesh = Backends.open(backends[i], new MeshShape(1, 2), MeshOptions.defaults().withThreads(1))) {
                    Ops ops = mesh.asSubmesh().ops();
                    messages[i] = assertThrows(DeviceException.class, () -> e.getValue().accept(ops), e.getKey()).getMessage();
                }
            }
            assertEquals(messages[0], messages[1], e.getKey());
        }
    }

    private static Tensor z(Ops ops, int... dims) {
        return ops.zeros(Shape.of(dims), Layout.REPLICATED, DType.FP32);
    }
}

package dev.ttpipe.transport;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.ttnn.BridgeLibrary;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The fabric transport moves stage-to-stage tensors device to device, on the cpu backend's sockets
 * and on the bridge's (ttnn over the reference library): the payload materializes already on the
 * destination submesh, with the sender's values, layout and dtype; payloads of one channel may be
 * used in any order; nothing is left on any device afterwards.
 */
class FabricTransportTest {
    /** Collects what arrives for one rank. */
    static final class Inbox implements TensorReceiver {
        final LinkedBlockingQueue<TensorPayload> payloads = new LinkedBlockingQueue<>();
        final List<String> errors = Collections.synchronizedList(new ArrayList<>());

        @Override
        public void onTensor(TensorPayload payload) {
            payloads.add(payload);
        }

        @Override
        public void onError(String channel, String problem) {
            errors.add(channel + ": " + problem);
        }

        TensorPayload next() throws InterruptedException {
            TensorPayload p = payloads.poll(10, TimeUnit.SECONDS);
            assertNotNull(p, "a payload arrives");
            return p;
        }
    }

    private static MeshDevice open(String backend, MeshShape shape) {
        if (backend.equals("ttnn")) {
            assumeTrue(BridgeLibrary.locate().isPresent(), "the reference bridge library was not built (no C compiler?); "
                    + "tried " + BridgeLibrary.candidates(null));
        }
        return Backends.open(backend, shape, MeshOptions.defaults().withThreads(1));
    }

    private static FrameHeader header(int from, int to, int mb, Tensor t) {
        return new FrameHeader(1, 0, from, to, mb, TensorKind.ACTIVATION, t.dtype(), t.shape(), t.layout(), 0, 0);
    }

    private static long inUse(MeshDevice mesh) {
        return mesh.devices().stream().mapToLong(d -> d.memory().inUse()).sum();
    }

    private static float[] values(int n, float base) {
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = base + i;
        return x;
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"cpu", "ttnn"})
    void aSentTensorMaterializesOnTheDestinationSubmesh(String backend) throws Exception {
        try (MeshDevice mesh = open(backend, new MeshShape(1, 4))) {
            List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 2));
            try (FabricTransport fabric = new FabricTransport(mesh, Map.of(0, subs.get(0), 1, subs.get(1)))) {
                Inbox inbox = new Inbox();
                fabric.bind(1, inbox);
                assertEquals("fabric", fabric.name());
                TensorChannel ch = fabric.channel(0, 1);
                assertEquals(ch, fabric.channel(0, 1), "opened once");
                Tensor a = subs.get(0).ops().fromHost(values(16, 1), Shape.of(4, 4), Layout.shard(0, 1), DType.FP32);
                Tensor b = subs.get(0).ops().fromHost(values(6, -3), Shape.of(6), Layout.REPLICATED, DType.BF16);
                FrameHeader ha = header(0, 1, 0, a), hb = header(0, 1, 1, b);
                ch.send(ha, a).get(5, TimeUnit.SECONDS);
                ch.send(hb, b).get(5, TimeUnit.SECONDS);
                assertTrue(a.isClosed() && b.isClosed(), "the channel took the tensors");
                assertEquals(0, subs.get(0).maxInUse(), "nothing left on the sender");
                TensorPayload pa = inbox.next(), pb = inbox.next();
                assertEquals(ha, pa.header());
                try (Tensor ra = pa.materialize(subs.get(1)); Tensor rb = pb.materialize(subs.get(1))) {
                    assertEquals(subs.get(1), ra.submesh());
                    assertEquals(Layout.shard(0, 1), ra.layout());
                    assertArrayEquals(values(16, 1), ra.toHost());
                    assertArrayEquals(Arrays.copyOfRange(values(16, 1), 8, 16), ra.toHostLocal(1),
                            "the second device holds rows 2 and 3");
                    assertEquals(DType.BF16, rb.dtype());
                    assertArrayEquals(values(6, -3), rb.toHost());
                    try (Tensor sum = subs.get(1).ops().scale(ra, 2f)) {
                        assertEquals(2f * 16, sum.toHost()[15]);
                    }
                }
                assertThrows(IllegalStateException.class, () -> pa.materialize(subs.get(1)), "exactly once");
                assertEquals(List.of(), inbox.errors);
            }
            assertEquals(0, inUse(mesh));
        }
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"cpu", "ttnn"})
    void payloadsOfOneChannelMayBeUsedInAnyOrder(String backend) throws Exception {
        try (MeshDevice mesh = open(backend, new MeshShape(2, 1))) {
            List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 1));
            Inbox inbox = new Inbox();
            try (FabricTransport fabric = new FabricTransport(mesh, Map.of(0, subs.get(0), 1, subs.get(1)))) {
                fabric.bind(0, inbox);
                TensorChannel back = fabric.channel(1, 0);
                for (int mb = 0; mb < 4; mb++) {
                    Tensor g = subs.get(1).ops().full(Shape.of(3), Layout.REPLICATED, DType.FP32, mb);
                    back.send(header(1, 0, mb, g), g).get();
                }
                TensorPayload[] p = new TensorPayload[4];
                for (int mb = 0; mb < 4; mb++) p[mb] = inbox.next();
                try (Tensor t2 = p[2].materialize(subs.get(0))) {
                    assertArrayEquals(new float[]{2, 2, 2}, t2.toHost());
                }
                p[0].discard();
                p[3].discard();
                try (Tensor t1 = p[1].materialize(subs.get(0))) {
                    assertArrayEquals(new float[]{1, 1, 1}, t1.toHost());
                }
                assertEquals(0, subs.get(0).maxInUse(), "discarded tensors are freed");
                Tensor late = subs.get(1).ops().full(Shape.of(3), Layout.REPLICATED, DType.FP32, 9f);
                back.send(header(1, 0, 9, late), late).get();
                inbox.next(); // never used: freed when the transport closes
            }
            assertEquals(0, inUse(mesh));
        }
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"cpu", "ttnn"})
    void stagesOnTwoThreadsExchangeActivationsAndGradients(String backend) throws Exception {
        try (MeshDevice mesh = open(backend, new MeshShape(1, 2))) {
            List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 1));
            Inbox in0 = new Inbox(), in1 = new Inbox();
            try (FabricTransport fabric = new FabricTransport(mesh, Map.of(0, subs.get(0), 1, subs.get(1)))) {
                fabric.bind(0, in0);
                fabric.bind(1, in1);
                int n = 50;
                CompletableFuture<Void> stage1 = CompletableFuture.runAsync(() -> {
                    try {
                        for (int mb = 0; mb < n; mb++) {
                            try (Tensor x = in1.next().materialize(subs.get(1))) {
                                Tensor g = subs.get(1).ops().scale(x, -1f);
                                fabric.channel(1, 0).send(header(1, 0, mb, g), g).get();
                            }
                        }
                    } catch (InterruptedException | ExecutionException e) {
                        throw new IllegalStateException(e);
                    }
                });
                for (int mb = 0; mb < n; mb++) {
                    Tensor x = subs.get(0).ops().fromHost(values(8, mb), Shape.of(2, 4), Layout.REPLICATED, DType.FP32);
                    fabric.channel(0, 1).send(header(0, 1, mb, x), x).get();
                }
                for (int mb = 0; mb < n; mb++) {
                    try (Tensor g = in0.next().materialize(subs.get(0))) {
                        assertEquals(-(mb + 7f), g.toHost()[7], "microbatch " + mb);
                    }
                }
                stage1.get(30, TimeUnit.SECONDS);
            }
            assertEquals(0, inUse(mesh));
        }
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"cpu", "ttnn"})
    void mistakesFailTheSendAndFreeTheTensor(String backend) throws Exception {
        try (MeshDevice mesh = open(backend, new MeshShape(1, 3))) {
            List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 1));
            try (FabricTransport fabric = new FabricTransport(mesh, Map.of(0, subs.get(0), 1, subs.get(1)))) {
                Tensor t = subs.get(0).ops().zeros(Shape.of(4), Layout.REPLICATED, DType.FP32);
                ExecutionException e = assertThrows(ExecutionException.class,
                        () -> fabric.channel(0, 1).send(header(0, 1, 0, t), t).get());
                assertTrue(e.getCause().getMessage().contains("no receiver bound for rank 1"), e.getMessage());
                assertTrue(t.isClosed());
                fabric.bind(1, new Inbox());
                Tensor elsewhere = subs.get(2).ops().zeros(Shape.of(4), Layout.REPLICATED, DType.FP32);
                ExecutionException w = assertThrows(ExecutionException.class,
                        () -> fabric.channel(0, 1).send(header(0, 1, 0, elsewhere), elsewhere).get());
                assertTrue(w.getCause().getMessage().contains("the channel sends from"), w.getMessage());
                IllegalArgumentException unknown = assertThrows(IllegalArgumentException.class, () -> fabric.channel(0, 5));
                assertTrue(unknown.getMessage().contains("rank 5 has no submesh"), unknown.getMessage());
            }
            assertEquals(0, inUse(mesh));
            assertThrows(IllegalArgumentException.class, () -> new FabricTransport(mesh, Map.of(0, subs.get(0), 1,
                    Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults()).asSubmesh())));
        }
    }
}

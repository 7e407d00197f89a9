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

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Frames on one channel arrive in the order sent, also when two channels feed one rank and when the receiver lags. */
class AeronOrderingTest {
    static final long JOB = 3;

    private MeshDevice mesh;
    private List<Submesh> subs;
    private AeronTransport transport;

    @BeforeEach
    void start() {
        mesh = CpuMeshDevice.open(new MeshShape(1, 3), MeshOptions.defaults().withThreads(1));
        subs = mesh.createSubmeshes(new MeshShape(1, 1));
        transport = AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1, 2).withTermLength(64 << 10));
    }

    @AfterEach
    void stop() {
        transport.close();
        mesh.close();
    }

    /** A tensor of {@code n} floats on rank {@code from}'s submesh whose every element is {@code value}. */
    private Tensor filled(int from, int n, float value) {
        return subs.get(from).ops().full(Shape.of(n), Layout.REPLICATED, DType.FP32, value);
    }

    private static FrameHeader header(int from, int mb) {
        return new FrameHeader(JOB, 0, from, 1, mb, TensorKind.ACTIVATION, DType.FP32, Shape.of(1), Layout.REPLICATED, 0, 0);
    }

    private static void checkValue(TensorPayload p, Submesh dst, float expected) {
        try (Tensor t = p.materialize(dst)) {
            float[] x = t.toHostLocal(0);
            assertEquals(expected, x[0]);
            assertEquals(expected, x[x.length - 1]);
        }
    }

    @Test
    void oneChannelKeepsTheOrderOfManyFrames() {
        Received r = new Received();
        transport.bind(1, r);
        TensorChannel c = transport.channel(0, 1);
        List<CompletableFuture<Void>> sent = new ArrayList<>();
        int frames = 300;
        for (int i = 0; i < frames; i++) sent.add(c.send(header(0, i), filled(0, 1 + (i * 389) % 5000, i)));
        for (int i = 0; i < frames; i++) {
            TensorPayload p = r.next();
            assertEquals(i, p.header().microbatch());
            checkValue(p, subs.get(1), i);
        }
        CompletableFuture.allOf(sent.toArray(new CompletableFuture[0])).orTimeout(10, TimeUnit.SECONDS).join();
        assertTrue(r.errors.isEmpty(), () -> "errors: " + r.errors);
    }

    @Test
    void twoChannelsIntoOneRankEachKeepTheirOrder() throws Exception {
        Received r = new Received();
        transport.bind(1, r);
        int frames = 150;
        Thread[] senders = new Thread[2];
        for (int s = 0; s < 2; s++) {
            int from = s == 0 ? 0 : 2;
            senders[s] = new Thread(() -> {
                TensorChannel c = transport.channel(from, 1);
                for (int i = 0; i < frames; i++) c.send(header(from, i), filled(from, 3000 + 17 * i, from * 1000 + i));
            });
            senders[s].start();
        }
        for (Thread t : senders) t.join();
        int[] next = new int[3];
        for (int i = 0; i < 2 * frames; i++) {
            TensorPayload p = r.next();
            int from = p.header().fromStage();
            assertEquals(next[from]++, p.header().microbatch(), "order on the channel from rank " + from);
            checkValue(p, subs.get(1), from * 1000 + p.header().microbatch());
        }
        assertEquals(frames, next[0]);
        assertEquals(frames, next[2]);
        assertTrue(r.errors.isEmpty(), () -> "errors: " + r.errors);
    }

    @Test
    void aSlowReceiverPushesBackAndEverythingArrivesInOrder() {
        AtomicInteger delivered = new AtomicInteger();
        Received r = new Received() {
            @Override
            public void onTensor(TensorPayload payload) {
                // a receiver that does not keep up holds the receive thread: Aeron's window fills
                if (delivered.incrementAndGet() % 4 == 0) sleep(3);
                super.onTensor(payload);
            }
        };
        transport.bind(1, r);
        TensorChannel c = transport.channel(0, 1);
        int frames = 120;
        List<CompletableFuture<Void>> sent = new ArrayList<>();
        for (int i = 0; i < frames; i++) sent.add(c.send(header(0, i), filled(0, 4096, i))); // 16 KiB each, term 64 KiB
        CompletableFuture.allOf(sent.toArray(new CompletableFuture[0])).orTimeout(30, TimeUnit.SECONDS).join();
        for (int i = 0; i < frames; i++) {
            TensorPayload p = r.next();
            assertEquals(i, p.header().microbatch());
            checkValue(p, subs.get(1), i);
        }
        assertTrue(((AeronChannel) c).backPressured() > 0, "the sender was never pushed back: the test proves nothing");
        assertTrue(r.errors.isEmpty(), () -> "errors: " + r.errors);
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}

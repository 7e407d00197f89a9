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
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Each frame delivered over Aeron says when its first chunk arrived and when its last made it whole
 * (the receiving process's nanoTime): both within the send and the delivery, the first before the last
 * for a frame of many chunks, and a frame queued behind another one at the sender starts its time when
 * its own first chunk arrives, not when it was queued. The local transport does not time its hand-over.
 */
class AeronFrameTimingTest {
    static final long JOB = 42;
    /** A 64 KiB term: a 4 MiB frame is cut into hundreds of chunks and back-pressured many times over. */
    static final int TERM = 64 << 10;
    static final int FLOATS = 1 << 20;

    private MeshDevice mesh;
    private Submesh src, dst;

    @BeforeEach
    void open() {
        mesh = CpuMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults().withThreads(1));
        List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 1));
        src = subs.get(0);
        dst = subs.get(1);
    }

    @AfterEach
    void close() {
        mesh.close();
    }

    private Tensor tensor(int floats) {
        return src.ops().fromHost(new float[floats], Shape.of(floats), Layout.REPLICATED, DType.FP32);
    }

    private static FrameHeader header(int mb, Tensor t) {
        return new FrameHeader(JOB, 0, 0, 1, mb, TensorKind.ACTIVATION, t.dtype(), t.shape(), t.layout(), 0, 0);
    }

    @ParameterizedTest(name = "in place: {0}")
    @ValueSource(booleans = {false, true})
    void aFrameOfManyChunksIsTimedFromItsFirstChunkToItsLast(boolean inPlace) {
        try (AeronTransport t = AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1).withTermLength(TERM))) {
            Received r = new Received();
            if (inPlace) t.bind(1, dst, r);
            else t.bind(1, r);
            Tensor x = tensor(FLOATS);
            long sent = System.nanoTime();
            t.channel(0, 1).send(header(0, x), x).orTimeout(30, TimeUnit.SECONDS).join();
            TensorPayload p = r.next();
            long delivered = System.nanoTime();
            try {
                assertEquals(inPlace ? InPlacePayload.class : AeronPayload.class, p.getClass());
                assertEquals(4L * FLOATS, p.header().payloadBytes());
                assertTrue(p.firstChunkNs() >= sent, "first chunk " + (p.firstChunkNs() - sent) + " ns after the send");
                assertTrue(p.lastChunkNs() > p.firstChunkNs(), "first " + p.firstChunkNs() + ", last " + p.lastChunkNs());
                assertTrue(p.lastChunkNs() <= delivered, "last chunk " + (p.lastChunkNs() - delivered) + " ns after the delivery");
            } finally {
                p.discard();
            }
        }
    }

    @Test
    void aFrameQueuedBehindAnotherIsTimedFromItsOwnFirstChunk() {
        try (AeronTransport t = AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1).withTermLength(TERM))) {
            Received r = new Received();
            t.bind(1, r);
            Tensor big = tensor(4 * FLOATS), small = tensor(FLOATS / 64);
            long queued = System.nanoTime();
            CompletableFuture<Void> a = t.channel(0, 1).send(header(0, big), big);
            CompletableFuture<Void> b = t.channel(0, 1).send(header(1, small), small);   // waits behind the 16 MiB one
            CompletableFuture.allOf(a, b).orTimeout(30, TimeUnit.SECONDS).join();
            List<TensorPayload> ps = r.next(2);
            try {
                TensorPayload first = ps.get(0), second = ps.get(1);
                assertEquals(1, second.header().microbatch());
                assertTrue(second.firstChunkNs() >= first.lastChunkNs(), "the second frame began before the first ended");
                long onLink = second.lastChunkNs() - second.firstChunkNs(), sinceQueued = second.lastChunkNs() - queued;
                assertTrue(onLink < sinceQueued / 2, "the small frame's time on the link, " + onLink + " ns, counts its wait"
                        + " behind the big one (" + sinceQueued + " ns since both were queued)");
            } finally {
                ps.forEach(TensorPayload::discard);
            }
        }
    }

    @Test
    void theLocalTransportDoesNotTimeItsHandOver() {
        try (LocalTransport t = new LocalTransport()) {
            Received r = new Received();
            t.bind(1, r);
            Tensor x = tensor(16);
            t.channel(0, 1).send(header(0, x), x).join();
            TensorPayload p = r.next();
            assertEquals(-1, p.firstChunkNs());
            assertEquals(-1, p.lastChunkNs());
            p.discard();
        }
    }
}

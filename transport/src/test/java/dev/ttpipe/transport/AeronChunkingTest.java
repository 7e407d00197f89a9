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
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.net.DatagramSocket;
import java.net.SocketException;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Tensors whose pieces sit at the chunk edges and a 64 MiB one arrive intact over IPC and over UDP on
 * loopback, reassembled in a buffer or (bound with the submesh) assembled in place. A 64 KiB term allows messages of at most 8 KiB (term / 8), the MTU is 8 KiB: by default a
 * chunk fills one MTU (claimed in the term, one fragment per chunk); with chunks of a whole message
 * (8 KiB less the header) Aeron fragments each chunk and the receiver reassembles the fragments.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class AeronChunkingTest {
    static final int TERM = 64 << 10;
    static final int MESSAGE = TERM / 8;
    static final int MTU = 8192;
    /** An MTU less Aeron's 32-byte frame header and ours. */
    static final int MTU_CHUNK = MTU - 32 - FrameCodec.LENGTH;
    static final int MESSAGE_CHUNK = MESSAGE - FrameCodec.LENGTH;
    static final long JOB = 42;

    /** Where, how cut, and whether rank 1 is bound with its submesh (frames assembled in its memory) or not. */
    enum Media {
        IPC(MTU_CHUNK, false), UDP(MTU_CHUNK, false), IPC_MESSAGE_CHUNKS(MESSAGE_CHUNK, false),
        UDP_MESSAGE_CHUNKS(MESSAGE_CHUNK, false), IPC_IN_PLACE(MTU_CHUNK, true), UDP_MESSAGE_CHUNKS_IN_PLACE(MESSAGE_CHUNK, true);

        final int chunk;
        final boolean inPlace;

        Media(int chunk, boolean inPlace) {
            this.chunk = chunk;
            this.inPlace = inPlace;
        }

        boolean ipc() {
            return this == IPC || this == IPC_MESSAGE_CHUNKS || this == IPC_IN_PLACE;
        }
    }

    private MeshDevice mesh;
    private Submesh src;
    private Submesh dst;
    private final Map<Media, AeronTransport> transports = new EnumMap<>(Media.class);
    private final Map<Media, Received> received = new EnumMap<>(Media.class);

    @BeforeAll
    void start() {
        mesh = CpuMeshDevice.open(new MeshShape(1, 4), MeshOptions.defaults().withThreads(1));
        List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 2));
        src = subs.get(0);
        dst = subs.get(1);
        for (Media m : Media.values()) {
            AeronTransport.Config c = m.ipc()
                    ? AeronTransport.Config.ipc(JOB, 0, 1)
                    : AeronTransport.Config.of(JOB, Map.of(0, AeronTransport.Endpoint.udp("127.0.0.1", freePort()),
                            1, AeronTransport.Endpoint.udp("127.0.0.1", freePort())), Set.of(0, 1));
            c = c.withTermLength(TERM).withUdpMtu(MTU);
            if (m.chunk == MESSAGE_CHUNK) c = c.withMaxChunkBytes(MESSAGE);
            transports.put(m, AeronTransport.start(c));
        }
        for (Media m : Media.values()) {
            Received r = new Received();
            received.put(m, r);
            if (m.inPlace) {
                transports.get(m).bind(1, dst, r);
            } else {
                transports.get(m).bind(1, r);
            }
        }
    }

    @AfterAll
    void stop() {
        transports.values().forEach(AeronTransport::close);
        mesh.close();
    }

    static int freePort() {
        try (DatagramSocket s = new DatagramSocket(0)) {
            return s.getLocalPort();
        } catch (SocketException e) {
            throw new AssertionError(e);
        }
    }

    static float[] ramp(int n, int seed) {
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = (float) (seed + i * 0.37 - Math.floor(i / 7.0));
        return x;
    }

    static FrameHeader header(int mb, Tensor t) {
        return new FrameHeader(JOB, 0, 0, 1, mb, TensorKind.ACTIVATION, t.dtype(), t.shape(), t.layout(), 0, 0);
    }

    /** Sends {@code t} from rank 0 to rank 1, materializes it on the other submesh and compares every piece. */
    private void roundTrip(Media m, Tensor t, int mb) {
        int n = src.shape().size();
        float[][] pieces = new float[n][];
        for (int d = 0; d < n; d++) pieces[d] = t.toHostLocal(d);
        int[] ints = t.dtype() == DType.INT32 ? t.toHostInts() : null;
        Shape shape = t.shape();
        Layout layout = t.layout();
        long bytes = t.bytesPerDevice() * n;
        transports.get(m).channel(0, 1).send(header(mb, t), t).orTimeout(30, TimeUnit.SECONDS).join();
        TensorPayload p = received.get(m).next();
        assertEquals(mb, p.header().microbatch());
        assertEquals(bytes, p.header().payloadBytes());
        assertEquals(m.inPlace ? InPlacePayload.class : AeronPayload.class, p.getClass());
        try (Tensor r = p.materialize(dst)) {
            assertEquals(dst, r.submesh());
            assertEquals(shape, r.shape());
            assertEquals(layout, r.layout());
            for (int d = 0; d < n; d++) assertArrayEquals(pieces[d], r.toHostLocal(d), "piece " + d + " of " + shape);
            if (ints != null) assertArrayEquals(ints, r.toHostInts());
        }
        assertTrue(received.get(m).errors.isEmpty(), () -> "errors: " + received.get(m).errors);
    }

    @ParameterizedTest
    @EnumSource(Media.class)
    void piecesAtTheChunkEdgesArriveIntact(Media m) {
        int c = m.chunk;
        int[] pieceBytes = {0, 4, c - 4, c, c + 4, MESSAGE - 4, MESSAGE, MESSAGE + 4, 3 * c + 8};
        int mb = 0;
        for (int bytes : pieceBytes) {
            int k = bytes / 4;
            // fp32 sharded over the 2 devices: two pieces of `bytes` each
            roundTrip(m, src.ops().fromHost(ramp(2 * k, mb), Shape.of(2, k), Layout.shard(0, 1), DType.FP32), mb++);
            // fp32 replicated: the same piece on both devices
            roundTrip(m, src.ops().fromHost(ramp(k, mb), Shape.of(k), Layout.REPLICATED, DType.FP32), mb++);
            // int32 sharded along the last dim
            int[] ids = new int[2 * k];
            for (int i = 0; i < ids.length; i++) ids[i] = i * 7919 + (1 << 28) - mb;
            roundTrip(m, src.ops().fromHostInts(ids, Shape.of(1, 2 * k), Layout.shard(1, 1)), mb++);
        }
        // bf16: 2-byte elements, odd element counts
        roundTrip(m, src.ops().fromHost(ramp(2 * 1001, 3), Shape.of(2, 1001), Layout.shard(0, 1), DType.BF16), mb++);
        // a single byte short of a chunk in bf16 is impossible; a single element is the smallest payload
        roundTrip(m, src.ops().fromHost(ramp(1, 5), Shape.of(), Layout.REPLICATED, DType.FP32), mb);
    }

    @ParameterizedTest
    @EnumSource(Media.class)
    void sixtyFourMebibytesArriveIntact(Media m) {
        int n = 16 << 20; // 64 MiB of fp32, 32 MiB per device
        roundTrip(m, src.ops().fromHost(ramp(n, 11), Shape.of(2, n / 2), Layout.shard(0, 1), DType.FP32), 1000);
    }

    @ParameterizedTest
    @EnumSource(Media.class)
    void chunksFillAnMtuOrAMessage(Media m) {
        assertEquals(m.chunk, ((AeronChannel) transports.get(m).channel(0, 1)).maxChunk());
    }
}

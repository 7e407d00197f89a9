package dev.ttpipe.transport;

import com.code_intelligence.jazzer.api.FuzzedDataProvider;
import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Placement;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.cpu.CpuMeshDevice;
import dev.ttpipe.device.spi.Sharding;
import io.aeron.logbuffer.FrameDescriptor;
import io.aeron.logbuffer.Header;
import io.aeron.protocol.DataHeaderFlyweight;
import org.agrona.collections.Int2ObjectHashMap;
import org.agrona.concurrent.UnsafeBuffer;
import org.junit.jupiter.api.AfterAll;

import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.zip.CRC32C;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The real {@link FrameAssembler}, fed fragments straight through its {@code onFragment} (with an
 * Aeron {@link Header} over a hand-made data frame header, so no media driver is needed): well-formed
 * frames cut into chunks and fragments, the same frames with bytes flipped (header CRC resealed or
 * not), chunks skipped, repeated or swapped, fragments with wrong BEGIN/END flags, another job's
 * frames, and raw bytes, on three sessions, assembled into reassembly buffers or in place on a cpu
 * submesh of 1 MiB per device (so that large frames find no room). For every input:
 * <ul>
 *   <li>{@code onFragment} throws nothing (its contract: a bad frame is dropped and reported);</li>
 *   <li>every delivered frame's bytes have the CRC32C its header says, which is the CRC32C the sender
 *       wrote into the chunk that completed it, and its length is the header's;</li>
 *   <li>every frame in progress that ends without being delivered is reported as an error in the
 *       same call (not as another job's frame, not silently);</li>
 *   <li>after {@code releaseAll}, no tensor is left on the submesh.</li>
 * </ul>
 * A hang is caught by libFuzzer's per-input timeout (the parent pom's {@code ttpipe.fuzz.input.timeout}).
 */
class FrameAssemblerFuzzTest {
    static final long JOB = 7;
    static final int RANK = 1;
    static final int[] SESSIONS = {5, 6, 9};       // 9 is no rank's session: its frames say "from 5" or "from 6"
    static final long MAX_PAYLOAD = 4 << 20;
    static final MeshShape[] MESHES = {new MeshShape(1, 1), new MeshShape(1, 2), new MeshShape(2, 1), new MeshShape(2, 2)};

    private static final MeshDevice MESH_1X2 = CpuMeshDevice.open(new MeshShape(1, 2),
            MeshOptions.defaults().withThreads(1).withMemoryPerDevice(1 << 20));
    private static final MeshDevice MESH_1X1 = CpuMeshDevice.open(new MeshShape(1, 1),
            MeshOptions.defaults().withThreads(1).withMemoryPerDevice(1 << 20));
    private static final ReceiveBuffers BUFFERS = new ReceiveBuffers();

    @AfterAll
    static void close() {
        BUFFERS.close();
        MESH_1X2.close();
        MESH_1X1.close();
    }

    @FuzzTest
    void deliversOnlyFramesWhoseChecksumHoldsAndReportsEveryDrop(FuzzedDataProvider data) {
        Submesh submesh = switch (data.consumeInt(0, 2)) {
            case 0 -> null;
            case 1 -> MESH_1X2.asSubmesh();
            default -> MESH_1X1.asSubmesh();
        };
        Check check = new Check(submesh);
        FrameAssembler assembler = new FrameAssembler(RANK, () -> JOB, MAX_PAYLOAD, null, BUFFERS,
                session -> "session " + session, session -> true, check, submesh);
        check.assembler = assembler;
        long[] sequences = new long[SESSIONS.length];
        for (int messages = 0; messages < 48 && data.remainingBytes() > 0; ) {
            int s = data.consumeInt(0, SESSIONS.length - 1);
            int session = SESSIONS[s];
            if (data.consumeInt(0, 5) == 0) {
                send(check, assembler, data, session, data.consumeBytes(data.consumeInt(0, 300)));
                messages++;
            } else {
                int from = session == 9 ? 5 + data.consumeInt(0, 1) : session;
                for (UnsafeBuffer chunk : frame(data, from, sequences[s]++)) {
                    send(check, assembler, data, session, chunk.byteArray() != null ? chunk.byteArray() : bytes(chunk));
                    messages++;
                }
            }
        }
        assembler.releaseAll();
        for (TensorPayload p : check.delivered) p.discard();
        if (submesh != null) assertEquals(0, submesh.maxInUse(), "tensors left on the submesh after releaseAll");
    }

    // ---- what is sent ---------------------------------------------------------------------------------

    /** A well-formed frame's chunks, then perhaps one mutation: a byte flipped, a chunk skipped, repeated or swapped. */
    private static List<UnsafeBuffer> frame(FuzzedDataProvider data, int from, long sequence) {
        DType dtype = DType.values()[data.consumeInt(0, DType.values().length - 1)];
        int rank = data.consumeInt(0, 3);
        int[] dims = new int[rank];
        for (int i = 0; i < rank; i++) dims[i] = data.consumeInt(0, 12);
        Shape shape = Shape.of(dims);
        MeshShape mesh = MESHES[data.consumeInt(0, MESHES.length - 1)];
        Layout layout = new Layout(placement(data, rank), placement(data, rank));
        long length;
        try {
            long local = 1;
            for (int d : Sharding.localShape(shape, layout, mesh).toArray()) local *= d;
            length = local * dtype.bytes() * mesh.size();
        } catch (RuntimeException e) {                   // a shard dim the shape does not have
            length = data.consumeInt(0, 64);
        }
        if (data.consumeInt(0, 7) == 0) length = data.consumeInt(0, 600);   // a length that does not fit the shape
        byte[] payload = data.consumeBytes((int) length);
        payload = Arrays.copyOf(payload, (int) length);
        int chunkCount = data.consumeInt(1, 4);
        int[] cuts = new int[chunkCount + 1];
        cuts[chunkCount] = payload.length;
        for (int i = 1; i < chunkCount; i++) cuts[i] = data.consumeInt(cuts[i - 1], payload.length);
        TensorKind kind = data.consumeBoolean() ? TensorKind.ACTIVATION : TensorKind.GRADIENT;
        FrameHeader h = new FrameHeader(JOB, data.consumeInt(0, 3), 0, 1, data.consumeInt(0, 3), kind, dtype, shape,
                layout, 0, 0);
        long job = data.consumeInt(0, 15) == 0 ? JOB + 1 : JOB;
        int to = data.consumeInt(0, 15) == 0 ? RANK + 1 : RANK;
        List<UnsafeBuffer> chunks = new ArrayList<>(List.of(RawPublisher.chunks(job, sequence, from, to, h, mesh, payload, cuts)));
        switch (data.consumeInt(0, 9)) {
            case 0 -> {                                   // a byte flipped, the header CRC resealed or not
                UnsafeBuffer c = chunks.get(data.consumeInt(0, chunks.size() - 1));
                int at = data.consumeInt(0, c.capacity() - 1);
                c.putByte(at, (byte) (c.getByte(at) ^ (1 << data.consumeInt(0, 7))));
                if (data.consumeBoolean()) RawPublisher.seal(c);
            }
            case 1 -> {                                   // a header field set to any value, resealed
                UnsafeBuffer c = chunks.get(data.consumeInt(0, chunks.size() - 1));
                int at = data.consumeInt(0, FrameCodec.HEADER_CRC_OFFSET - 4);
                c.putInt(at, data.consumeInt(), ByteOrder.LITTLE_ENDIAN);
                RawPublisher.seal(c);
            }
            case 2 -> chunks.remove(data.consumeInt(0, chunks.size() - 1));
            case 3 -> chunks.add(data.consumeInt(0, chunks.size()), chunks.get(data.consumeInt(0, chunks.size() - 1)));
            case 4 -> Collections.swap(chunks, data.consumeInt(0, chunks.size() - 1),
                    data.consumeInt(0, chunks.size() - 1));
            case 5 -> chunks.subList(data.consumeInt(0, chunks.size()), chunks.size()).clear(); // cut short
            default -> {
            }
        }
        return chunks;
    }

    private static Placement placement(FuzzedDataProvider data, int rank) {
        int p = data.consumeInt(0, 3);
        if (p == 0 || rank == 0) return Placement.REPLICATE;
        if (p == 1) return Placement.PARTIAL;
        return Placement.shard(data.consumeInt(0, rank - 1));
    }

    private static byte[] bytes(UnsafeBuffer b) {
        byte[] out = new byte[b.capacity()];
        b.getBytes(0, out);
        return out;
    }

    /** One message as 1 to 3 fragments with BEGIN on the first and END on the last (now and then other flags). */
    private static void send(Check check, FrameAssembler assembler, FuzzedDataProvider data, int session, byte[] message) {
        int fragments = data.consumeInt(1, 3);
        boolean oddFlags = data.consumeInt(0, 15) == 0;
        int start = 0;
        for (int f = 0; f < fragments; f++) {
            int end = f == fragments - 1 ? message.length : data.consumeInt(start, message.length);
            byte flags = 0;
            if (f == 0) flags |= (byte) FrameDescriptor.BEGIN_FRAG_FLAG;
            if (f == fragments - 1) flags |= (byte) FrameDescriptor.END_FRAG_FLAG;
            if (oddFlags) flags = (byte) (data.consumeInt(0, 3) << 6);
            check.fragment(assembler, session, flags, message, start, end - start);
            start = end;
        }
    }

    // ---- what is checked ------------------------------------------------------------------------------

    /** The receiver: checks every delivery against the bytes and the sender's CRC, and that every drop is reported. */
    static final class Check implements TensorReceiver {
        private static final Field INBOUND = field(FrameAssembler.class, "inbound");
        private static final Field IN_FRAME = field(inboundClass(), "inFrame");
        private static final Field SEQUENCE = field(inboundClass(), "sequence");
        private static final Field BYTES = field(ReceivedFrame.class, "held");        // an AeronPayload's buffer

        final Submesh submesh;
        final List<TensorPayload> delivered = new ArrayList<>();
        final UnsafeBuffer termBuffer = new UnsafeBuffer(ByteBuffer.allocateDirect(64 << 10));
        final UnsafeBuffer aeronFrame = new UnsafeBuffer(ByteBuffer.allocateDirect(DataHeaderFlyweight.HEADER_LENGTH));
        final Header header = new Header(0, 16);
        FrameAssembler assembler;
        int session;
        int claimedCrc;           // the payload CRC in the header of the last chunk this session began
        boolean claimed;
        int errors;
        int deliveries;
        String lastReport = "none";

        Check(Submesh submesh) {
            this.submesh = submesh;
            header.buffer(aeronFrame);
            header.offset(0);
        }

        void fragment(FrameAssembler a, int session, byte flags, byte[] message, int offset, int length) {
            this.session = session;
            aeronFrame.putInt(DataHeaderFlyweight.SESSION_ID_FIELD_OFFSET, session, ByteOrder.LITTLE_ENDIAN);
            aeronFrame.putByte(DataHeaderFlyweight.FLAGS_FIELD_OFFSET, flags);
            if ((flags & FrameDescriptor.BEGIN_FRAG_FLAG) != 0) {
                claimed = length >= FrameCodec.LENGTH;
                if (claimed) claimedCrc = ByteBuffer.wrap(message, offset + FrameCodec.PAYLOAD_CRC_OFFSET, 4)
                        .order(ByteOrder.LITTLE_ENDIAN).getInt();
            }
            // Aeron hands over fragments inside its term buffer, at an offset: do the same.
            termBuffer.putBytes(64, message, offset, length);
            long before = frameInProgress(session);
            int errorsBefore = errors, deliveriesBefore = deliveries;
            try {
                a.onFragment(termBuffer, 64, length, header);
            } catch (Throwable t) {
                throw new AssertionError("onFragment threw " + t, t);
            }
            long after = frameInProgress(session);
            if (before >= 0 && after != before && deliveries == deliveriesBefore && errors == errorsBefore) {
                fail("frame " + before + " of session " + session + " was dropped without an error report; the last report: "
                        + lastReport);
            }
        }

        /** The sequence of the session's frame in progress, or -1. */
        long frameInProgress(int session) {
            try {
                Object in = ((Int2ObjectHashMap<?>) INBOUND.get(assembler)).get(session);
                return in != null && (boolean) IN_FRAME.get(in) ? (long) SEQUENCE.get(in) : -1;
            } catch (IllegalAccessException e) {
                throw new AssertionError(e);
            }
        }

        @Override
        public void onTensor(TensorPayload payload) {
            deliveries++;
            delivered.add(payload);
            FrameHeader h = payload.header();
            ByteBuffer bytes = bytesOf(payload);
            assertEquals(h.payloadBytes(), bytes.remaining(), "delivered bytes vs the header's length");
            CRC32C crc = new CRC32C();
            crc.update(bytes);
            assertEquals(h.checksum(), (int) crc.getValue(), "a delivered frame whose bytes do not have its checksum");
            assertTrue(claimed, "a frame was delivered without a chunk header");
            assertEquals(claimedCrc, h.checksum(), "a delivered frame whose checksum is not the sender's");
        }

        private ByteBuffer bytesOf(TensorPayload payload) {
            try {
                if (payload instanceof AeronPayload) return ((ByteBuffer) BYTES.get(payload)).duplicate();
            } catch (IllegalAccessException e) {
                throw new AssertionError(e);
            }
            Tensor t = payload.materialize(submesh);
            delivered.remove(payload);
            try (t) {
                int n = submesh.shape().size();
                ByteBuffer all = ByteBuffer.allocate((int) (t.bytesPerDevice() * n));
                for (int d = 0; d < n; d++) TensorBytes.copyPiece(t, d, all);
                return all.flip();
            }
        }

        @Override
        public void onError(String channel, String problem) {
            errors++;
            lastReport = problem;
            assertEquals("session " + session, channel);
            assertTrue(problem.contains("dropped"), problem);
            assertTrue(!problem.contains("\n"), problem);
        }

        @Override
        public void onForeignFrame(String channel, String problem) {
            lastReport = "(foreign) " + problem;
            assertEquals("session " + session, channel);
        }

        private static Class<?> inboundClass() {
            for (Class<?> c : FrameAssembler.class.getDeclaredClasses()) if (c.getSimpleName().equals("Inbound")) return c;
            throw new AssertionError("FrameAssembler.Inbound not found");
        }

        private static Field field(Class<?> c, String name) {
            try {
                Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f;
            } catch (NoSuchFieldException e) {
                throw new AssertionError(e);
            }
        }
    }
}

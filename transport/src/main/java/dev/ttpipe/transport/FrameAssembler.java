package dev.ttpipe.transport;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.spi.LayoutRules;
import dev.ttpipe.device.spi.LocalPieces;
import dev.ttpipe.device.spi.LocalPiecesOps;
import dev.ttpipe.device.spi.Sharding;
import io.aeron.Subscription;
import io.aeron.logbuffer.FragmentHandler;
import io.aeron.logbuffer.FrameDescriptor;
import io.aeron.logbuffer.Header;
import org.agrona.DirectBuffer;
import org.agrona.collections.Int2ObjectHashMap;
import org.agrona.concurrent.UnsafeBuffer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.function.IntFunction;
import java.util.function.IntPredicate;
import java.util.function.LongSupplier;
import java.util.zip.CRC32C;

/**
 * The receiving end for one local rank: polls its subscription and assembles the frames of every
 * sender (one Aeron session per sending rank), copying each fragment once, straight from Aeron's
 * term buffer, and checking the CRC32C over the bytes it has just written. Where the rank was bound
 * with its submesh and the backend's pieces are host memory ({@link LocalPiecesOps#allocateLocal},
 * {@link LocalPieces#writableView}: the cpu backend), a frame is assembled straight into a tensor
 * allocated on that submesh when its first chunk arrives, piece by piece (device 0's piece first; a
 * fragment may straddle two pieces), and goes to the {@link TensorReceiver} as an
 * {@link InPlacePayload}: the tensor itself. Otherwise (no submesh, another submesh shape, the sim
 * and ttnn backends) it is reassembled into a pooled direct buffer and goes as an
 * {@link AeronPayload}, copied onto the devices when materialized. Anything whose header, layout or
 * checksums do not hold, or that finds no room on the submesh, is dropped (its tensor closed, its
 * buffer given back) and reported through {@link TensorReceiver#onError} with the channel's name,
 * never delivered. Every frame dropped is counted by {@link DropReason} ({@link #dropped()}).
 * Each delivered payload says when its first chunk was taken (its place on the submesh or in a
 * buffer found) and when its last chunk made it whole ({@link TensorPayload#firstChunkNs},
 * {@link TensorPayload#lastChunkNs}): the time its bytes took on the link, which a SEND that only
 * queues them cannot see.
 *
 * <p>Fragments arrive in order within a session (Aeron's guarantee); the checks catch corruption,
 * foreign publishers and bugs. Once a frame is dropped, its remaining chunks are skipped silently.
 *
 * <p>Used only by the transport's receive thread, except {@link #bind}. The tensors of frames in
 * progress are the receive thread's; the transport is closed before the mesh they live on.
 */
final class FrameAssembler implements FragmentHandler {
    private static final Logger log = LoggerFactory.getLogger(FrameAssembler.class);
    private static final int FRAGMENT_LIMIT = 32;

    private final int rank;
    private final LongSupplier jobId;
    private final long maxPayload;
    private final Subscription subscription;
    private final ReceiveBuffers buffers;
    private final IntFunction<String> channelOfSession;
    private final IntPredicate isRankOfJob;
    /** Frames dropped, by {@link DropReason#ordinal()}: written by the receive thread, read by anyone. */
    private final AtomicLongArray dropped = new AtomicLongArray(DropReason.values().length);
    private volatile TensorReceiver receiver;
    private volatile Submesh submesh;

    private final Int2ObjectHashMap<Inbound> inbound = new Int2ObjectHashMap<>();
    private final UnsafeBuffer scratch = new UnsafeBuffer(ByteBuffer.allocateDirect(FrameCodec.LENGTH));
    private final ByteBuffer scratchBytes = scratch.byteBuffer().duplicate();
    private final CRC32C headerCrc = new CRC32C();
    private final FrameCodec codec = new FrameCodec().wrapForDecode(scratch, 0);

    /** One sender's frame in progress. */
    private static final class Inbound {
        final String channel;
        final CRC32C crc = new CRC32C();
        final UnsafeBuffer frameBytes = new UnsafeBuffer(new byte[FrameCodec.FRAME_END - FrameCodec.FRAME_START]);
        boolean inFrame;      // chunk 0 accepted, last chunk not yet
        boolean inChunk;      // between a chunk's first and last fragment
        boolean skipping;     // dropping fragments until the next message starts
        boolean resyncing;    // a frame was dropped: skip chunks until some frame's first chunk
        long sequence;
        FrameHeader header;
        MeshShape mesh;
        ByteBuffer bytes;     // the reassembly buffer, or null when assembling in place
        Tensor tensor;        // the tensor assembled in place, or null
        ByteBuffer[] views = new ByteBuffer[0]; // its pieces, writable
        int pieceLength;
        int payloadLength;
        int chunkCount;
        int nextChunk;
        int written;
        int chunkEnd;
        int chunkLength;
        int chunkCrc;
        long firstChunkNs;    // when chunk 0 arrived: the frame's time on the link starts there

        Inbound(String channel) {
            this.channel = channel;
        }
    }

    FrameAssembler(int rank, LongSupplier jobId, long maxPayload, Subscription subscription, ReceiveBuffers buffers,
                   IntFunction<String> channelOfSession, IntPredicate isRankOfJob, TensorReceiver receiver, Submesh submesh) {
        this.rank = rank;
        this.jobId = jobId;
        this.maxPayload = maxPayload;
        this.subscription = subscription;
        this.buffers = buffers;
        this.channelOfSession = channelOfSession;
        this.isRankOfJob = isRankOfJob;
        this.receiver = receiver;
        this.submesh = submesh;
    }

    /** Where later frames go, and which submesh they are assembled on (null: into reassembly buffers). */
    void bind(TensorReceiver r, Submesh s) {
        this.submesh = s;
        this.receiver = r;
    }

    /** Frames dropped so far, by reason (any thread). */
    DroppedFrames dropped() {
        return new DroppedFrames(dropped.get(DropReason.FOREIGN_JOB.ordinal()), dropped.get(DropReason.WRONG_PEER.ordinal()),
                dropped.get(DropReason.CORRUPT.ordinal()), dropped.get(DropReason.NO_ROOM.ordinal()));
    }

    int poll() {
        return subscription.poll(this, FRAGMENT_LIMIT);
    }

    @Override
    public void onFragment(DirectBuffer buffer, int offset, int length, Header aeronHeader) {
        int session = aeronHeader.sessionId();
        Inbound in = inbound.get(session);
        if (in == null) {
            in = new Inbound(channelOfSession.apply(session));
            inbound.put(session, in);
        }
        byte flags = aeronHeader.flags();
        if ((flags & FrameDescriptor.BEGIN_FRAG_FLAG) != 0) {
            beginChunk(in, session, buffer, offset, length);
        } else if (in.inChunk) {
            appendFragment(in, buffer, offset, length);
        } else if (!in.skipping) {
            drop(in, DropReason.CORRUPT, "a fragment arrived outside any chunk");
        }
        if ((flags & FrameDescriptor.END_FRAG_FLAG) != 0) {
            if (in.inChunk) endChunk(in);
            in.skipping = false;
        }
    }

    // ---- chunk start: the header ---------------------------------------------------------------------

    private void beginChunk(Inbound in, int session, DirectBuffer buffer, int offset, int length) {
        in.skipping = false;
        if (in.inChunk) {
            drop(in, DropReason.CORRUPT, "chunk " + (in.nextChunk) + " of " + in.chunkCount + " ended before its last fragment");
            in.skipping = false;
        }
        if (length < FrameCodec.LENGTH) {
            drop(in, DropReason.CORRUPT, "a message of " + length + " bytes is shorter than the " + FrameCodec.LENGTH + "-byte frame header");
            return;
        }
        buffer.getBytes(offset, scratch, 0, FrameCodec.LENGTH);
        String problem = checkIntegrity();
        if (problem != null) {
            drop(in, DropReason.CORRUPT, problem);
            return;
        }
        long sequence = codec.sequence();
        int index = codec.chunkIndex();
        if (index != 0 && in.resyncing) {
            in.skipping = true; // the rest of a frame already dropped and reported
            return;
        }
        if (codec.jobId() != jobId.getAsLong()) {
            // Another job's frame, usually one sent before a recovery gave this job a fresh id: expected, not an error.
            String foreign = "frame of job " + Long.toHexString(codec.jobId()) + " on the transport of job "
                    + Long.toHexString(jobId.getAsLong());
            // But a frame of this job that it cuts short will never come: that is an error.
            if (in.inFrame) {
                drop(in, DropReason.CORRUPT, "a " + foreign + " arrived after " + in.nextChunk + " of its " + in.chunkCount + " chunks");
            }
            drop(in, DropReason.FOREIGN_JOB, foreign);
            return;
        }
        problem = checkPeer(session);
        if (problem != null) {
            drop(in, DropReason.WRONG_PEER, problem);
            return;
        }
        problem = checkChunkIndex();
        if (problem != null) {
            drop(in, DropReason.CORRUPT, problem);
            return;
        }
        if (index == 0) {
            if (in.inFrame) {
                drop(in, DropReason.CORRUPT, "frame " + in.sequence + " ended after " + in.nextChunk + " of " + in.chunkCount
                        + " chunks: frame " + sequence + " began");
            }
            in.skipping = false;
            problem = startFrame(in);
            if (problem != null) {
                drop(in, DropReason.CORRUPT, "frame " + sequence + ": " + problem);
                return;
            }
            problem = placeFrame(in);
            if (problem != null) {
                drop(in, DropReason.NO_ROOM, "frame " + sequence + ": " + problem);
                return;
            }
            in.firstChunkNs = System.nanoTime();
            in.resyncing = false;
        } else if (!in.inFrame || sequence != in.sequence) {
            drop(in, DropReason.CORRUPT, "chunk " + index + " of frame " + sequence + " arrived without the frame's first chunk");
            return;
        } else if (!sameFrame(in)) {
            drop(in, DropReason.CORRUPT, "chunk " + index + " of frame " + sequence + " changes the frame's header");
            return;
        } else if (index != in.nextChunk) {
            drop(in, DropReason.CORRUPT, "chunk " + index + " of frame " + sequence + " out of order, expected chunk " + in.nextChunk);
            return;
        }
        int chunkLength = codec.chunkLength();
        long chunkOffset = codec.chunkOffset();
        if (chunkLength < 0 || chunkOffset != in.written || chunkOffset + chunkLength > in.payloadLength) {
            drop(in, DropReason.CORRUPT, "chunk " + index + " of " + in.chunkCount + " says bytes [" + chunkOffset + ", "
                    + (chunkOffset + chunkLength) + ") of " + in.payloadLength + ", expected it to start at " + in.written);
            return;
        }
        in.inChunk = true;
        in.chunkEnd = in.written + chunkLength;
        in.chunkLength = chunkLength;
        in.chunkCrc = codec.payloadCrc();
        appendFragment(in, buffer, offset + FrameCodec.LENGTH, length - FrameCodec.LENGTH);
    }

    /** Whether the bytes are a ttpipe chunk header at all, intact; null if so. */
    private String checkIntegrity() {
        if (codec.magic() != FrameCodec.MAGIC) {
            return String.format("bad magic 0x%08x, not a ttpipe frame", codec.magic());
        }
        if (codec.version() != FrameCodec.VERSION || codec.headerLength() != FrameCodec.LENGTH) {
            return "frame version " + codec.version() + " with a " + codec.headerLength() + "-byte header, expected version "
                    + FrameCodec.VERSION + " with " + FrameCodec.LENGTH;
        }
        headerCrc.reset();
        scratchBytes.limit(FrameCodec.HEADER_CRC_OFFSET).position(0);
        headerCrc.update(scratchBytes);
        if ((int) headerCrc.getValue() != codec.headerCrc()) {
            return String.format("header checksum mismatch: CRC32C 0x%08x, the header says 0x%08x",
                    (int) headerCrc.getValue(), codec.headerCrc());
        }
        return null;
    }

    /** Whether the chunk is for this rank, from the rank whose stream session it came on, a rank of the job; null if so. */
    private String checkPeer(int session) {
        if (codec.toRank() != rank) return "frame for rank " + codec.toRank() + " arrived at rank " + rank;
        int from = AeronTransport.rankOfSession(session);
        if (codec.fromRank() != from) {
            return "frame says it comes from rank " + codec.fromRank() + ", its stream session " + session
                    + (from < 0 ? " is no rank's" : " is rank " + from + "'s");
        }
        if (!isRankOfJob.test(from)) return "frame from stream session " + session + ", which is no rank of this job";
        return null;
    }

    /** Whether the chunk's index is in range; null if so. */
    private String checkChunkIndex() {
        int count = codec.chunkCount();
        int index = codec.chunkIndex();
        if (count < 1 || index < 0 || index >= count) return "chunk index " + index + " of " + count + " chunks";
        return null;
    }

    /** Checks the frame part of chunk 0's header and prepares the reassembly buffer; null if all is well. */
    private String startFrame(Inbound in) {
        if (codec.chunkOffset() != 0) return "chunk 0 starts at payload offset " + codec.chunkOffset();
        if (codec.kindCode() < 0 || codec.kindCode() >= TensorKind.values().length) {
            return "unknown tensor kind " + codec.kindCode();
        }
        if (codec.dtypeCode() < 0 || codec.dtypeCode() >= DType.values().length) return "unknown dtype " + codec.dtypeCode();
        int rankOfShape = codec.rank();
        if (rankOfShape < 0 || rankOfShape > FrameCodec.MAX_RANK) {
            return "shape of rank " + rankOfShape + ", frames carry 0 to " + FrameCodec.MAX_RANK + " dims";
        }
        int[] dims = new int[rankOfShape];
        for (int i = 0; i < rankOfShape; i++) {
            dims[i] = codec.dim(i);
            if (dims[i] < 0) return "negative dimension " + dims[i] + " in the shape";
        }
        if (!codec.validPlacement(0) || !codec.validPlacement(1)) {
            return "unknown layout codes (" + codec.placementCode(0) + ", " + codec.shardDim(0) + "), ("
                    + codec.placementCode(1) + ", " + codec.shardDim(1) + ") for a shape of rank " + rankOfShape;
        }
        if (codec.meshRows() < 1 || codec.meshCols() < 1) {
            return "sender submesh [" + codec.meshRows() + ", " + codec.meshCols() + "]";
        }
        DType dtype = DType.values()[codec.dtypeCode()];
        Shape shape = Shape.of(dims);
        MeshShape mesh = new MeshShape(codec.meshRows(), codec.meshCols());
        Layout layout;
        try {
            layout = LayoutRules.normalize("frame", shape, new Layout(codec.placement(0), codec.placement(1)), mesh);
        } catch (DeviceException e) {
            return "layout does not fit: " + e.getMessage();
        }
        if (dtype == DType.INT32 && layout.hasPartial()) return "INT32 tensor with a Partial layout " + layout;
        long expected;
        try {
            long local = 1;
            for (int d : Sharding.localShape(shape, layout, mesh).toArray()) local = Math.multiplyExact(local, d);
            expected = Math.multiplyExact(Math.multiplyExact(local, dtype.bytes()), mesh.size());
        } catch (ArithmeticException e) {
            return "shape " + shape + " is too large";
        }
        long length = codec.payloadLength();
        if (length != expected) {
            return "payload of " + length + " bytes, but " + dtype + shape + " with layout " + layout + " on a " + mesh
                    + " submesh is " + expected;
        }
        if (length > maxPayload) return "payload of " + length + " bytes exceeds the limit of " + maxPayload;
        int count = codec.chunkCount();
        if (count > Math.max(1, length)) return count + " chunks for a payload of " + length + " bytes";

        TensorKind kind = TensorKind.of(codec.kindCode());
        in.header = new FrameHeader(codec.jobId(), codec.pass(), codec.fromStage(), codec.toStage(),
                codec.microbatch(), kind, dtype, shape, layout, length, 0);
        in.mesh = mesh;
        in.sequence = codec.sequence();
        in.payloadLength = (int) length;
        in.chunkCount = count;
        in.nextChunk = 0;
        in.written = 0;
        in.crc.reset();
        return null;
    }

    /**
     * Where the frame checked by {@link #startFrame} is assembled: a tensor on the bound submesh, or
     * a reassembly buffer; null when there is one, else why not (no room on the submesh).
     */
    private String placeFrame(Inbound in) {
        Submesh target = submesh;
        if (target != null && in.mesh.equals(target.shape())) {
            try {
                in.tensor = allocateInPlace(in, target, in.header, in.payloadLength);
            } catch (RuntimeException | OutOfMemoryError e) { // out of device (or native) memory, a closed mesh
                return in.header + " does not fit on rank " + rank + "'s " + target.describe() + ": " + e.getMessage();
            }
        }
        if (in.tensor == null) {
            try {
                in.bytes = buffers.acquire(in.payloadLength);
            } catch (OutOfMemoryError e) { // direct memory (-XX:MaxDirectMemorySize) exhausted: drop the frame, fail the step
                return in.header + " (" + in.payloadLength + " bytes) does not fit in rank " + rank
                        + "'s receive buffers: " + e.getMessage() + " (raise -XX:MaxDirectMemorySize through TTPIPE_JAVA_OPTS)";
            }
        }
        scratch.getBytes(FrameCodec.FRAME_START, in.frameBytes, 0, in.frameBytes.capacity());
        in.inFrame = true;
        return null;
    }

    /**
     * The tensor on {@code target} that the frame is assembled into, with a writable view of each
     * piece in {@code in.views}; null where the backend cannot write its pieces in place.
     */
    private static Tensor allocateInPlace(Inbound in, Submesh target, FrameHeader h, long length) {
        if (!(target.ops() instanceof LocalPiecesOps raw)) return null;
        Tensor t = raw.allocateLocal(h.shape(), h.layout(), h.dtype());
        if (t == null) return null;
        try {
            int n = target.shape().size();
            if (!(t instanceof LocalPieces pieces) || t.bytesPerDevice() * n != length) {
                t.close();
                return null;
            }
            if (in.views.length != n) in.views = new ByteBuffer[n];
            for (int d = 0; d < n; d++) {
                ByteBuffer v = pieces.writableView(d);
                if (v == null) {
                    t.close();
                    return null;
                }
                in.views[d] = v;
            }
            in.pieceLength = (int) t.bytesPerDevice();
            return t;
        } catch (RuntimeException e) {
            t.close();
            throw e;
        }
    }

    private boolean sameFrame(Inbound in) {
        int n = in.frameBytes.capacity();
        for (int i = 0; i < n; i += 8) {
            if (scratch.getLong(FrameCodec.FRAME_START + i) != in.frameBytes.getLong(i)) return false;
        }
        return true;
    }

    // ---- payload bytes ------------------------------------------------------------------------------

    private void appendFragment(Inbound in, DirectBuffer buffer, int offset, int length) {
        if (in.written + length > in.chunkEnd) {
            drop(in, DropReason.CORRUPT, "chunk " + in.nextChunk + " carries more than the " + in.chunkLength + " bytes its header says");
            in.skipping = true;
            return;
        }
        if (length == 0) return;
        int at = in.written;
        if (in.tensor == null) {
            copyIn(in, in.bytes, at, buffer, offset, length);
        } else {
            int d = at / in.pieceLength;
            int off = at - d * in.pieceLength;
            if (off + length <= in.pieceLength) {
                copyIn(in, in.views[d], off, buffer, offset, length);
            } else {
                copyAcrossPieces(in, d, off, buffer, offset, length);
            }
        }
        in.written = at + length;
    }

    /** Copies a fragment's bytes to {@code dst} at {@code at}, then checksums them there (while in cache). */
    private static void copyIn(Inbound in, ByteBuffer dst, int at, DirectBuffer buffer, int offset, int length) {
        buffer.getBytes(offset, dst, at, length);
        dst.limit(at + length).position(at);
        in.crc.update(dst);
    }

    /** A fragment that straddles the end of device {@code d}'s piece: each part into its own piece. */
    private static void copyAcrossPieces(Inbound in, int d, int off, DirectBuffer buffer, int offset, int length) {
        while (length > 0) {
            int n = Math.min(length, in.pieceLength - off);
            copyIn(in, in.views[d], off, buffer, offset, n);
            offset += n;
            length -= n;
            d++;
            off = 0;
        }
    }

    private void endChunk(Inbound in) {
        in.inChunk = false;
        int index = in.nextChunk;
        if (in.written != in.chunkEnd) {
            drop(in, DropReason.CORRUPT, "chunk " + index + " of " + in.chunkCount + " ended " + (in.chunkEnd - in.written)
                    + " bytes short of its length");
            return;
        }
        if ((int) in.crc.getValue() != in.chunkCrc) {
            drop(in, DropReason.CORRUPT, String.format("checksum mismatch in chunk %d of %d: payload CRC32C 0x%08x, the header says 0x%08x",
                    index, in.chunkCount, (int) in.crc.getValue(), in.chunkCrc));
            return;
        }
        in.nextChunk++;
        boolean last = in.nextChunk == in.chunkCount;
        if (last != (in.written == in.payloadLength)) {
            drop(in, DropReason.CORRUPT, "after chunk " + index + " of " + in.chunkCount + ", " + in.written + " of " + in.payloadLength
                    + " payload bytes arrived");
            return;
        }
        if (last) deliver(in);
    }

    private void deliver(Inbound in) {
        long lastChunkNs = System.nanoTime();
        FrameHeader h = in.header.withPayload(in.payloadLength, (int) in.crc.getValue());
        TensorPayload payload;
        if (in.tensor != null) {
            payload = new InPlacePayload(h, in.channel, in.tensor, in.firstChunkNs, lastChunkNs);
            in.tensor = null;
            Arrays.fill(in.views, null);
        } else {
            ByteBuffer bytes = in.bytes;
            bytes.limit(in.payloadLength).position(0);
            payload = new AeronPayload(h, in.mesh, in.channel, bytes, buffers, in.firstChunkNs, lastChunkNs);
            in.bytes = null;
        }
        in.header = null;
        in.inFrame = false;
        try {
            receiver.onTensor(payload);
        } catch (RuntimeException e) {
            log.warn("{}: the receiver of rank {} threw on {}", in.channel, rank, h, e);
        }
    }

    /**
     * Drops the frame in progress (if any) and what is left of the current message, counts it and
     * reports why: another job's frame to {@link TensorReceiver#onForeignFrame}, anything else to
     * {@link TensorReceiver#onError}.
     */
    private void drop(Inbound in, DropReason reason, String problem) {
        dropped.incrementAndGet(reason.ordinal());
        String what = in.inFrame && in.header != null ? "frame " + in.sequence + " (" + in.header.action() + ": " + in.header + ")" : "frame";
        in.resyncing = true;
        release(in);
        in.header = null;
        in.inFrame = false;
        in.inChunk = false;
        in.skipping = true;
        try {
            if (reason == DropReason.FOREIGN_JOB) receiver.onForeignFrame(in.channel, what + " dropped: " + problem);
            else receiver.onError(in.channel, what + " dropped: " + problem);
        } catch (RuntimeException e) {
            log.warn("{}: the receiver of rank {} threw on an error report", in.channel, rank, e);
        }
    }

    /** Closes the tensor or gives back the buffer of the frame in progress, if any. */
    private void release(Inbound in) {
        buffers.release(in.bytes);
        in.bytes = null;
        Tensor t = in.tensor;
        in.tensor = null;
        Arrays.fill(in.views, null);
        if (t != null) {
            try {
                t.close();
            } catch (RuntimeException e) {
                log.warn("{}: closing the tensor of a dropped frame failed", in.channel, e);
            }
        }
    }

    /** Closes the tensors and gives back the buffers of frames in progress (the receive thread has stopped). */
    void releaseAll() {
        for (Inbound in : inbound.values()) release(in);
        inbound.clear();
    }
}

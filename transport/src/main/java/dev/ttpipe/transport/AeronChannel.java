package dev.ttpipe.transport;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import io.aeron.ExclusivePublication;
import io.aeron.Publication;
import io.aeron.logbuffer.BufferClaim;
import org.agrona.CloseHelper;
import org.agrona.DirectBuffer;
import org.agrona.MutableDirectBuffer;
import org.agrona.concurrent.BackoffIdleStrategy;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.UnsafeBuffer;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;
import java.util.zip.CRC32C;

/**
 * The sending end of one Aeron channel, rank {@code from} to rank {@code to}: an exclusive
 * publication and a thread of its own that takes queued sends in order, cuts each tensor into
 * chunks and publishes them. The caller (an actor) never waits: {@link #send} queues and returns.
 *
 * <p>The payload is read where it lies: the tensor's own memory where the backend has a host view
 * ({@link dev.ttpipe.device.spi.LocalPieces#hostView}), else a staging copy. By default a chunk fills
 * one MTU and is written with {@code tryClaim}: the payload is copied straight into the term buffer,
 * its CRC32C taken from the source bytes that copy just brought into cache, the header written in
 * front, and the claim committed, so the one copy on this side is the one into the term. Chunks
 * larger than an MTU (a configured chunk size) go out as a two-buffer {@code offer} of the header and
 * an {@link UnsafeBuffer} over the source, Aeron fragmenting them. Back-pressure and admin actions are
 * retried with a backoff idle strategy (spin, yield, then park up to 100 us); a receiver that is not
 * connected is waited for up to the connect timeout.
 *
 * <p>{@link #send} is thread-safe; everything else runs on the channel's thread, which owns the
 * queued tensors and closes each once it is published (or has failed).
 */
final class AeronChannel implements TensorChannel {
    private final String name;
    private final int from;
    private final int to;
    private final LongSupplier jobId;
    private final ExclusivePublication publication;
    private final long connectTimeoutNs;
    private final int maxChunk;
    private final boolean claimChunks;
    private final BlockingQueue<Send> queue = new LinkedBlockingQueue<>();
    private final Thread thread;
    private final FrameFault fault;
    private final Runnable onClose;
    private volatile boolean closing;

    // the channel thread's own state
    private final UnsafeBuffer header = new UnsafeBuffer(ByteBuffer.allocateDirect(FrameCodec.LENGTH));
    private final ByteBuffer headerBytes = header.byteBuffer().duplicate();
    private final FrameCodec codec = new FrameCodec();
    private final CRC32C payloadCrc = new CRC32C();
    private final CRC32C headerCrc = new CRC32C();
    private final UnsafeBuffer source = new UnsafeBuffer(0, 0);
    private final BufferClaim claim = new BufferClaim();
    private final IdleStrategy idle = new BackoffIdleStrategy(10, 20, 1_000, 100_000);
    private ByteBuffer staging = ReceiveBuffers.EMPTY;
    private long sequence;

    private final AtomicLong backPressured = new AtomicLong();

    private record Send(FrameHeader header, Tensor tensor, CompletableFuture<Void> done) {
    }

    AeronChannel(String name, int from, int to, LongSupplier jobId, ExclusivePublication publication, long connectTimeoutNs,
                 int maxChunkBytes, FrameFault fault, Runnable onClose) {
        this.name = name;
        this.from = from;
        this.to = to;
        this.jobId = jobId;
        this.publication = publication;
        this.connectTimeoutNs = connectTimeoutNs;
        int mtuChunk = publication.maxPayloadLength() - FrameCodec.LENGTH;
        this.maxChunk = maxChunkBytes == 0 ? mtuChunk
                : Math.min(maxChunkBytes, publication.maxMessageLength() - FrameCodec.LENGTH);
        this.claimChunks = maxChunk <= mtuChunk;
        this.fault = fault;
        this.onClose = onClose;
        this.thread = new Thread(this::run, "ttpipe-aeron-send-" + from + "-" + to);
        thread.setDaemon(true);
        thread.start();
    }

    @Override
    public String name() {
        return name;
    }

    /** Payload bytes per chunk (the last chunk of each device's piece may be shorter). */
    int maxChunk() {
        return maxChunk;
    }

    /** Offers that were refused for back-pressure (each retried). */
    long backPressured() {
        return backPressured.get();
    }

    @Override
    public CompletableFuture<Void> send(FrameHeader h, Tensor tensor) {
        if (h == null || tensor == null) {
            if (tensor != null) tensor.close();
            return CompletableFuture.failedFuture(new TransportException(name + ": send needs a header and a tensor"));
        }
        long job = jobId.getAsLong();
        if (h.jobId() != job) {
            tensor.close();
            return CompletableFuture.failedFuture(new TransportException(name + ": " + h + " belongs to job "
                    + Long.toHexString(h.jobId()) + ", this transport carries job " + Long.toHexString(job)));
        }
        CompletableFuture<Void> done = new CompletableFuture<>();
        queue.add(new Send(h, tensor, done));
        if (closing) failQueued();
        return done;
    }

    @Override
    public void close() {
        if (closing) return;
        closing = true;
        thread.interrupt();
        try {
            thread.join(TimeUnit.SECONDS.toMillis(10));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        failQueued();
        CloseHelper.quietClose(publication);
        onClose.run();
    }

    private void failQueued() {
        for (Send s; (s = queue.poll()) != null; ) {
            s.tensor().close();
            s.done().completeExceptionally(new TransportException(name + ": closed before " + s.header() + " was sent"));
        }
    }

    // ---- the channel thread --------------------------------------------------------------------------

    private void run() {
        while (!closing) {
            Send s;
            try {
                s = queue.take();
            } catch (InterruptedException e) {
                continue; // closing
            }
            try {
                transmit(s.header(), s.tensor());
                s.tensor().close();
                s.done().complete(null);
            } catch (RuntimeException | Error e) {
                s.tensor().close();
                s.done().completeExceptionally(e instanceof TransportException ? e
                        : new TransportException(name + ": " + s.header() + " not sent: " + e.getMessage(), e));
            }
        }
    }

    private void transmit(FrameHeader h, Tensor t) {
        Shape shape = t.shape();
        DType dtype = t.dtype();
        Layout layout = t.layout();
        MeshShape mesh = t.submesh().shape();
        if (shape.rank() > FrameCodec.MAX_RANK) {
            throw new TransportException(name + ": " + h + " has " + shape.rank() + " dims, frames carry at most "
                    + FrameCodec.MAX_RANK);
        }
        int devices = mesh.size();
        long piece = t.bytesPerDevice();
        long total = piece * devices;
        if (total > AeronTransport.MAX_PAYLOAD) {
            throw new TransportException(name + ": " + h + " is " + total + " bytes, a frame carries at most "
                    + AeronTransport.MAX_PAYLOAD + "; shard it over more devices or send it in parts");
        }
        int chunksPerPiece = (int) ((piece + maxChunk - 1) / maxChunk);
        int chunkCount = total == 0 ? 1 : devices * chunksPerPiece;
        // The job the frame was queued under, never the transport's current one: a frame of a step abandoned by a
        // recovery, still queued when the job took a fresh id, must reach the receiver as the old job's (dropped
        // there), not pass for a frame of the step that redoes it.
        codec.wrapForEncode(header, 0).encodeFrame(h.jobId(), sequence++, from, to, h, dtype, shape, layout, mesh, total,
                chunkCount);
        payloadCrc.reset();
        if (total == 0) {
            offer(h, 0, 0, null, 0, 0);
            return;
        }
        int index = 0;
        for (int d = 0; d < devices; d++) {
            ByteBuffer bytes = pieceBytes(t, d, (int) piece);
            source.wrap(bytes);
            for (int off = 0; off < piece; off += maxChunk) {
                int len = (int) Math.min(maxChunk, piece - off);
                if (claimChunks) {
                    claim(h, index++, d * piece + off, bytes, off, len);
                } else {
                    bytes.limit(off + len).position(off);
                    payloadCrc.update(bytes);
                    offer(h, index++, d * piece + off, source, off, len);
                }
            }
        }
    }

    /** Device {@code d}'s piece: the tensor's memory itself where it has a host view, else a copy in the staging buffer. */
    private ByteBuffer pieceBytes(Tensor t, int d, int length) {
        ByteBuffer view = TensorBytes.hostView(t, d);
        if (view != null) return view;
        if (staging.capacity() < length) {
            staging = ByteBuffer.allocateDirect(Math.max(length, 2 * staging.capacity())).order(ByteOrder.LITTLE_ENDIAN);
        }
        staging.clear();
        TensorBytes.copyPiece(t, d, staging);
        return staging.flip();
    }

    /**
     * One chunk that fits an MTU: claims header plus payload in the term, copies the payload in,
     * takes the checksum over the source bytes the copy just brought into cache, then writes the
     * header and commits. (The checksum is read from cache rather than from memory: the cheaper order.)
     */
    private void claim(FrameHeader h, int index, long payloadOffset, ByteBuffer bytes, int off, int len) {
        long notConnectedSince = 0;
        long result;
        while ((result = publication.tryClaim(FrameCodec.LENGTH + len, claim)) < 0) {
            notConnectedSince = backOff(result, h, notConnectedSince);
        }
        idle.reset();
        try {
            MutableDirectBuffer term = claim.buffer();
            int at = claim.offset();
            term.putBytes(at + FrameCodec.LENGTH, source, off, len);
            bytes.limit(off + len).position(off);
            payloadCrc.update(bytes);
            sealHeader(index, payloadOffset, len);
            term.putBytes(at, header, 0, FrameCodec.LENGTH);
            if (index == 0 && len > 0 && fault.corrupt(h)) {     // the first chunk, after its checksum
                term.putByte(at + FrameCodec.LENGTH, (byte) (term.getByte(at + FrameCodec.LENGTH) ^ 0x40));   // after the checksum
            }
            claim.commit();
        } catch (RuntimeException | Error e) {
            claim.abort();
            throw e;
        }
    }

    /** One chunk larger than an MTU: header and payload in one two-buffer offer, the checksum taken before. */
    private void offer(FrameHeader h, int index, long payloadOffset, DirectBuffer src, int off, int len) {
        sealHeader(index, payloadOffset, len);
        long notConnectedSince = 0;
        long result;
        while ((result = len == 0 ? publication.offer(header, 0, FrameCodec.LENGTH)
                : publication.offer(header, 0, FrameCodec.LENGTH, src, off, len)) < 0) {
            notConnectedSince = backOff(result, h, notConnectedSince);
        }
        idle.reset();
    }

    private void sealHeader(int index, long payloadOffset, int len) {
        codec.encodeChunk(index, payloadOffset, len, (int) payloadCrc.getValue());
        headerCrc.reset();
        headerBytes.limit(FrameCodec.HEADER_CRC_OFFSET).position(0);
        headerCrc.update(headerBytes);
        codec.encodeHeaderCrc((int) headerCrc.getValue());
    }

    /**
     * After a refused offer or claim: fails on what will not pass (closed, no receiver for longer than
     * the connect timeout), else idles before the retry. Returns when the channel was first seen not
     * connected (0 while it is).
     */
    private long backOff(long result, FrameHeader h, long notConnectedSince) {
        if (closing) throw new TransportException(name + ": closed while sending " + h);
        long since = 0;
        if (result == Publication.NOT_CONNECTED) {
            long now = System.nanoTime();
            since = notConnectedSince == 0 ? now : notConnectedSince;
            if (now - since > connectTimeoutNs) throw notConnected(h);
        } else if (result == Publication.BACK_PRESSURED) {
            backPressured.incrementAndGet();
        } else if (result == Publication.CLOSED) {
            throw new TransportException(name + ": publication closed while sending " + h);
        } else if (result == Publication.MAX_POSITION_EXCEEDED) {
            throw new TransportException(name + ": stream position limit reached while sending " + h
                    + "; reopen the channel");
        }
        idle.idle(); // BACK_PRESSURED, ADMIN_ACTION, NOT_CONNECTED: try again
        return since;
    }

    private TransportException notConnected(FrameHeader h) {
        return new TransportException(name + ": no receiver connected within "
                + TimeUnit.NANOSECONDS.toMillis(connectTimeoutNs) / 1000.0 + " s, " + h + " not sent (is rank " + to
                + " bound, and its process running?)");
    }

    @Override
    public String toString() {
        return name;
    }
}

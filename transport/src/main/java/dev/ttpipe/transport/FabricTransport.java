package dev.ttpipe.transport;

import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshSocket;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The fabric transport ({@code socket_type: fabric}): tensors go device to device between the
 * ranks' submeshes of one mesh over the mesh's sockets ({@link MeshDevice#openSocket}: TTNN
 * MeshSocket on hardware, copies between emulated devices on the cpu backend and the reference
 * bridge). Nothing passes through the host.
 *
 * <p>A send copies the tensor onto the destination rank's submesh through the channel's socket,
 * closes the sender's tensor (the channel took it) and hands the receiver a payload; the payload's
 * {@link TensorPayload#materialize} takes that tensor off the socket on the receiving stage's own
 * thread and returns it, already on the destination submesh. Payloads of one channel may be
 * materialized (or discarded) in any order: what the socket delivers ahead of the one asked for
 * waits, on the destination devices, until its payload asks; a discard frees its tensor at once.
 * Thread-safe; one socket per channel.
 */
public final class FabricTransport implements Transport {
    /** How long a materialize waits for a tensor whose send has already completed. */
    private static final long ARRIVAL_TIMEOUT_MILLIS = 30_000;

    private final MeshDevice mesh;
    private final Map<Integer, Submesh> submeshOfRank;
    private final Map<Integer, TensorReceiver> receivers = new ConcurrentHashMap<>();
    private final Map<Long, Channel> channels = new ConcurrentHashMap<>();
    private volatile boolean closed;

    /**
     * @param mesh          the mesh all ranks' submeshes belong to
     * @param submeshOfRank the submesh each rank runs on (all of the same shape, as sockets pair
     *                      device i with device i)
     */
    public FabricTransport(MeshDevice mesh, Map<Integer, Submesh> submeshOfRank) {
        if (mesh == null || submeshOfRank == null) throw new IllegalArgumentException("fabric transport: mesh and submeshes are required");
        for (Map.Entry<Integer, Submesh> e : submeshOfRank.entrySet()) {
            if (e.getValue() == null || e.getValue().mesh() != mesh) {
                throw new IllegalArgumentException("fabric transport: rank " + e.getKey() + "'s submesh "
                        + (e.getValue() == null ? "is missing" : e.getValue() + " is not on " + mesh.backend() + " mesh "
                        + mesh.shape()));
            }
        }
        this.mesh = mesh;
        this.submeshOfRank = Map.copyOf(submeshOfRank);
    }

    @Override
    public String name() {
        return "fabric";
    }

    @Override
    public void bind(int rank, TensorReceiver receiver) {
        receivers.put(rank, receiver);
    }

    @Override
    public TensorChannel channel(int fromRank, int toRank) {
        if (closed) throw new IllegalStateException("fabric transport is closed");
        return channels.computeIfAbsent(((long) fromRank << 32) | (toRank & 0xffffffffL),
                k -> new Channel(fromRank, toRank, submesh(fromRank), submesh(toRank)));
    }

    private Submesh submesh(int rank) {
        Submesh s = submeshOfRank.get(rank);
        if (s == null) {
            throw new IllegalArgumentException("fabric transport: rank " + rank + " has no submesh (ranks "
                    + new TreeMap<>(submeshOfRank).keySet() + ")");
        }
        return s;
    }

    /** Closes every channel's socket; tensors sent but never materialized are freed. */
    @Override
    public void close() {
        closed = true;
        for (Channel c : channels.values()) c.close();
        channels.clear();
        receivers.clear();
    }

    private final class Channel implements TensorChannel {
        private final int to;
        private final Submesh src;
        private final String name;
        private final MeshSocket socket;
        private final Object sendLock = new Object();
        private final Object receiveLock = new Object();
        private long sent;                                          // guarded by sendLock
        private long received;                                      // guarded by receiveLock
        private final Map<Long, Tensor> arrived = new HashMap<>();  // guarded by receiveLock

        Channel(int from, int to, Submesh src, Submesh dst) {
            this.to = to;
            this.src = src;
            this.name = "fabric " + from + "->" + to;
            this.socket = mesh.openSocket(src, dst);
        }

        @Override
        public String name() {
            return name;
        }

        @Override
        public CompletableFuture<Void> send(FrameHeader header, Tensor tensor) {
            try (tensor) {
                TensorReceiver r = receivers.get(to);
                if (closed) return CompletableFuture.failedFuture(new IllegalStateException(name + ": transport is closed"));
                if (r == null) {
                    return CompletableFuture.failedFuture(new IllegalStateException(name + ": no receiver bound for rank " + to));
                }
                if (tensor.submesh() != src) {
                    return CompletableFuture.failedFuture(new DeviceException(name + ": " + header + " lives on "
                            + tensor.submesh().describe() + ", the channel sends from " + src.describe()));
                }
                long seq;
                synchronized (sendLock) {
                    socket.send(tensor);
                    seq = sent++;
                }
                r.onTensor(new Arrival(header, this, seq));
                return CompletableFuture.completedFuture(null);
            } catch (RuntimeException e) {
                return CompletableFuture.failedFuture(e);
            }
        }

        /** Tensor number {@code seq} of this channel, off the socket (later ones it passes wait for their payloads). */
        Tensor take(long seq) {
            synchronized (receiveLock) {
                while (!arrived.containsKey(seq)) {
                    if (seq < received) throw new IllegalStateException(name + ": tensor " + seq + " was already taken");
                    arrived.put(received, recv());
                    received++;
                }
                return arrived.remove(seq);
            }
        }

        /** Frees tensor number {@code seq} at once (taking it, and what precedes it, off the socket). */
        void drop(long seq) {
            take(seq).close();
        }

        private Tensor recv() {
            try {
                Tensor t = socket.recv(ARRIVAL_TIMEOUT_MILLIS);
                if (t == null) {
                    throw new DeviceException(name + ": tensor " + received + " was sent but did not arrive within "
                            + ARRIVAL_TIMEOUT_MILLIS + " ms");
                }
                return t;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new DeviceException(name + ": interrupted while receiving tensor " + received, e);
            }
        }

        @Override
        public void close() {
            synchronized (receiveLock) {
                for (Tensor t : arrived.values()) t.close();
                arrived.clear();
                socket.close();
            }
        }
    }

    /** A tensor on its way to the destination submesh: taken off the socket when used. Exactly once. */
    private static final class Arrival implements TensorPayload {
        private final FrameHeader header;
        private final Channel channel;
        private final long seq;
        private final AtomicBoolean used = new AtomicBoolean();

        Arrival(FrameHeader header, Channel channel, long seq) {
            this.header = header;
            this.channel = channel;
            this.seq = seq;
        }

        @Override
        public FrameHeader header() {
            return header;
        }

        @Override
        public Tensor materialize(Submesh dst) {
            if (!used.compareAndSet(false, true)) throw new IllegalStateException(channel.name() + ": " + header + " was already used");
            Tensor t = channel.take(seq);
            return t.submesh() == dst ? t : dst.ops().adopt(t);
        }

        @Override
        public void discard() {
            if (used.compareAndSet(false, true)) channel.drop(seq);
        }
    }
}

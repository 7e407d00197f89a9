package dev.ttpipe.transport;

import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The in-JVM transport: a send hands the tensor object itself to the receiving rank, which adopts it
 * onto its submesh (no bytes copied on the cpu and sim backends). Thread-safe.
 */
public final class LocalTransport implements Transport {
    private final Map<Integer, TensorReceiver> receivers = new ConcurrentHashMap<>();
    private final Map<Long, Channel> channels = new ConcurrentHashMap<>();
    private final AtomicLong handedOver = new AtomicLong();

    @Override
    public String name() {
        return "local";
    }

    @Override
    public void bind(int rank, TensorReceiver receiver) {
        receivers.put(rank, receiver);
    }

    @Override
    public TensorChannel channel(int fromRank, int toRank) {
        return channels.computeIfAbsent(((long) fromRank << 32) | toRank, k -> new Channel(fromRank, toRank));
    }

    /** Tensors handed over so far (none of them copied). */
    public long handedOver() {
        return handedOver.get();
    }

    @Override
    public void close() {
        channels.clear();
        receivers.clear();
    }

    private final class Channel implements TensorChannel {
        private final int from, to;
        private final String name;

        Channel(int from, int to) {
            this.from = from;
            this.to = to;
            this.name = "local " + from + "->" + to;
        }

        @Override
        public String name() {
            return name;
        }

        @Override
        public CompletableFuture<Void> send(FrameHeader header, Tensor tensor) {
            TensorReceiver r = receivers.get(to);
            if (r == null) {
                tensor.close();
                return CompletableFuture.failedFuture(new IllegalStateException(name + ": no receiver bound for rank " + to));
            }
            handedOver.incrementAndGet();
            r.onTensor(new Handover(header, tensor));
            return CompletableFuture.completedFuture(null);
        }

        @Override
        public void close() {
        }
    }

    /** The sender's tensor itself, moved onto the receiver's submesh when it is used. */
    private record Handover(FrameHeader header, Tensor tensor) implements TensorPayload {
        @Override
        public Tensor materialize(Submesh dst) {
            return tensor.submesh() == dst ? tensor : dst.ops().adopt(tensor);
        }

        @Override
        public void discard() {
            tensor.close();
        }
    }
}

package dev.ttpipe.transport;

import dev.ttpipe.device.Submesh;

/**
 * Moves tensors between pipeline ranks: {@code local} (in one JVM, hands the tensor over without a
 * copy), {@code aeron} (IPC on one host, UDP across hosts) and {@code fabric} (device to device).
 * A process binds a receiver for each rank it hosts and opens channels from its ranks to others.
 */
public interface Transport extends AutoCloseable {
    String name();

    /** Delivers everything addressed to {@code rank} to {@code receiver}. */
    void bind(int rank, TensorReceiver receiver);

    /**
     * As {@link #bind(int, TensorReceiver)}, naming the submesh {@code rank}'s stage materializes its
     * tensors on, so that a transport that can (Aeron, on a backend whose pieces are host memory)
     * assembles each arriving tensor in that submesh's memory as it arrives, and materializing it
     * copies nothing. Others ignore the submesh.
     */
    default void bind(int rank, Submesh submesh, TensorReceiver receiver) {
        bind(rank, receiver);
    }

    /**
     * Makes {@code jobId} the job this transport carries: frames it sends are stamped with it and
     * frames of any other job are dropped. A multi-process job agrees on one random id at start-up
     * (rank 0 makes it), so two jobs on the same hosts and ports never take each other's tensors.
     * Called before the first tensor moves. Transports that cannot meet another job ignore it.
     */
    default void adoptJob(long jobId) {
    }

    /**
     * Frames addressed to local rank {@code rank} that this transport dropped instead of delivering
     * (another job's, a wrong peer's, corrupt ones), by reason, since it started. Transports that
     * never meet such frames (in-process ones) report none.
     */
    default DroppedFrames droppedFrames(int rank) {
        return DroppedFrames.NONE;
    }

    /** The channel from local rank {@code fromRank} to rank {@code toRank} (opened once, then reused). */
    TensorChannel channel(int fromRank, int toRank);

    @Override
    void close();
}

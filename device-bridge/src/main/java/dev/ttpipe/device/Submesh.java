package dev.ttpipe.device;

import java.util.List;

/**
 * A rectangular part of a mesh that one pipeline stage owns (TTNN's {@code create_submeshes}).
 * Tensors live on a submesh; its {@link Ops} run SPMD on all its devices, in issue order, like a
 * device command queue.
 *
 * <p>Ops on one submesh must be issued by one thread at a time (the stage's executor); different
 * submeshes may be driven concurrently.
 */
public interface Submesh {
    MeshDevice mesh();

    /** Position of this submesh among the mesh's submeshes (0 for a whole-mesh submesh). */
    int index();

    MeshShape shape();

    /** Devices in row-major order of the submesh. */
    List<Device> devices();

    default Device device(MeshCoord coordInSubmesh) {
        return devices().get(coordInSubmesh.row() * shape().cols() + coordInSubmesh.col());
    }

    Ops ops();

    /** Waits until every op issued so far has finished (a no-op for synchronous backends). */
    void synchronize();

    /**
     * For a backend whose ops return before their work has run and which knows when it will have (the
     * sim backend's modeled queue): when every op issued so far will be done, on
     * {@link System#nanoTime()}'s scale, so a caller can go on issuing and still time its work. -1 for
     * the others: their work is done when {@link #synchronize} returns, and not known before. Safe to
     * call from any thread.
     */
    default long queuedUntilNanos() {
        return -1;
    }

    /**
     * On a backend whose {@link #queuedUntilNanos} is known: when the last op issued so far that
     * touched {@code t} (a tensor on this submesh) will be done, which is when another queue that
     * uses it can start; -1 for the others.
     */
    default long readyAtNanos(Tensor t) {
        return -1;
    }

    /**
     * Makes {@code t} (a tensor on this submesh) ready for another queue only once every op issued here
     * so far has run, not as soon as the op that wrote it has (TTNN's {@code record_event} after a
     * stage's action): a rank hands its output on at the end of its action. A no-op for backends whose
     * work is done when it returns.
     */
    default void fence(Tensor t) {
    }

    /** Memory of every device, row-major. */
    default List<MemoryStats> memory() {
        return devices().stream().map(Device::memory).toList();
    }

    /** Largest bytes in use over the devices of this submesh. */
    default long maxInUse() {
        return devices().stream().mapToLong(d -> d.memory().inUse()).max().orElse(0);
    }

    /** Largest high-water mark over the devices of this submesh. */
    default long maxPeak() {
        return devices().stream().mapToLong(d -> d.memory().peak()).max().orElse(0);
    }

    /** A short description: index, shape and device ids. */
    String describe();
}

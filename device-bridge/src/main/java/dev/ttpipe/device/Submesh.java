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

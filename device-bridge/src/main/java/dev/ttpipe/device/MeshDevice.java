package dev.ttpipe.device;

import java.util.List;

/**
 * A mesh of devices opened with a shape, as TTNN's {@code open_mesh_device}, carved into
 * submeshes (one per pipeline stage). Open one with {@link Backends#open}. Closing the mesh frees
 * every tensor still on it.
 */
public interface MeshDevice extends AutoCloseable {
    /** The backend's name: cpu, sim or ttnn. */
    String backend();

    MeshShape shape();

    /** All devices, row-major. */
    List<Device> devices();

    /**
     * Tiles the mesh with submeshes of {@code submeshShape}, row-major (TTNN's create_submeshes).
     * The mesh's sizes must be multiples of the submesh's.
     */
    List<Submesh> createSubmeshes(MeshShape submeshShape);

    /** The whole mesh as one submesh. */
    Submesh asSubmesh();

    /**
     * A point-to-point channel that moves tensors from {@code from} to {@code to} device to device
     * (the fabric path; TTNN's MeshSocket). Both submeshes must have the same shape; device i of
     * the sender pairs with device i of the receiver.
     */
    MeshSocket openSocket(Submesh from, Submesh to);

    @Override
    void close();
}

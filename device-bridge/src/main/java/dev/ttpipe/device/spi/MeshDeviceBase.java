package dev.ttpipe.device.spi;

import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Submesh;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * What every backend's {@link MeshDevice} shares: its name and shape, the submeshes made once per
 * submesh shape, and being open or closed. The backend makes its devices, its submeshes
 * ({@link #newSubmeshes}) and its sockets, and frees what it holds when closed
 * ({@link #freeResources}). Thread-safe as {@link MeshDevice} requires.
 */
public abstract class MeshDeviceBase implements MeshDevice {
    private final String backend;
    private final MeshShape shape;
    private final Map<MeshShape, List<Submesh>> submeshes = new ConcurrentHashMap<>();
    private volatile boolean closed;

    protected MeshDeviceBase(String backend, MeshShape shape) {
        this.backend = backend;
        this.shape = shape;
    }

    @Override
    public final String backend() {
        return backend;
    }

    @Override
    public final MeshShape shape() {
        return shape;
    }

    /** Made on the first call for each shape; later calls return the same submeshes. */
    @Override
    public final List<Submesh> createSubmeshes(MeshShape submeshShape) {
        requireOpen();
        return submeshes.computeIfAbsent(submeshShape, s -> List.copyOf(newSubmeshes(s)));
    }

    /**
     * The submeshes that tile this mesh with {@code submeshShape}, row-major (see
     * {@link SubmeshBase#tile}, which also rejects a shape that does not tile the mesh). Called once
     * per shape.
     */
    protected abstract List<Submesh> newSubmeshes(MeshShape submeshShape);

    @Override
    public final Submesh asSubmesh() {
        return createSubmeshes(shape).get(0);
    }

    /** Whether {@link #close} was called: then every tensor on the mesh reads as closed. */
    public final boolean isClosed() {
        return closed;
    }

    /** Throws a {@link DeviceException} if the mesh is closed: the first check of the backend's work. */
    public final void requireOpen() {
        if (closed) throw new DeviceException(backend + " mesh " + shape + " is closed");
    }

    /** Marks the mesh closed, then (the first time only) {@link #freeResources}. */
    @Override
    public final synchronized void close() {
        if (closed) return;
        closed = true;
        freeResources();
    }

    /** Frees what the backend holds for this mesh; called once, by {@link #close}, once the mesh reads as closed. */
    protected abstract void freeResources();
}

package dev.ttpipe.device.sim;

import dev.ttpipe.device.Device;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.spi.SubmeshBase;

import java.util.List;
import java.util.concurrent.locks.LockSupport;

/**
 * A sim submesh: an asynchronous device queue reduced to a clock. Each op advances "busy until"
 * by its modeled time (starting no earlier than now) and returns at once, as a device's command
 * queue does; {@link #synchronize} and every read of a value wait until the clock is reached
 * (parking). {@link #queuedUntilNanos} tells the runtime when the queue will be done, so it can go
 * on issuing instead of waiting for each action.
 */
final class SimSubmesh extends SubmeshBase {

    private final SimMeshDevice mesh;
    private final SimOps ops;
    private long busyUntil = System.nanoTime();

    SimSubmesh(SimMeshDevice mesh, int index, MeshShape shape, List<Device> devices) {
        super(mesh, index, shape, devices);
        this.mesh = mesh;
        this.ops = new SimOps(this, mesh.costs());
    }

    SimMeshDevice simMesh() {
        return mesh;
    }

    SimOps simOps() {
        return ops;
    }

    @Override
    public Ops ops() {
        return ops;
    }

    /** Queues work of {@code seconds}; returns when it will be done (System.nanoTime scale). */
    synchronized long enqueue(double seconds) {
        modeledSeconds += Math.max(0, seconds);
        long start = Math.max(System.nanoTime(), busyUntil);
        busyUntil = start + Math.max(0L, Math.round(seconds * 1e9));
        return busyUntil;
    }

    /** Makes later work wait for an event at {@code readyAt} (a tensor arriving from another submesh). */
    synchronized void waitFor(long readyAt) {
        busyUntil = Math.max(busyUntil, readyAt);
    }

    /** Total modeled time of all work queued so far (excluding waits for other submeshes). */
    synchronized double modeledSeconds() {
        return modeledSeconds;
    }

    private double modeledSeconds;

    synchronized long busyUntil() {
        return busyUntil;
    }

    /** Ops return as soon as they are queued: this is when the queue will have run them all. */
    @Override
    public long queuedUntilNanos() {
        return busyUntil();
    }

    @Override
    public long readyAtNanos(Tensor t) {
        return storageHere("readyAtNanos", t).readyAt();
    }

    @Override
    public void fence(Tensor t) {
        storageHere("fence", t).touchedUntil(busyUntil());
    }

    private SimStorage storageHere(String op, Tensor t) {
        if (!(t instanceof SimTensor st) || st.submesh() != this) {
            throw new IllegalArgumentException(op + ": the tensor does not live on " + describe());
        }
        return (SimStorage) st.storage();
    }

    @Override
    public void synchronize() {
        parkUntil(busyUntil());
    }

    /** Waits until {@code until} (System.nanoTime scale). */
    static void parkUntil(long until) {
        // Park, never spin: a pipeline runs many submeshes' queues on few cores, and a spinning
        // thread would steal the core another queue needs to issue its work on time.
        for (long left; (left = until - System.nanoTime()) > 0; ) {
            LockSupport.parkNanos(left);
        }
    }
}

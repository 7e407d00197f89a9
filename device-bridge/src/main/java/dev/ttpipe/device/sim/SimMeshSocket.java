package dev.ttpipe.device.sim;

import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.MeshSocket;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A sim socket: {@link #send} charges the sender's queue the link time of one device's piece and
 * allocates the tensor on the receiver (charged to its memory); {@link #recv} hands it over and
 * makes the receiver's later work wait until the transfer is done.
 */
final class SimMeshSocket implements MeshSocket {
    private record InFlight(SimTensor tensor, long readyAt) {
    }

    private final SimMeshDevice mesh;
    private final SimSubmesh from;
    private final SimSubmesh to;
    private final SimCosts costs;
    private final LinkedBlockingQueue<InFlight> queue = new LinkedBlockingQueue<>();
    private volatile boolean closed;

    SimMeshSocket(SimMeshDevice mesh, Submesh from, Submesh to) {
        if (!(from instanceof SimSubmesh f) || f.simMesh() != mesh || !(to instanceof SimSubmesh t) || t.simMesh() != mesh) {
            throw new DeviceException("openSocket: both submeshes must belong to this sim mesh");
        }
        if (!from.shape().equals(to.shape())) {
            throw new DeviceException("openSocket: submesh shapes " + from.shape() + " and " + to.shape() + " differ");
        }
        this.mesh = mesh;
        this.from = f;
        this.to = t;
        this.costs = mesh.costs();
    }

    @Override
    public Submesh sender() {
        return from;
    }

    @Override
    public Submesh receiver() {
        return to;
    }

    @Override
    public void send(Tensor t) {
        if (closed) throw new DeviceException("send: socket " + from.index() + " -> " + to.index() + " is closed");
        if (t == null) throw new DeviceException("send: tensor is null");
        if (!(t instanceof SimTensor s) || t.submesh() != from) {
            throw new DeviceException("send: the tensor must live on the sender, " + from.describe());
        }
        if (s.isClosed()) throw new DeviceException("send: tensor " + s.shape() + " is closed");
        mesh.requireOpen();
        SimTensor copy = to.simOps().allocateLike(s);
        long readyAt = from.enqueue(costs.linkSeconds(s.bytesPerDevice()));
        queue.add(new InFlight(copy, readyAt));
    }

    @Override
    public Tensor recv(long timeoutMillis) throws InterruptedException {
        if (closed) throw new DeviceException("recv: socket " + from.index() + " -> " + to.index() + " is closed");
        InFlight f = queue.poll(Math.max(0, timeoutMillis), TimeUnit.MILLISECONDS);
        if (f == null) return null;
        to.waitFor(f.readyAt());
        return f.tensor();
    }

    @Override
    public void close() {
        closed = true;
        for (InFlight f; (f = queue.poll()) != null; ) f.tensor().close();
    }
}

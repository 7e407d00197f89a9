package dev.ttpipe.device.sim;

import dev.ttpipe.device.SimCosts;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.spi.MeshSocketBase;

import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A sim socket: {@link #send} charges the sender's queue the link time of one device's piece and
 * allocates the tensor on the receiver (charged to its memory); {@link #recv} hands it over and
 * makes the receiver's later work wait until the transfer is done.
 */
final class SimMeshSocket extends MeshSocketBase<SimSubmesh, SimTensor> {
    private record InFlight(SimTensor tensor, long readyAt) {
    }

    private final SimCosts costs;
    private final LinkedBlockingQueue<InFlight> queue = new LinkedBlockingQueue<>();

    SimMeshSocket(SimMeshDevice mesh, Submesh from, Submesh to) {
        super(mesh, from, to, SimSubmesh.class, SimTensor.class);
        this.costs = mesh.costs();
    }

    @Override
    protected void transfer(SimTensor t) {
        SimTensor copy = receiver().simOps().allocateLike(t);
        long readyAt = sender().enqueue(costs.linkSeconds(t.bytesPerDevice()));
        queue.add(new InFlight(copy, readyAt));
    }

    @Override
    protected SimTensor receive(long timeoutMillis) throws InterruptedException {
        InFlight f = queue.poll(timeoutMillis, TimeUnit.MILLISECONDS);
        if (f == null) return null;
        receiver().waitFor(f.readyAt());
        return f.tensor();
    }

    @Override
    public void close() {
        markClosed();
        for (InFlight f; (f = queue.poll()) != null; ) f.tensor().close();
    }
}

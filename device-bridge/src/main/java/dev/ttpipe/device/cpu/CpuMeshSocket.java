package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.MeshSocket;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A cpu socket: {@link #send} copies each device's piece into a new tensor on the paired receiver
 * device (charged to the receiver's memory) and queues it; {@link #recv} takes the oldest.
 * Thread-safe (one sender thread, one receiver thread).
 */
final class CpuMeshSocket implements MeshSocket {
    private final CpuMeshDevice mesh;
    private final CpuSubmesh from;
    private final CpuSubmesh to;
    private final LinkedBlockingQueue<CpuTensor> queue = new LinkedBlockingQueue<>();
    private volatile boolean closed;

    CpuMeshSocket(CpuMeshDevice mesh, Submesh from, Submesh to) {
        if (!(from instanceof CpuSubmesh f) || f.cpuMesh() != mesh || !(to instanceof CpuSubmesh t) || t.cpuMesh() != mesh) {
            throw new DeviceException("openSocket: both submeshes must belong to this cpu mesh");
        }
        if (!from.shape().equals(to.shape())) {
            throw new DeviceException("openSocket: submesh shapes " + from.shape() + " and " + to.shape() + " differ");
        }
        this.mesh = mesh;
        this.from = f;
        this.to = t;
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
        if (!(t instanceof CpuTensor c) || t.submesh() != from) {
            throw new DeviceException("send: the tensor must live on the sender, " + from.describe());
        }
        if (c.isClosed()) throw new DeviceException("send: tensor " + c.shape() + " is closed");
        mesh.requireOpen();
        queue.add(to.cpuOps().receive(c));
    }

    @Override
    public Tensor recv(long timeoutMillis) throws InterruptedException {
        if (closed) throw new DeviceException("recv: socket " + from.index() + " -> " + to.index() + " is closed");
        return queue.poll(Math.max(0, timeoutMillis), TimeUnit.MILLISECONDS);
    }

    @Override
    public void close() {
        closed = true;
        for (CpuTensor t; (t = queue.poll()) != null; ) t.close();
    }
}

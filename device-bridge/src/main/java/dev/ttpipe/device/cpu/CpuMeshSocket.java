package dev.ttpipe.device.cpu;

import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.spi.MeshSocketBase;

import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A cpu socket: {@link #send} copies each device's piece into a new tensor on the paired receiver
 * device (charged to the receiver's memory) and queues it; {@link #recv} takes the oldest.
 * Thread-safe (one sender thread, one receiver thread).
 */
final class CpuMeshSocket extends MeshSocketBase<CpuSubmesh, CpuTensor> {
    private final LinkedBlockingQueue<CpuTensor> queue = new LinkedBlockingQueue<>();

    CpuMeshSocket(CpuMeshDevice mesh, Submesh from, Submesh to) {
        super(mesh, from, to, CpuSubmesh.class, CpuTensor.class);
    }

    @Override
    protected void transfer(CpuTensor t) {
        queue.add(receiver().cpuOps().receive(t));
    }

    @Override
    protected CpuTensor receive(long timeoutMillis) throws InterruptedException {
        return queue.poll(timeoutMillis, TimeUnit.MILLISECONDS);
    }

    @Override
    public void close() {
        markClosed();
        for (CpuTensor t; (t = queue.poll()) != null; ) t.close();
    }
}

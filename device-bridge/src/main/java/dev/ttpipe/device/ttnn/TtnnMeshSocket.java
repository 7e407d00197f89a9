package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.spi.DeviceMemory;
import dev.ttpipe.device.spi.MeshSocketBase;

import java.util.List;
import java.util.concurrent.LinkedBlockingDeque;

/**
 * A socket of the ttnn backend over the library's socket (TTNN MeshSocket on hardware): {@link #send}
 * copies device i's piece to device i of the receiver and queues it there (charged to the
 * receiver's memory from then on); {@link #recv} takes the oldest. The library moves the pieces;
 * this side keeps, in the same FIFO order, what the library does not know: each tensor's logical
 * shape, layout and dtype. One sender thread and one receiver thread.
 */
final class TtnnMeshSocket extends MeshSocketBase<TtnnSubmesh, TtnnTensor> {
    /** How long one native wait lasts, so that a waiting receiver notices interruption. */
    private static final long SLICE_MILLIS = 20;

    private record Pending(Shape shape, Layout layout, DType dtype, long bytes) {
    }

    private final TtnnMeshDevice mesh;
    private final List<DeviceMemory> receiverMemory;
    private final long handle;
    private final LinkedBlockingDeque<Pending> pending = new LinkedBlockingDeque<>();
    private final long[] received = new long[1];

    TtnnMeshSocket(TtnnMeshDevice mesh, Submesh from, Submesh to) {
        super(mesh, from, to, TtnnSubmesh.class, TtnnTensor.class);
        this.mesh = mesh;
        this.receiverMemory = receiver().accounting();
        long[] out = new long[1];
        Bridge.check(NativeBridge.ttpipe_socket_open(sender().handle(), receiver().handle(), out), "ttpipe_socket_open",
                "openSocket");
        this.handle = out[0];
    }

    @Override
    protected void transfer(TtnnTensor c) {
        long bytes = c.bytesPerDevice();
        DeviceMemory.allocateAll(receiverMemory, bytes);
        Pending p = new Pending(c.shape(), c.layout(), c.dtype(), bytes);
        pending.addLast(p); // before the native send: the receiver may take the tensor at once
        int status = NativeBridge.ttpipe_socket_send(handle, c.handle());
        if (status != Bridge.OK) {
            pending.removeLastOccurrence(p); // nothing was queued natively, so nobody has taken it
            DeviceMemory.freeAll(receiverMemory, bytes);
            throw Bridge.failure(status, "ttpipe_socket_send", "send");
        }
    }

    @Override
    protected TtnnTensor receive(long timeoutMillis) throws InterruptedException {
        long deadline = System.nanoTime() + timeoutMillis * 1_000_000L;
        while (true) {
            if (Thread.interrupted()) {
                throw new InterruptedException("recv on socket " + sender().index() + " -> " + receiver().index());
            }
            long left = Math.max(0, (deadline - System.nanoTime()) / 1_000_000L);
            Bridge.check(NativeBridge.ttpipe_socket_recv(handle, Math.min(left, SLICE_MILLIS), received),
                    "ttpipe_socket_recv", "recv");
            long h = received[0];
            if (h != 0) {
                Pending p = pending.pollFirst();
                if (p == null) {
                    NativeBridge.ttpipe_tensor_free(h);
                    throw new DeviceException("recv: the library delivered a tensor this socket did not send");
                }
                return receiver().ttnnOps().adoptReceived(h, p.shape(), p.layout(), p.dtype(), p.bytes());
            }
            if (left <= SLICE_MILLIS) return null;
        }
    }

    /** Closes the socket: the library frees what is still queued; its charge returns to the receiver. */
    @Override
    public void close() {
        if (!markClosed()) return;
        if (!mesh.isClosed()) {
            int status = NativeBridge.ttpipe_socket_close(handle);
            if (status != Bridge.OK && !mesh.isClosed()) throw Bridge.failure(status, "ttpipe_socket_close", "close");
        }
        for (Pending p; (p = pending.pollFirst()) != null; ) DeviceMemory.freeAll(receiverMemory, p.bytes());
    }
}

package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshSocket;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.spi.DeviceMemory;

import java.util.List;
import java.util.concurrent.LinkedBlockingDeque;

/**
 * A socket of the ttnn backend over the library's socket (TTNN MeshSocket on hardware): {@link #send}
 * copies device i's piece to device i of the receiver and queues it there (charged to the
 * receiver's memory from then on); {@link #recv} takes the oldest. The library moves the pieces;
 * this side keeps, in the same FIFO order, what the library does not know: each tensor's logical
 * shape, layout and dtype. One sender thread and one receiver thread.
 */
final class TtnnMeshSocket implements MeshSocket {
    /** How long one native wait lasts, so that a waiting receiver notices interruption. */
    private static final long SLICE_MILLIS = 20;

    private record Pending(Shape shape, Layout layout, DType dtype, long bytes) {
    }

    private final TtnnMeshDevice mesh;
    private final TtnnSubmesh from;
    private final TtnnSubmesh to;
    private final List<DeviceMemory> receiverMemory;
    private final long handle;
    private final LinkedBlockingDeque<Pending> pending = new LinkedBlockingDeque<>();
    private final long[] received = new long[1];
    private volatile boolean closed;

    TtnnMeshSocket(TtnnMeshDevice mesh, Submesh from, Submesh to) {
        if (!(from instanceof TtnnSubmesh f) || f.ttnnMesh() != mesh || !(to instanceof TtnnSubmesh t)
                || t.ttnnMesh() != mesh) {
            throw new DeviceException("openSocket: both submeshes must belong to this ttnn mesh");
        }
        if (!from.shape().equals(to.shape())) {
            throw new DeviceException("openSocket: submesh shapes " + from.shape() + " and " + to.shape() + " differ");
        }
        this.mesh = mesh;
        this.from = f;
        this.to = t;
        this.receiverMemory = t.accounting();
        long[] out = new long[1];
        Bridge.check(NativeBridge.ttpipe_socket_open(f.handle(), t.handle(), out), "ttpipe_socket_open", "openSocket");
        this.handle = out[0];
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
        if (!(t instanceof TtnnTensor c) || t.submesh() != from) {
            throw new DeviceException("send: the tensor must live on the sender, " + from.describe());
        }
        if (c.isClosed()) throw new DeviceException("send: tensor " + c.shape() + " is closed");
        mesh.requireOpen();
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
    public Tensor recv(long timeoutMillis) throws InterruptedException {
        if (closed) throw new DeviceException("recv: socket " + from.index() + " -> " + to.index() + " is closed");
        long deadline = System.nanoTime() + Math.max(0, timeoutMillis) * 1_000_000L;
        while (true) {
            if (Thread.interrupted()) throw new InterruptedException("recv on socket " + from.index() + " -> " + to.index());
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
                return to.ttnnOps().adoptReceived(h, p.shape(), p.layout(), p.dtype(), p.bytes());
            }
            if (left <= SLICE_MILLIS) return null;
        }
    }

    /** Closes the socket: the library frees what is still queued; its charge returns to the receiver. */
    @Override
    public void close() {
        if (closed) return;
        closed = true;
        if (!mesh.isClosed()) {
            int status = NativeBridge.ttpipe_socket_close(handle);
            if (status != Bridge.OK && !mesh.isClosed()) throw Bridge.failure(status, "ttpipe_socket_close", "close");
        }
        for (Pending p; (p = pending.pollFirst()) != null; ) DeviceMemory.freeAll(receiverMemory, p.bytes());
    }
}

package dev.ttpipe.device.spi;

import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.MeshSocket;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

/**
 * What every backend's {@link MeshSocket} shares: the two submeshes it joins and the checks on
 * opening, {@link #send} and {@link #recv}, so that all backends reject the same misuse with the
 * same messages. The backend moves the tensor ({@link #transfer}, {@link #receive}) and frees what
 * is still queued when closed. One sender thread and one receiver thread.
 *
 * @param <S> the backend's submesh
 * @param <T> the backend's tensor
 */
public abstract class MeshSocketBase<S extends Submesh, T extends Tensor> implements MeshSocket {
    private final MeshDeviceBase mesh;
    private final S from;
    private final S to;
    private final Class<T> tensorType;
    private volatile boolean closed;

    /** Checks that {@code from} and {@code to} are submeshes of {@code mesh} of the same shape. */
    protected MeshSocketBase(MeshDeviceBase mesh, Submesh from, Submesh to, Class<S> submeshType, Class<T> tensorType) {
        if (!submeshType.isInstance(from) || from.mesh() != mesh || !submeshType.isInstance(to) || to.mesh() != mesh) {
            throw new DeviceException("openSocket: both submeshes must belong to this " + mesh.backend() + " mesh");
        }
        if (!from.shape().equals(to.shape())) {
            throw new DeviceException("openSocket: submesh shapes " + from.shape() + " and " + to.shape() + " differ");
        }
        this.mesh = mesh;
        this.from = submeshType.cast(from);
        this.to = submeshType.cast(to);
        this.tensorType = tensorType;
    }

    @Override
    public final S sender() {
        return from;
    }

    @Override
    public final S receiver() {
        return to;
    }

    @Override
    public final void send(Tensor t) {
        requireOpen("send");
        if (t == null) throw new DeviceException("send: tensor is null");
        if (!tensorType.isInstance(t) || t.submesh() != from) {
            throw new DeviceException("send: the tensor must live on the sender, " + from.describe());
        }
        if (t.isClosed()) throw new DeviceException("send: tensor " + t.shape() + " is closed");
        mesh.requireOpen();
        transfer(tensorType.cast(t));
    }

    /** Copies {@code t} (open, on the sender) to the receiver and queues it, as {@link #send}. */
    protected abstract void transfer(T t);

    @Override
    public final Tensor recv(long timeoutMillis) throws InterruptedException {
        requireOpen("recv");
        return receive(Math.max(0, timeoutMillis));
    }

    /** The oldest tensor queued, now the caller's, waiting up to {@code timeoutMillis} (>= 0); null if none came. */
    protected abstract T receive(long timeoutMillis) throws InterruptedException;

    /** Marks the socket closed (sends and receives then throw); false if it already was. */
    protected final boolean markClosed() {
        boolean was = closed;
        closed = true;
        return !was;
    }

    private void requireOpen(String op) {
        if (closed) throw new DeviceException(op + ": socket " + from.index() + " -> " + to.index() + " is closed");
    }
}

package dev.ttpipe.device;

/**
 * A one-way, FIFO, device-to-device tensor channel between two submeshes of one mesh.
 * {@link #send} is called by the sender's thread, {@link #recv} by the receiver's.
 */
public interface MeshSocket extends AutoCloseable {
    Submesh sender();

    Submesh receiver();

    /** Copies {@code t} (on the sender) to the receiver's devices and queues it; does not consume {@code t}. */
    void send(Tensor t);

    /**
     * The next tensor sent, now on the receiver (the caller owns it); waits up to {@code timeoutMillis}
     * and returns null if none arrived.
     */
    Tensor recv(long timeoutMillis) throws InterruptedException;

    @Override
    void close();
}

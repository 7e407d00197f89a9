package dev.ttpipe.transport;

import dev.ttpipe.device.Tensor;

import java.util.concurrent.CompletableFuture;

/**
 * A directed tensor channel from one rank to another. {@link #send} is asynchronous and takes
 * ownership of the tensor: the future completes when the channel has taken the data (the tensor
 * may be closed by then), and completes late when the channel pushes back. Sends on one channel
 * arrive in order.
 */
public interface TensorChannel extends AutoCloseable {
    String name();

    CompletableFuture<Void> send(FrameHeader header, Tensor tensor);

    @Override
    void close();
}

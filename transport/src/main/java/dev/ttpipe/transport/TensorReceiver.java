package dev.ttpipe.transport;

/**
 * Where a transport delivers what arrives for one local rank. Called from a transport thread (or the
 * sender's thread for the in-process transport): implementations hand off (an actor's {@code tell})
 * and return quickly.
 */
public interface TensorReceiver {
    void onTensor(TensorPayload payload);

    /** A frame was dropped (checksum, parse error): the channel and why. Never becomes a tensor. */
    void onError(String channel, String problem);
}

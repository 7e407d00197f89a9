package dev.ttpipe.transport;

/**
 * Where a transport delivers what arrives for one local rank. Called from a transport thread (or the
 * sender's thread for the in-process transport): implementations hand off (an actor's {@code tell})
 * and return quickly.
 */
public interface TensorReceiver {
    void onTensor(TensorPayload payload);

    /**
     * A frame was dropped (checksum, parse error, a chunk missing or out of order): the channel and
     * why. Never becomes a tensor; the tensor it carried will not come.
     */
    void onError(String channel, String problem);

    /**
     * A frame of another job was dropped: after a recovery gives the job a fresh id, the frames of
     * the abandoned step still in flight end here. Not an error.
     */
    default void onForeignFrame(String channel, String problem) {
    }
}

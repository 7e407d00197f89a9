package dev.ttpipe.transport;

/**
 * A transport could not do what was asked: a send that failed (not connected in time, closed, too
 * large), a bad configuration, a payload that cannot be materialized. The message names the channel
 * ({@code aeron:ipc 0->1}) or the setting, and what was expected.
 */
public final class TransportException extends RuntimeException {
    public TransportException(String message) {
        super(message);
    }

    public TransportException(String message, Throwable cause) {
        super(message, cause);
    }
}

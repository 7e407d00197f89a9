package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.DeviceOutOfMemoryException;

/**
 * Turns the bridge's status codes into exceptions. The fast path is one comparison; the failure
 * path reads the thread's last error (and out-of-memory details) from the library right away, on
 * the same thread, before another call can replace it. An out-of-memory with every figure known is a
 * {@link DeviceOutOfMemoryException}; one the library could not fully describe (-1 figures) is a
 * {@link BridgeException} of status OUT_OF_MEMORY carrying the library's message.
 */
final class Bridge {
    static final int OK = 0;
    static final int E_OUT_OF_MEMORY = 3;

    private Bridge() {
    }

    static void check(int status, String function) {
        if (status != OK) throw failure(status, function, null);
    }

    /** As {@link #check(int, String)}, the message prefixed with the ttpipe op ({@code embedding: ...}). */
    static void check(int status, String function, String op) {
        if (status != OK) throw failure(status, function, op);
    }

    static DeviceException failure(int status, String function, String op) {
        String message = NativeBridge.ttpipe_last_error();
        if (status == E_OUT_OF_MEMORY) {
            long[] d = new long[4];
            // every figure known (the reference always; TTNN when its message gives them), else the library's message
            if (NativeBridge.ttpipe_last_oom(d) == OK && d[0] >= 0 && d[1] >= 0 && d[2] >= 0 && d[3] >= 0) {
                return new DeviceOutOfMemoryException((op == null ? function : op + " (" + function + ")")
                        + ": ttnn device " + d[0], d[1], d[2], d[3]);
            }
        }
        return new BridgeException(function, status, op, message);
    }
}

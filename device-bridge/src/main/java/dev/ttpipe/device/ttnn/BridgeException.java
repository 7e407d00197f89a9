package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.DeviceException;

/**
 * A call into the native bridge library returned a failing status: names the C function, the
 * status and the library's own message (and the ttpipe op, where one op maps to the call). The
 * library changed nothing; the JVM and the mesh stay usable.
 */
public class BridgeException extends DeviceException {
    private static final String[] STATUS_NAMES = {"OK", "INVALID_ARGUMENT", "INVALID_HANDLE", "OUT_OF_MEMORY", "CLOSED",
            "OUT_OF_RANGE", "HOST", "UNSUPPORTED", "INTERNAL"};

    private final String function;
    private final int status;

    public BridgeException(String function, int status, String op, String nativeMessage) {
        super((op == null ? "" : op + ": ") + describe(function, nativeMessage) + " [" + statusName(status) + "]");
        this.function = function;
        this.status = status;
    }

    /** The C function that failed, e.g. {@code ttpipe_matmul}. */
    public String function() {
        return function;
    }

    /** The TTPIPE_E_* status code. */
    public int status() {
        return status;
    }

    public String statusName() {
        return statusName(status);
    }

    /** TTPIPE_E_INVALID_HANDLE and friends, without the prefix: {@code INVALID_HANDLE}. */
    public static String statusName(int status) {
        return status >= 0 && status < STATUS_NAMES.length ? STATUS_NAMES[status] : "STATUS_" + status;
    }

    private static String describe(String function, String nativeMessage) {
        if (nativeMessage == null || nativeMessage.isEmpty()) return function + " failed (the library gave no message)";
        return nativeMessage.startsWith(function) ? nativeMessage : function + ": " + nativeMessage;
    }
}

package dev.ttpipe.device;

/**
 * An error from the device layer: a bad op call (shapes, layouts, closed tensors), out of memory, or
 * a backend failure. The message names the op and the offending shapes or layouts.
 */
public class DeviceException extends RuntimeException {
    public DeviceException(String message) {
        super(message);
    }

    public DeviceException(String message, Throwable cause) {
        super(message, cause);
    }
}

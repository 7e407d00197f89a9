package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.DeviceException;

import java.util.List;

/**
 * The bridge library cannot be used: not found (the message lists every path tried and how to
 * build it), not loadable by the dynamic linker, built for another ABI version, or missing a
 * function. {@link #function()} names the C function concerned, where there is one.
 */
public final class BridgeLoadException extends DeviceException {
    private final String function;
    private final List<String> tried;

    BridgeLoadException(String message, String function, List<String> tried, Throwable cause) {
        super(message, cause);
        this.function = function;
        this.tried = List.copyOf(tried);
    }

    /** The C function concerned ({@code ttpipe_abi_version}, a missing symbol), or null. */
    public String function() {
        return function;
    }

    /** The library paths tried, in search order. */
    public List<String> tried() {
        return tried;
    }
}

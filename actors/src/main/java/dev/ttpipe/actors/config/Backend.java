package dev.ttpipe.actors.config;

import java.util.Locale;

/** {@code device_config.backend}: where a stage's ops run. */
public enum Backend {
    /** Emulated devices on this machine's cores (OpenBLAS through JNA for matmul). */
    CPU,
    /** A cost model: ops take modeled time and carry no values. */
    SIM,
    /** The C bridge library through JNA (TTNN where tt-metal is installed, the reference library elsewhere). */
    TTNN;

    /** The name in configs and flags, and the device bridge's backend name. */
    public String id() {
        return name().toLowerCase(Locale.ROOT);
    }

    @Override
    public String toString() {
        return id();
    }
}

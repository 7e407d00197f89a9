package dev.ttpipe.actors.config;

import java.util.Locale;

/** {@code multihost_config.socket_type}: how tensors move between ranks. */
public enum SocketType {
    /** Handed over inside one process, no copy. */
    LOCAL,
    /** Aeron: IPC between ranks of one process, UDP between processes. TTML's {@code mpi} is read as this. */
    AERON,
    /** Device to device through the mesh's sockets. */
    FABRIC;

    public String id() {
        return name().toLowerCase(Locale.ROOT);
    }

    @Override
    public String toString() {
        return id();
    }
}

package dev.ttpipe.actors.runtime;

import java.io.IOException;
import java.net.InetAddress;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * This machine's name as {@code gethostname(2)} gives it: the {@code hostname} label of
 * Tenstorrent's device telemetry, so that a rank's series join the series of its devices. Read once.
 */
public final class HostName {
    private static final String NAME = read();

    private HostName() {
    }

    public static String get() {
        return NAME;
    }

    private static String read() {
        try {
            String kernel = Files.readString(Path.of("/proc/sys/kernel/hostname")).strip();    // Linux: what gethostname returns
            if (!kernel.isEmpty()) return kernel;
        } catch (IOException | RuntimeException notLinux) {
            // ask the JDK
        }
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (IOException e) {
            return "unknown";
        }
    }
}

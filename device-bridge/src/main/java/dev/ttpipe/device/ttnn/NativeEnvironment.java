package dev.ttpipe.device.ttnn;

import com.sun.jna.Function;
import com.sun.jna.NativeLibrary;
import dev.ttpipe.device.DeviceException;

import java.util.Map;

/**
 * Puts a job's {@code global_env} into this process's native environment (C's {@code setenv}), where
 * the bridge library and TTNN read their settings ({@code TT_METAL_*}, {@code TT_MESH_GRAPH_DESC_PATH},
 * ...): what tt-run does for each rank's process, for a backend that runs inside this JVM. Java's own
 * {@link System#getenv} does not see it (it is read once at startup); Java code reads through
 * {@link dev.ttpipe.device.MeshOptions#getenv} instead.
 */
final class NativeEnvironment {
    private NativeEnvironment() {
    }

    /** Sets every variable of {@code env} (overwriting); nothing when it is empty. */
    static synchronized void export(Map<String, String> env) {
        if (env.isEmpty()) return;
        Function setenv;
        try {
            setenv = NativeLibrary.getProcess().getFunction("setenv");
        } catch (UnsatisfiedLinkError e) {
            throw new DeviceException("ttnn backend: cannot set global_env in the native environment (no setenv: "
                    + e.getMessage() + ")");
        }
        for (Map.Entry<String, String> e : env.entrySet()) {
            int rc = setenv.invokeInt(new Object[]{e.getKey(), e.getValue(), 1});
            if (rc != 0) {
                throw new DeviceException("ttnn backend: setenv(" + e.getKey() + ") failed; global_env names must be"
                        + " non-empty and contain no '='");
            }
        }
    }

    /** The native environment's value of {@code name} (C's {@code getenv}), or null. */
    static String get(String name) {
        return NativeLibrary.getProcess().getFunction("getenv").invokeString(new Object[]{name}, false);
    }
}

package dev.ttpipe.device;

import java.util.Map;

/**
 * Options for opening a mesh.
 *
 * @param memoryPerDevice bytes each device may hold (default: a Wormhole chip's 12 GiB)
 * @param threads         compute threads for the cpu backend (0: all cores)
 * @param simCosts        the cost model of the sim backend (ignored by the others)
 * @param bridgeLibrary   path of the native bridge library for the ttnn backend (null: the search of
 *                        {@link dev.ttpipe.device.ttnn.BridgeLibrary}: -Dttpipe.bridge.library,
 *                        $TTPIPE_BRIDGE_LIBRARY, next to the jar, then the build's reference library)
 * @param environment     environment variables the backend starts with over this process's own (a job's
 *                        {@code global_env}): every variable a backend reads goes through {@link #getenv},
 *                        and the ttnn backend exports them into the native environment before it loads
 *                        its library (TTNN reads its settings there); empty: the process's environment
 */
public record MeshOptions(long memoryPerDevice, int threads, SimCosts simCosts, String bridgeLibrary,
                          Map<String, String> environment) {
    public static final long WORMHOLE_DRAM_BYTES = 12L << 30;

    public MeshOptions {
        environment = environment == null ? Map.of() : Map.copyOf(environment);
    }

    public MeshOptions(long memoryPerDevice, int threads, SimCosts simCosts, String bridgeLibrary) {
        this(memoryPerDevice, threads, simCosts, bridgeLibrary, Map.of());
    }

    public static MeshOptions defaults() {
        return new MeshOptions(WORMHOLE_DRAM_BYTES, 0, SimCosts.defaults(), null);
    }

    /** The variable {@code name} as the backend sees it: {@link #environment()}'s value, else the process's (null: unset). */
    public String getenv(String name) {
        String v = environment.get(name);
        return v != null ? v : System.getenv(name);
    }

    public MeshOptions withMemoryPerDevice(long bytes) {
        return new MeshOptions(bytes, threads, simCosts, bridgeLibrary, environment);
    }

    public MeshOptions withThreads(int n) {
        return new MeshOptions(memoryPerDevice, n, simCosts, bridgeLibrary, environment);
    }

    public MeshOptions withSimCosts(SimCosts c) {
        return new MeshOptions(memoryPerDevice, threads, c, bridgeLibrary, environment);
    }

    public MeshOptions withBridgeLibrary(String path) {
        return new MeshOptions(memoryPerDevice, threads, simCosts, path, environment);
    }

    public MeshOptions withEnvironment(Map<String, String> env) {
        return new MeshOptions(memoryPerDevice, threads, simCosts, bridgeLibrary, env);
    }
}

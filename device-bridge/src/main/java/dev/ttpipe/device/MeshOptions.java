package dev.ttpipe.device;

/**
 * Options for opening a mesh.
 *
 * @param memoryPerDevice bytes each device may hold (default: a Wormhole chip's 12 GiB)
 * @param threads         compute threads for the cpu backend (0: all cores)
 * @param simCosts        the cost model of the sim backend (ignored by the others)
 * @param bridgeLibrary   path of the native bridge library for the ttnn backend (null: the search of
 *                        {@link dev.ttpipe.device.ttnn.BridgeLibrary}: -Dttpipe.bridge.library,
 *                        $TTPIPE_BRIDGE_LIBRARY, next to the jar, then the build's reference library)
 */
public record MeshOptions(long memoryPerDevice, int threads, SimCosts simCosts, String bridgeLibrary) {
    public static final long WORMHOLE_DRAM_BYTES = 12L << 30;

    public static MeshOptions defaults() {
        return new MeshOptions(WORMHOLE_DRAM_BYTES, 0, SimCosts.defaults(), null);
    }

    public MeshOptions withMemoryPerDevice(long bytes) {
        return new MeshOptions(bytes, threads, simCosts, bridgeLibrary);
    }

    public MeshOptions withThreads(int n) {
        return new MeshOptions(memoryPerDevice, n, simCosts, bridgeLibrary);
    }

    public MeshOptions withSimCosts(SimCosts c) {
        return new MeshOptions(memoryPerDevice, threads, c, bridgeLibrary);
    }

    public MeshOptions withBridgeLibrary(String path) {
        return new MeshOptions(memoryPerDevice, threads, simCosts, path);
    }
}

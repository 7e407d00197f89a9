package dev.ttpipe.device;

/**
 * The sim backend's cost model: an op takes {@code opLatencyUs + flops / gflops} (matmul-like ops)
 * or {@code opLatencyUs + bytes / memoryGbps} (memory-bound ops); collectives and sends take
 * {@code opLatencyUs + bytes moved / linkGbps}. {@code timeScale} multiplies every modeled time (to
 * run a large model's timeline faster than real time and scale the measurement back).
 */
public record SimCosts(double gflops, double memoryGbps, double opLatencyUs, double linkGbps, double timeScale) {
    public static SimCosts defaults() {
        return new SimCosts(100.0, 50.0, 5.0, 25.0, 1.0);
    }

    /** Modeled seconds for a compute-bound op. */
    public double computeSeconds(double flops) {
        return (opLatencyUs * 1e-6 + flops / (gflops * 1e9)) * timeScale;
    }

    /** Modeled seconds for a memory-bound op touching {@code bytes}. */
    public double memorySeconds(double bytes) {
        return (opLatencyUs * 1e-6 + bytes / (memoryGbps * 1e9)) * timeScale;
    }

    /** Modeled seconds to move {@code bytes} over a link. */
    public double linkSeconds(double bytes) {
        return (opLatencyUs * 1e-6 + bytes / (linkGbps * 1e9)) * timeScale;
    }
}

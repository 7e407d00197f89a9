package dev.ttpipe.device.cpu;

/**
 * The dropout mask as a pure function of (seed, logical element index): SplitMix64's finaliser
 * over {@code seed + (index + 1) * golden ratio}, top 24 bits as a uniform in [0, 1). Any layout,
 * device count or thread count draws the same mask.
 */
final class DropoutMask {
    private DropoutMask() {
    }

    static float uniform(long seed, long index) {
        long z = seed + (index + 1) * 0x9E3779B97F4A7C15L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        z ^= z >>> 31;
        return (z >>> 40) * 0x1.0p-24f;
    }
}

package dev.ttpipe.stages;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Weight initialisation from the seed and the parameter's global name alone (for example
 * {@code blocks.3.attn.wq}), so every partition, device count and process draws the same values.
 */
public final class ParamInit {
    private ParamInit() {
    }

    /** Normal(0, std) values for {@code n} elements, a pure function of (seed, name). */
    public static float[] normal(long seed, String name, int n, double std) {
        SplitMix rng = new SplitMix(mix(seed, name));
        float[] out = new float[n];
        for (int i = 0; i < n; i += 2) {
            // Box-Muller: two normals from two uniforms in (0, 1]
            double u1 = (rng.next() >>> 11) * 0x1.0p-53 + 0x1.0p-54;
            double u2 = (rng.next() >>> 11) * 0x1.0p-53;
            double r = Math.sqrt(-2.0 * Math.log(u1));
            out[i] = (float) (std * r * Math.cos(2 * Math.PI * u2));
            if (i + 1 < n) out[i + 1] = (float) (std * r * Math.sin(2 * Math.PI * u2));
        }
        return out;
    }

    public static float[] constant(int n, float value) {
        float[] out = new float[n];
        Arrays.fill(out, value);
        return out;
    }

    /** A 64-bit seed for (seed, name), stable across JVMs. */
    public static long mix(long seed, String name) {
        long h = seed * 0x9E3779B97F4A7C15L + 0x632BE59BD9B4E019L;
        for (byte b : name.getBytes(StandardCharsets.UTF_8)) {
            h = SplitMix.scramble(h ^ b);
        }
        return h;
    }

    /** Seed for dropout of one layer in one step (the mask also depends on the element's position). */
    public static long dropoutSeed(long seed, int step, String layer) {
        return SplitMix.scramble(mix(seed, layer) + 0x9E3779B97F4A7C15L * (step + 1));
    }

    static final class SplitMix {
        private long state;

        SplitMix(long seed) {
            this.state = seed;
        }

        long next() {
            state += 0x9E3779B97F4A7C15L;
            return scramble(state);
        }

        static long scramble(long z) {
            z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
            z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
            return z ^ (z >>> 31);
        }
    }
}

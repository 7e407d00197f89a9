package dev.ttpipe.device.cpu;

import dev.ttpipe.device.RopeFrequencies;

import java.nio.FloatBuffer;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Rotary position embedding on [B, H, T, hd] pieces: pair (2i, 2i+1) of position t turns by
 * {@code t * inv_freq[i]} (the inverse turns back), {@code inv_freq} as {@link RopeFrequencies} gives
 * it ({@code theta^(-2i/hd)}, rescaled where the model asks for Llama 3.1's scaling). The cos/sin
 * tables are computed once per (frequencies, T, hd) in double and cached, so steady state computes
 * no trigonometry.
 */
final class Rope {
    private record Key(RopeFrequencies frequencies, int positions, int hd) {
    }

    private final Map<Key, float[][]> tables = new ConcurrentHashMap<>();

    /** {cos, sin}, each [positions, hd / 2]. */
    float[][] table(RopeFrequencies frequencies, int positions, int hd) {
        return tables.computeIfAbsent(new Key(frequencies, positions, hd), k -> {
            int half = hd / 2;
            double[] inverse = frequencies.inverse(hd);
            float[] cos = new float[positions * half];
            float[] sin = new float[positions * half];
            for (int i = 0; i < half; i++) {
                double freq = inverse[i];
                for (int t = 0; t < positions; t++) {
                    double angle = t * freq;
                    cos[t * half + i] = (float) Math.cos(angle);
                    sin[t * half + i] = (float) Math.sin(angle);
                }
            }
            return new float[][]{cos, sin};
        });
    }

    /** Row r of the piece ([B*H*tLocal, hd]) is position {@code r % tLocal + tOffset}. */
    static void apply(Parallel par, FloatBuffer out, FloatBuffer x, int rows, int tLocal, int tOffset, int hd,
                      float[][] table, boolean inverse) {
        float[] cos = table[0];
        float[] sin = table[1];
        int half = hd / 2;
        float sign = inverse ? -1f : 1f;
        par.range(rows, Math.max(1, Elementwise.GRAIN / Math.max(1, hd)), (lo, hi) -> {
            for (int r = lo; r < hi; r++) {
                int base = r * hd;
                int tb = (r % tLocal + tOffset) * half;
                for (int i = 0; i < half; i++) {
                    float c = cos[tb + i];
                    float s = sign * sin[tb + i];
                    float x0 = x.get(base + 2 * i);
                    float x1 = x.get(base + 2 * i + 1);
                    out.put(base + 2 * i, x0 * c - x1 * s);
                    out.put(base + 2 * i + 1, x0 * s + x1 * c);
                }
            }
        });
    }
}

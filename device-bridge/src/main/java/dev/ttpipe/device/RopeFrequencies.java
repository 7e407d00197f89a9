package dev.ttpipe.device;

/**
 * The frequencies of rotary position embedding: pair i (elements 2i and 2i+1) of a head of size hd
 * turns by {@code t * inv_freq[i]} at position t, with {@code inv_freq[i] = theta^(-2i/hd)}, then,
 * when {@link #scaling()} is given, rescaled as Llama 3.1's {@code rope_scaling} of type
 * {@code llama3} does (Hugging Face's {@code _compute_llama3_parameters}, TTML's
 * {@code RopeScalingParams}): long wavelengths are slowed down by {@code factor}, short ones kept,
 * and those in between blended. Value type; a backend may cache tables under it.
 *
 * @param theta   the base ({@code rope_theta}); a float, as the model stores it
 * @param scaling Llama 3.1 scaling, or null for plain RoPE
 */
public record RopeFrequencies(float theta, Llama3Scaling scaling) {

    public RopeFrequencies {
        if (!(theta > 0f) || Float.isInfinite(theta)) throw new DeviceException("rope: theta " + theta + " must be a finite number > 0");
    }

    /** Plain RoPE with base {@code theta}. */
    public static RopeFrequencies of(float theta) {
        return new RopeFrequencies(theta, null);
    }

    /**
     * Llama 3.1's scaling ({@code rope_type: llama3}). With wavelength {@code w = 2 pi / inv_freq} and
     * L = {@code originalMaxPositions}: {@code w < L / highFreqFactor} keeps inv_freq; {@code w > L / lowFreqFactor}
     * divides it by {@code factor}; in between, with {@code s = (L / w - lowFreqFactor) / (highFreqFactor - lowFreqFactor)},
     * it becomes {@code (1 - s) inv_freq / factor + s inv_freq}.
     */
    public record Llama3Scaling(double factor, double lowFreqFactor, double highFreqFactor, int originalMaxPositions) {
        public Llama3Scaling {
            if (!(factor >= 1) || Double.isInfinite(factor)) {
                throw new DeviceException("rope scaling: factor " + factor + " must be a finite number >= 1");
            }
            if (!(lowFreqFactor > 0) || Double.isInfinite(lowFreqFactor)) {
                throw new DeviceException("rope scaling: low_freq_factor " + lowFreqFactor + " must be a finite number > 0");
            }
            if (!(highFreqFactor > lowFreqFactor) || Double.isInfinite(highFreqFactor)) {
                throw new DeviceException("rope scaling: high_freq_factor " + highFreqFactor
                        + " must be a finite number > low_freq_factor " + lowFreqFactor);
            }
            if (originalMaxPositions < 1) {
                throw new DeviceException("rope scaling: original_max_position_embeddings " + originalMaxPositions + " must be >= 1");
            }
        }

        /** One unscaled inverse frequency, rescaled. */
        double apply(double invFreq) {
            double wavelength = 2 * Math.PI / invFreq;
            double shortest = originalMaxPositions / highFreqFactor;     // shorter wavelengths are kept
            double longest = originalMaxPositions / lowFreqFactor;       // longer ones are slowed by factor
            if (wavelength < shortest) return invFreq;
            if (wavelength > longest) return invFreq / factor;
            double smooth = (originalMaxPositions / wavelength - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
            return (1 - smooth) * invFreq / factor + smooth * invFreq;
        }
    }

    /** Whether the frequencies are rescaled (not plain {@code theta^(-2i/hd)}). */
    public boolean scaled() {
        return scaling != null;
    }

    /** The hd / 2 inverse frequencies of a head of size {@code hd}, in double. */
    public double[] inverse(int hd) {
        if (hd < 2 || hd % 2 != 0) throw new DeviceException("rope: head size " + hd + " must be even and >= 2");
        double[] out = new double[hd / 2];
        for (int i = 0; i < out.length; i++) {
            double f = Math.pow(theta, -2.0 * i / hd);
            out[i] = scaling == null ? f : scaling.apply(f);
        }
        return out;
    }
}

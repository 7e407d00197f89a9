package dev.ttpipe.device;

/**
 * fp32 <-> bfloat16 conversion. {@link #fromFloat} rounds to nearest, ties to even; NaN stays a
 * (quiet) NaN with its sign; infinities and signed zeros are preserved; fp32 subnormals round like
 * any other value (bf16 has the same exponent range, so they stay subnormal or round to zero or to
 * the smallest normal).
 */
public final class BFloat16 {
    private BFloat16() {
    }

    public static short fromFloat(float f) {
        int bits = Float.floatToRawIntBits(f);
        if ((bits & 0x7f80_0000) == 0x7f80_0000 && (bits & 0x007f_ffff) != 0) {
            return (short) ((bits >>> 16) | 0x0040); // NaN: keep sign and payload top bits, force quiet
        }
        int lsb = (bits >>> 16) & 1;
        int rounded = bits + 0x7fff + lsb;
        return (short) (rounded >>> 16);
    }

    public static float toFloat(short h) {
        return Float.intBitsToFloat((h & 0xffff) << 16);
    }

    /** Rounds an fp32 value to the nearest bf16-representable fp32 value. */
    public static float round(float f) {
        return toFloat(fromFloat(f));
    }
}

package dev.ttpipe.device;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class BFloat16Test {
    @ParameterizedTest(name = "{2}: {0} -> {1}")
    @CsvSource({
            "3f800000, 3f80, one",
            "3f808000, 3f80, tie rounds down to even",
            "3f818000, 3f82, tie rounds up to even",
            "3f808001, 3f81, just above a tie rounds up",
            "3f807fff, 3f80, just below a tie rounds down",
            "bf818000, bf82, negative tie rounds to even magnitude",
            "7f7f0000, 7f7f, max finite bf16",
            "7f7f7fff, 7f7f, just below max's rounding boundary",
            "7f7f8000, 7f80, tie above max finite overflows to inf",
            "7f7fffff, 7f80, max finite fp32 overflows to inf",
            "ff7fffff, ff80, negative overflow to -inf",
            "00010000, 0001, smallest bf16 subnormal",
            "00008000, 0000, half the smallest subnormal ties to zero",
            "00018000, 0002, subnormal tie to even",
            "00000001, 0000, smallest fp32 subnormal rounds to zero",
            "007fffff, 0080, largest fp32 subnormal rounds to the smallest normal",
            "80000000, 8000, negative zero",
            "00000000, 0000, positive zero",
            "7f800000, 7f80, inf",
            "ff800000, ff80, -inf",
    })
    void roundsToNearestEven(String in, String out, String what) {
        float f = Float.intBitsToFloat(Integer.parseUnsignedInt(in, 16));
        assertEquals(Integer.parseInt(out, 16), BFloat16.fromFloat(f) & 0xffff, what);
    }

    @ParameterizedTest
    @CsvSource({"7fc00000", "ffc00000", "7f800001", "7fa00000", "ff800001"})
    void nanStaysNanWithItsSign(String in) {
        int bits = Integer.parseUnsignedInt(in, 16);
        short h = BFloat16.fromFloat(Float.intBitsToFloat(bits));
        assertTrue(Float.isNaN(BFloat16.toFloat(h)), in);
        assertEquals(bits >>> 31, (h >>> 15) & 1, "sign");
    }

    @Test
    void toFloatIsExactAndRoundIsIdempotent() {
        for (int h = 0; h < 0x10000; h++) {
            float f = BFloat16.toFloat((short) h);
            if (Float.isNaN(f)) continue;
            assertEquals(h, BFloat16.fromFloat(f) & 0xffff);
            assertEquals(f, BFloat16.round(f));
        }
    }
}

package dev.ttpipe.device.cpu;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class FloatExpTest {
    @Test
    void isWithinTwoUlpOfMathExpOverTheFloatRange() {
        double worst = 0;
        for (float x = -87f; x <= 88f; x += 0.0007f) {
            double e = Math.exp(x);
            double rel = Math.abs(FloatExp.exp(x) - e) / e;
            worst = Math.max(worst, rel);
        }
        assertTrue(worst < 2.4e-7, "worst relative error " + worst);
    }

    @Test
    void tailsAndSpecialValues() {
        assertEquals(1f, FloatExp.exp(0f));
        assertEquals(0f, FloatExp.exp(-88f));
        assertEquals(0f, FloatExp.exp(-1e30f));
        assertEquals(0f, FloatExp.exp(Float.NEGATIVE_INFINITY));
        assertEquals(Float.POSITIVE_INFINITY, FloatExp.exp(1e30f));
        assertTrue(Float.isFinite(FloatExp.exp(88.7f)));
        assertTrue(Float.isNaN(FloatExp.exp(Float.NaN)));
        assertEquals(0f, FloatExp.sigmoid(-1e4f));
        assertEquals(1f, FloatExp.sigmoid(1e4f));
        assertEquals(0.5f, FloatExp.sigmoid(0f));
    }
}

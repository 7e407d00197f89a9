package dev.ttpipe.device;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Llama 3.1's rope scaling against figures computed apart from ttpipe: Meta's Llama 3.1 settings
 * (theta 500000, head size 128, factor 8, low_freq_factor 1, high_freq_factor 4, 8192 original
 * positions), its inverse frequencies as Hugging Face's {@code _compute_llama3_parameters} gives them,
 * evaluated in Python's float64 and written down here; a head of 8 whose frequencies are worked out by
 * hand in a comment; and every frequency of a small head against {@link Reference#llama3InverseFrequencies},
 * the same formula written the torch.where way.
 */
class RopeFrequenciesTest {
    static final RopeFrequencies LLAMA_31 = new RopeFrequencies(500000f, new RopeFrequencies.Llama3Scaling(8, 1, 4, 8192));

    @Test
    void llama31FrequenciesMatchHuggingFacesFormulaEvaluatedInPython() {
        double[] f = LLAMA_31.inverse(128);
        assertEquals(64, f.length);
        // index, unscaled theta^(-2i/hd), scaled (Python float64 of HF's formula)
        double[][] expected = {
                {0, 1.0, 1.0},
                {10, 0.12868737343265052, 0.12868737343265052},
                {28, 0.0032114459947525913, 0.0032114459947525913},    // wavelength 1956 < 8192 / 4: kept
                {29, 0.0026160992529250353, 0.002166570763503359},     // 2402: blended
                {30, 0.0021311195369119653, 0.0013718935677611381},    // 2948: blended
                {31, 0.0017360467021768655, 0.0008567514129196321},    // 3619: blended
                {40, 0.0002742481756762073, 3.428102195952591e-05},    // 22911 > 8192: divided by 8
                {63, 2.455140791131609e-06, 3.068925988914511e-07},
        };
        double[] plain = RopeFrequencies.of(500000f).inverse(128);
        for (double[] e : expected) {
            int i = (int) e[0];
            assertEquals(e[1], plain[i], 1e-12 * e[1], "unscaled inv_freq[" + i + "]");
            assertEquals(e[2], f[i], 1e-12 * e[2], "scaled inv_freq[" + i + "]");
        }
    }

    /**
     * A head of 8 with theta 10000, factor 4, low_freq_factor 1, high_freq_factor 4 and 1024 original positions,
     * worked by hand from Hugging Face's {@code _compute_llama3_parameters}:
     * <pre>
     *   inv_freq[i] = 10000^(-2i/8) = 10^(-i):        1,      0.1,    0.01,    0.001
     *   wavelength  = 2 pi / inv_freq:                6.283,  62.83,  628.3,   6283
     *   high_freq_wavelen = 1024 / 4 = 256, low_freq_wavelen = 1024 / 1 = 1024
     *   i = 0, 1: wavelength < 256, kept:            1,      0.1
     *   i = 3:    wavelength 6283 > 1024, / factor:  0.001 / 4 = 0.00025
     *   i = 2:    256 <= 628.3 <= 1024, blended:
     *             smooth = (1024 / wavelength - 1) / (4 - 1) = (1024 / (200 pi) - 1) / 3 = (5.12 / pi - 1) / 3 = 0.20991554
     *             (1 - smooth) * 0.01 / 4 + smooth * 0.01 = 0.01 (0.25 + 0.75 smooth) = 0.01 (0.25 + 0.25 (5.12 / pi - 1))
     *                                                    = 0.01 * 1.28 / pi = 0.0128 / pi = 0.0040743665
     * </pre>
     */
    @Test
    void aSmallHeadsScaledFrequenciesAreThoseWorkedByHandFromHuggingFacesFormula() {
        double[] f = new RopeFrequencies(10000f, new RopeFrequencies.Llama3Scaling(4, 1, 4, 1024)).inverse(8);
        double[] byHand = {1.0, 0.1, 0.0128 / Math.PI, 0.00025};
        assertEquals(byHand.length, f.length);
        for (int i = 0; i < byHand.length; i++) assertEquals(byHand[i], f[i], 1e-15 * byHand[i], "inv_freq[" + i + "]");
        assertEquals(0.0040743665, f[2], 1e-10, "the blended one, to the digits above");
    }

    @Test
    void everyFrequencyOfASmallHeadMatchesTheReferenceFormula() {
        for (double[] s : new double[][]{{4, 1, 4, 128}, {8, 1, 4, 64}, {2, 0.5, 3, 100}, {1, 1, 4, 8192}}) {
            RopeFrequencies r = new RopeFrequencies(10000f, new RopeFrequencies.Llama3Scaling(s[0], s[1], s[2], (int) s[3]));
            double[] want = Reference.llama3InverseFrequencies(10000, 16, s[0], s[1], s[2], s[3]);
            double[] got = r.inverse(16);
            for (int i = 0; i < want.length; i++) assertEquals(want[i], got[i], 1e-14 * want[i], "inv_freq[" + i + "] for " + r);
        }
    }

    @Test
    void factorOneLeavesTheFrequenciesAsTheyAre() {
        double[] plain = RopeFrequencies.of(10000f).inverse(16);
        double[] one = new RopeFrequencies(10000f, new RopeFrequencies.Llama3Scaling(1, 1, 4, 64)).inverse(16);
        for (int i = 0; i < plain.length; i++) assertEquals(plain[i], one[i], 1e-15 * plain[i]);
    }

    @Test
    void unscaledFrequenciesAreThetaToTheMinusTwoIOverHd() {
        double[] f = RopeFrequencies.of(10000f).inverse(8);
        for (int i = 0; i < 4; i++) assertEquals(Math.pow(10000, -2.0 * i / 8), f[i], 0.0);
    }

    @Test
    void refusesScalingThatTheFormulaCannotUse() {
        assertTrue(assertThrows(DeviceException.class, () -> new RopeFrequencies.Llama3Scaling(0.5, 1, 4, 8192)).getMessage()
                .contains("factor 0.5"));
        assertTrue(assertThrows(DeviceException.class, () -> new RopeFrequencies.Llama3Scaling(8, 4, 4, 8192)).getMessage()
                .contains("high_freq_factor"));
        assertTrue(assertThrows(DeviceException.class, () -> new RopeFrequencies.Llama3Scaling(8, 1, 4, 0)).getMessage()
                .contains("original_max_position_embeddings"));
    }
}

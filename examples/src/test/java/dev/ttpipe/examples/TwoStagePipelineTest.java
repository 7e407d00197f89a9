package dev.ttpipe.examples;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertTrue;

class TwoStagePipelineTest {
    @Test
    void theExampleTrainsThroughThePublicApi() {
        double[] losses = TwoStagePipeline.train(12);
        assertTrue(losses[11] < losses[0] - 0.3, "loss did not fall: " + losses[0] + " -> " + losses[11]);
    }
}

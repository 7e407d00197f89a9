package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.ConfigValidator;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.TrainingJob;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import java.util.Locale;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What {@code ./ttpipe train} runs with no config (the embedded default: a small GPT over 4 stages,
 * 1F1B, cpu backend, 300 steps of generated arithmetic), once in fp32 and once with
 * {@code device_config.dtype: bf16}: bf16 ends no more than 2% above fp32's validation loss (bf16 trains
 * no worse). Below is not a defect: two runs whose roundings differ follow different trajectories, and a
 * bf16 run has ended 2.27% below fp32 (0.7995 against 0.8181, with the fused attention); before that,
 * 0.8041 against 0.8079 (-0.47%). The two runs take 3 to 5 minutes on 2 cores, so tagged long.
 */
@Tag("long")
class Bf16TrainsLikeFp32Test {

    private static double validationLoss(String dtype) throws Exception {
        TtpipeConfig cfg = ConfigLoader.readResource(TrainCommand.DEFAULT_CONFIG);
        cfg.device.dtype = dtype;
        ConfigValidator.validate(cfg);
        TrainingJob job = TrainingJob.fromConfig(cfg);
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan())) {
            return job.run(runtime, null, null).validationLoss();
        }
    }

    @Test
    void theDefaultModelTrainedInBf16EndsWithinTwoPercentOfFp32sValidationLoss() throws Exception {
        double fp32 = validationLoss("fp32");
        double bf16 = validationLoss("bf16");
        String figures = String.format(Locale.ROOT, "validation loss after 300 steps: fp32 %.4f, bf16 %.4f (%+.2f%%)", fp32,
                bf16, 100 * (bf16 - fp32) / fp32);
        System.out.println(figures);
        assertTrue(bf16 <= 1.02 * fp32, figures);
    }
}

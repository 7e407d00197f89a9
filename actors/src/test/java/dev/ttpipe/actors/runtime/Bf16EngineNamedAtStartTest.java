package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.device.cpu.CpuKernels;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A bf16 job on the cpu backend chooses its bf16 matmul engine when its meshes open, before any product, so the
 * run's header and run.json name the engine its products run on (they named the fp32 engine before).
 */
class Bf16EngineNamedAtStartTest {
    @Test
    void theBf16EngineIsChosenWhenTheMeshesOpen() {
        TtpipeConfig cfg = ConfigLoader.load(Path.of("..", "configs", "nanogpt-pp2.yaml"));
        cfg.device.dtype = "bf16";
        cfg.globalEnv.put("TTPIPE_BF16_GEMM", "sgemm");       // an engine no other test's default picks
        TrainingJob job = TrainingJob.fromConfig(cfg);
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan())) {
            String engine = CpuKernels.bf16Matmul();
            assertTrue(engine != null && engine.startsWith("bf16 operands widened to fp32") && engine.contains("sgemm asked for"),
                    String.valueOf(engine));
        }
    }
}

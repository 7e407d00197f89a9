package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.PlanBuilder;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.cpu.MachinePeak;
import dev.ttpipe.stages.ReferenceTrainer;
import dev.ttpipe.stages.data.Batch;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;

/**
 * {@code ttpipe bench step CONFIG}: training steps of the reference trainer (all blocks on one
 * submesh, no pipeline), with ms/step, tokens/s and model-FLOPs utilisation against this
 * machine's computed peak. Prints figures; never passes or fails on them.
 */
@Command(name = "step",
        mixinStandardHelpOptions = true,
        description = {"Time training steps of the reference trainer (no pipeline) and report ms/step, tokens/s and MFU:",
                "model FLOPs per step (6 x parameters x tokens + attention) / (step time x this machine's peak)."},
        footer = {"", "Examples:",
                "  ttpipe bench step configs/bench/gpt-s.yaml",
                "  ttpipe bench step configs/bench/gpt-s.yaml --steps 5 --json"})
public final class BenchStepCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "CONFIG", description = "A training config YAML (its model, batch and device).")
    Path config;

    @Mixin
    JobOptions job = new JobOptions();

    @Option(names = "--steps", paramLabel = "N", defaultValue = "6", description = "Timed steps after one warm-up step (default ${DEFAULT-VALUE}).")
    int steps;

    @Option(names = "--json", description = "Print one JSON object.")
    boolean json;

    @Override
    public Integer call() {
        if (steps < 1) throw new UserInputException("--steps: " + steps + " given, expected a positive integer");
        TtpipeConfig cfg = job.resolve(config, null);
        if (!"cpu".equals(cfg.device.backend)) {
            throw new UserInputException(cfg.origins.where("device_config.backend") + ": '" + cfg.device.backend
                    + "' given, expected cpu (bench step measures real math on this machine)");
        }
        RunData data = RunData.load(cfg);
        JobPlan plan = PlanBuilder.build(cfg, data.dataset().tokenizer().vocabSize());
        int threads = cfg.device.threads > 0 ? cfg.device.threads : Runtime.getRuntime().availableProcessors();
        MachinePeak peak = MachinePeak.measure(threads);
        int batch = cfg.training.batchSize, seq = plan.seqLen();
        double flops = plan.model().trainingFlops((long) batch * seq, seq);
        if (!json) {
            System.out.printf(Locale.ROOT, "bench step: %s, %s %d blocks x %d dim, %d heads, vocab %d, batch %d x %d tokens, %d threads%n",
                    config, plan.model().type().name().toLowerCase(Locale.ROOT), plan.model().numBlocks(),
                    plan.model().embeddingDim(), plan.model().numHeads(), plan.model().vocabSize(), batch, seq, threads);
        }
        double[] seconds = new double[steps];
        double lastLoss;
        try (MeshDevice mesh = Backends.open("cpu", plan.rankMesh(), plan.meshOptions().withThreads(threads));
             ReferenceTrainer t = new ReferenceTrainer(plan.model(), mesh.asSubmesh(), plan.parallelism(), plan.seed(),
                     plan.optimizer(), plan.lr(), plan.clipMaxNorm(), 1)) {
            lastLoss = t.step(0, batches(data, plan, 0)).loss();              // warm-up: JIT, allocator
            for (int s = 0; s < steps; s++) {
                List<Batch> b = batches(data, plan, s + 1);
                long t0 = System.nanoTime();
                lastLoss = t.step(s + 1, b).loss();
                seconds[s] = (System.nanoTime() - t0) / 1e9;
                if (!json) System.out.printf(Locale.ROOT, "  step %d: %.1f ms, loss %.4f%n", s + 1, seconds[s] * 1e3, lastLoss);
            }
        }
        double[] sorted = seconds.clone();
        Arrays.sort(sorted);
        double median = sorted[steps / 2];
        double tokensPerSecond = batch * (double) seq / median;
        double achieved = flops / median / 1e9;
        double mfu = achieved / peak.gflops();
        if (json) {
            System.out.println("{\"config\":" + Json.str(config.toString()) + ",\"ms_per_step\":" + Json.num(median * 1e3)
                    + ",\"tokens_per_second\":" + Json.num(tokensPerSecond) + ",\"mfu\":" + Json.num(mfu)
                    + ",\"model_gflop_per_step\":" + Json.num(flops / 1e9) + ",\"achieved_gflops\":" + Json.num(achieved)
                    + ",\"peak_gflops\":" + Json.num(peak.gflops()) + ",\"peak\":" + Json.str(peak.how())
                    + ",\"parameters\":" + parameters(plan) + ",\"steps\":" + steps + ",\"loss\":" + Json.num(lastLoss) + "}");
        } else {
            System.out.printf(Locale.ROOT, "median %.1f ms/step (of %d), %.0f tokens/s, %.1f model GFLOP/step -> %.1f GFLOP/s%n",
                    median * 1e3, steps, tokensPerSecond, flops / 1e9, achieved);
            System.out.printf(Locale.ROOT, "MFU %.1f%% of peak %.1f GFLOP/s (%s)%n", 100 * mfu, peak.gflops(), peak.how());
        }
        return Main.EXIT_OK;
    }

    private static long parameters(JobPlan plan) {
        var m = plan.model();
        return m.numBlocks() * m.blockParameters() + (long) m.vocabSize() * m.embeddingDim() * 2
                + (m.isLlama() ? 0 : (long) m.maxSequenceLength() * m.embeddingDim());
    }

    private static List<Batch> batches(RunData data, JobPlan plan, int step) {
        List<Batch> out = new ArrayList<>();
        out.add(data.dataset().trainBatch(plan.seed(), step, plan.batchSize(), plan.seqLen()));
        return out;
    }
}

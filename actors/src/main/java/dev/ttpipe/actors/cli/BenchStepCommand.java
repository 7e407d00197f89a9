package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.telemetry.Terminal;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.cpu.CpuKernels;
import dev.ttpipe.device.cpu.MachinePeak;
import dev.ttpipe.device.cpu.MatmulShapes;
import dev.ttpipe.device.profile.OpProfile;
import dev.ttpipe.device.profile.ProfiledSubmesh;
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
 * submesh, no pipeline) and, when the config has more than one rank, of the pipeline as
 * {@code ttpipe train} runs it, each with ms/step, tokens/s and model-FLOPs utilisation against this
 * machine's measured FMA peak, labelled with which one it is. Prints figures; never passes or fails on them.
 */
@Command(name = "step",
        mixinStandardHelpOptions = true,
        description = {"Time training steps of the reference trainer and of the pipeline.",
                "The reference trainer runs without a pipeline; for a config with P > 1 ranks the pipeline's steps are timed too.",
                "Reports ms/step, tokens/s and MFU for each: model FLOPs per step (6 x parameters x tokens +",
                "attention) / (step time x this machine's measured FMA peak)."},
        footer = {"", "Examples:",
                "  ttpipe bench step configs/bench/gpt-s.yaml",
                "  ttpipe bench step configs/bench/gpt-s.yaml --steps 5 --json",
                "  ttpipe bench step configs/bench/gpt-s.yaml --profile",
                "  ttpipe bench step configs/bench/gpt-s.yaml --dtype bf16",
                "  ttpipe bench step configs/bench/gpt-s.yaml --set training_config.batch_size=4 --dry-run",
                "  ttpipe bench step configs/bench/gpt-s.yaml --write-matmul-table gpt-s.matmul",
                "  TTPIPE_MATMUL_TABLE=gpt-s.matmul ttpipe bench step configs/bench/gpt-s.yaml"})
public final class BenchStepCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "CONFIG", description = "A training config YAML (its model, batch and device).")
    Path config;

    @Mixin
    JobOptions job = new JobOptions();

    @picocli.CommandLine.Spec
    picocli.CommandLine.Model.CommandSpec spec;

    @Mixin
    DryRunOptions preview = new DryRunOptions();

    @Option(names = "--steps", paramLabel = "N", defaultValue = "6", description = "Timed steps after the warm-up steps (default ${DEFAULT-VALUE}).")
    int steps;

    @Option(names = "--warmup", paramLabel = "N", defaultValue = "1", description = "Untimed steps before the timed ones (default"
            + " ${DEFAULT-VALUE}). The JVM compiles the hot code during the first tens of steps on other threads, which"
            + " take the compute threads' cores now and then: give 20 or more to time the steady state.")
    int warmup;

    @Option(names = "--json", description = "Print one JSON object.")
    boolean json;

    @Option(names = "--profile", description = "Also time every op of the reference trainer's steps and print a table per op kind:"
            + " ms/step, share of the step, calls and GFLOP/s (matmuls, attention) or GB/s.")
    boolean profile;

    @Option(names = "--write-matmul-table", paramLabel = "FILE", description = {"Instead of timing steps: record every"
            + " fp32 product shape of one step (in the config's microbatches, as train runs it, and as a whole batch), time each on OpenBLAS and on oneDNN (alternating), and write FILE naming the"
            + " faster per shape. TTPIPE_MATMUL_TABLE=FILE (or global_env) makes the cpu backend follow it."})
    Path writeTable;

    @Override
    public Integer call() {
        if (writeTable != null) {
            MatmulTableWriter.checkWritable(writeTable);
            for (String flag : List.of("--steps", "--warmup", "--json", "--profile")) {
                if (spec.commandLine().getParseResult().hasMatchedOption(flag)) {
                    throw new UserInputException(flag + " given with --write-matmul-table, which times product shapes and"
                            + " no steps: expected one of them");
                }
            }
        }
        if (steps < 1) throw new UserInputException("--steps: " + steps + " given, expected a positive integer");
        if (warmup < 0) throw new UserInputException("--warmup: " + warmup + " given, expected 0 or a positive integer");
        TtpipeConfig cfg = job.resolve(config, null);
        if (cfg.device.backend != Backend.CPU) {
            throw new UserInputException(cfg.origins.where("device_config.backend") + ": '" + cfg.device.backend
                    + "' given, expected cpu (bench step measures real math on this machine)");
        }
        if (preview.preview(cfg, System.out, true, () -> writeTable != null
                ? "bench step would time every product shape of one step on OpenBLAS and oneDNN and write " + writeTable
                : "bench step would run " + warmup + (warmup == 1 ? " warm-up step" : " warm-up steps") + " and time " + steps
                + " steps of the reference trainer"
                + (cfg.pipeline().ranks() > 1 ? ", then of the pipeline" : ""))) {
            return Main.EXIT_OK;
        }
        TrainingJob training = TrainingJob.fromConfig(cfg);
        JobPlan plan = training.plan();
        int threads = cfg.device.threads > 0 ? cfg.device.threads : Runtime.getRuntime().availableProcessors();
        if (writeTable != null) return writeMatmulTable(training, plan, threads, cfg.device.dtype);
        MachinePeak peak = MachinePeak.measure(threads);
        // bf16 on a CPU with avx512_bf16: vdpbf16ps does two products per fp32 lane, so MFU is against twice the FMA peak
        boolean bf16Dot = "bf16".equals(cfg.device.dtype) && MachinePeak.hasBf16Dot();
        double peakGflops = bf16Dot ? peak.bf16Gflops() : peak.gflops();
        String peakName = bf16Dot ? "the bf16 peak" : "the measured peak";
        int seq = plan.seqLen();
        long tokensPerStep = (long) plan.batchSize() * seq * plan.accumulation();
        double flops = plan.model().trainingFlops(tokensPerStep, seq);
        if (!json) {
            System.out.printf(Locale.ROOT, "bench step: %s, %s %d blocks x %d dim, %d heads, vocab %d, batch %d x %d tokens, %d threads, %s%n",
                    config, plan.model().type().name().toLowerCase(Locale.ROOT), plan.model().numBlocks(),
                    plan.model().embeddingDim(), plan.model().numHeads(), plan.model().vocabSize(), plan.batchSize(), seq, threads,
                    cfg.device.dtype);
            System.out.printf(Locale.ROOT, "machine peak: %.1f GFLOP/s (%s)%n", peak.gflops(), peak.how());
            if (bf16Dot) {
                System.out.printf(Locale.ROOT, "bf16 peak: %.1f GFLOP/s (%s)%n", peakGflops, peak.bf16How());
            }
            System.out.println("elementwise kernels: " + CpuKernels.elementwise());
        }
        List<Figure> figures = new ArrayList<>();
        String refName = "reference trainer (all blocks on one " + plan.rankMesh() + " submesh, no pipeline)";
        if (!json) System.out.println(refName + ":");
        double[] ref = new double[steps];
        OpProfile ops = new OpProfile();
        try (MeshDevice mesh = open(plan, threads);
             ReferenceTrainer t = reference(plan, profile ? new ProfiledSubmesh(mesh.asSubmesh(), ops) : mesh.asSubmesh(), 1)) {
            double loss = Double.NaN;
            for (int w = 0; w < warmup; w++) t.step(w, training.batches(w));                // warm-up: JIT, allocator
            ops.reset();
            for (int s = 0; s < steps; s++) {
                List<Batch> b = training.batches(warmup + s);
                long t0 = System.nanoTime();
                loss = t.step(warmup + s, b).loss();
                ref[s] = (System.nanoTime() - t0) / 1e9;
                if (!json) System.out.printf(Locale.ROOT, "  step %d: %.1f ms, loss %.4f%n", s + 1, ref[s] * 1e3, loss);
            }
            figures.add(new Figure("reference", refName, ref, loss));
        }
        if (!json) {
            Terminal.printWrapped(System.out, "matmul kernels: fp32: " + CpuKernels.matmul()
                    + (CpuKernels.bf16Matmul() == null ? "" : "; bf16: " + CpuKernels.bf16Matmul()));
        }
        if (profile && !json) {
            double total = Arrays.stream(ref).sum();
            System.out.printf(Locale.ROOT, "profile of the reference trainer's %d timed steps (%.1f ms/step on average):%n", steps,
                    total * 1e3 / steps);
            System.out.print(ops.table(steps, total));
        }
        if (plan.ranks() > 1) {
            String pipeName = "pipeline (" + plan.stages() + " stages on " + plan.ranks() + " ranks, " + plan.schedule().name() + ", "
                    + plan.microbatches() + " microbatches, as `ttpipe train` runs it)";
            if (!json) System.out.println(pipeName + ":");
            double[] pipe = new double[steps];
            double loss = Double.NaN;
            try (PipelineRuntime runtime = PipelineRuntime.start(plan)) {
                for (int w = 0; w < warmup; w++) runtime.step(w, training.batches(w));
                for (int s = 0; s < steps; s++) {
                    Coordinator.StepReport r = runtime.step(warmup + s, training.batches(warmup + s));
                    pipe[s] = r.seconds();
                    loss = r.loss();
                    if (!json) System.out.printf(Locale.ROOT, "  step %d: %.1f ms, loss %.4f%n", s + 1, pipe[s] * 1e3, loss);
                }
            }
            figures.add(new Figure("pipeline", pipeName, pipe, loss));
        }
        if (bf16Dot && !CpuKernels.bf16DotProduct()) {
            // the bf16 engine that ran multiplies in fp32 (fma, sgemm): it cannot pass the fp32 FMA peak
            peakGflops = peak.gflops();
            peakName = "the measured peak (the bf16 matmuls multiply in fp32 on this engine)";
        }
        if (json) {
            StringBuilder sb = new StringBuilder("{\"config\":" + Json.str(config.toString()) + ",\"model_gflop_per_step\":"
                    + Json.num(flops / 1e9) + ",\"tokens_per_step\":" + tokensPerStep + ",\"peak_gflops\":" + Json.num(peakGflops)
                    + ",\"fp32_peak_gflops\":" + Json.num(peak.gflops())
                    + ",\"peak\":" + Json.str(peak.how()) + ",\"parameters\":" + parameters(plan) + ",\"steps\":" + steps + ",\"warmup_steps\":" + warmup
                    + ",\"dtype\":" + Json.str(cfg.device.dtype) + ",\"elementwise_kernels\":" + Json.str(CpuKernels.elementwise())
                    + ",\"matmul_kernel\":" + Json.str(String.valueOf(CpuKernels.matmul()))
                    + ",\"bf16_matmul_kernel\":" + (CpuKernels.bf16Matmul() == null ? "null" : Json.str(CpuKernels.bf16Matmul())));
            for (Figure f : figures) {
                double median = f.median();
                sb.append(",\"").append(f.key()).append("\":{\"what\":").append(Json.str(f.what()))
                        .append(",\"ms_per_step\":").append(Json.num(median * 1e3))
                        .append(",\"tokens_per_second\":").append(Json.num(tokensPerStep / median))
                        .append(",\"achieved_gflops\":").append(Json.num(flops / median / 1e9))
                        .append(",\"mfu\":").append(Json.num(flops / median / 1e9 / peakGflops))
                        .append(",\"loss\":").append(Json.num(f.loss())).append('}');
            }
            System.out.println(sb.append('}'));
        } else {
            for (Figure f : figures) {
                double median = f.median();
                double achieved = flops / median / 1e9;
                System.out.printf(Locale.ROOT, "%s: median %.1f ms/step (of %d), %.0f tokens/s, %.1f model GFLOP/step -> %.1f GFLOP/s,"
                                + " MFU %.1f%% of %s%n", f.key(), median * 1e3, steps, tokensPerStep / median,
                        flops / 1e9, achieved, 100 * achieved / peakGflops, peakName);
            }
            if (figures.size() == 2) {
                System.out.printf(Locale.ROOT, "pipeline / reference step time: %.2f (same run)%n",
                        figures.get(1).median() / figures.get(0).median());
            }
        }
        return Main.EXIT_OK;
    }

    /**
     * {@code --write-matmul-table}: records the fp32 product shapes of one step run in the config's microbatches (as
     * train and verify run it) and, when those are more than one, of one run as a whole batch (as this command times
     * it); then times them and writes the table.
     */
    private int writeMatmulTable(TrainingJob training, JobPlan plan, int threads, String dtype) {
        List<MatmulShapes.Shape> shapes;
        MatmulShapes.start();
        try (MeshDevice mesh = open(plan, threads)) {
            for (int microbatches : plan.microbatches() == 1 ? List.of(1) : List.of(plan.microbatches(), 1)) {
                try (ReferenceTrainer t = reference(plan, mesh.asSubmesh(), microbatches)) {
                    t.step(0, training.batches(0));
                }
            }
        } finally {
            shapes = MatmulShapes.stop();
        }
        MatmulTableWriter.write(writeTable, shapes, threads, config, dtype);
        return Main.EXIT_OK;
    }

    private static MeshDevice open(JobPlan plan, int threads) {
        return Backends.open(Backend.CPU.id(), plan.rankMesh(), plan.meshOptions().withThreads(threads));
    }

    /** The plan's model, every block on {@code submesh}, each batch run in {@code microbatches} slices. */
    private static ReferenceTrainer reference(JobPlan plan, dev.ttpipe.device.Submesh submesh, int microbatches) {
        return new ReferenceTrainer(plan.model(), submesh, plan.parallelism(), plan.seed(), plan.optimizer(), plan.lr(),
                plan.clipMaxNorm(), microbatches);
    }

    /** The timed steps of one way to train. */
    private record Figure(String key, String what, double[] seconds, double loss) {
        double median() {
            double[] s = seconds.clone();
            Arrays.sort(s);
            return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
        }
    }

    private static long parameters(JobPlan plan) {
        var m = plan.model();
        return m.numBlocks() * m.blockParameters() + (long) m.vocabSize() * m.embeddingDim() * 2
                + (m.isLlama() ? 0 : (long) m.maxSequenceLength() * m.embeddingDim());
    }
}

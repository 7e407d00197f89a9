package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.runtime.Deployment;
import dev.ttpipe.transport.AeronTransport;
import java.time.Duration;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.runtime.PlanBuilder;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.ReferenceTrainer;
import dev.ttpipe.stages.WeightDiff;
import dev.ttpipe.stages.data.Batch;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;

/**
 * {@code ttpipe verify CONFIG}: the pipelined job and the non-pipelined reference trainer side by
 * side on the same seed and data; per step both losses and the largest relative weight difference.
 */
@Command(name = "verify",
        mixinStandardHelpOptions = true,
        description = {"Check a pipelined job against the reference trainer: losses and weights, step by step.",
                "The reference runs all blocks on one submesh without a pipeline, on the same seed and data.",
                "Exit code 0 when every step agrees within the tolerance, 1 when one does not."},
        footer = {"", "Examples:",
                "  ttpipe verify configs/nanogpt-pp4-1f1b.yaml",
                "  ttpipe verify configs/nanogpt-pp4-zb.yaml --steps 8",
                "  ttpipe verify configs/nanogpt-pp2.yaml --schedule interleaved --microbatches 4 --mode ready-first"})
public final class VerifyCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "CONFIG", description = "A training config YAML.")
    Path config;

    @Mixin
    JobOptions job = new JobOptions();

    @Option(names = "--steps", paramLabel = "N", defaultValue = "5", description = "Steps to compare (default ${DEFAULT-VALUE}).")
    int steps;

    @Option(names = "--tolerance", paramLabel = "X", defaultValue = "1e-5",
            description = "Largest norm-wise relative weight difference accepted (default ${DEFAULT-VALUE}).")
    double tolerance;

    @Option(names = "--single-device", description = {"Run the reference trainer on one cpu device (no DDP/TP) instead of the",
            "job's own backend and per-rank mesh. Differences in summation order then show: about 1e-5, amplified by",
            "AdamW on near-zero gradients."})
    boolean singleDevice;

    @Option(names = "--whole-batch", description = {"Let the reference trainer take each batch in one pass instead of the same",
            "microbatches one after another (results then agree only to float summation order, about 1e-5..1e-4)."})
    boolean wholeBatch;

    @Override
    public Integer call() throws Exception {
        if (steps < 1) throw new UserInputException("--steps: " + steps + " given, expected a positive integer");
        TtpipeConfig cfg = job.resolve(config, null);
        if ("sim".equals(cfg.device.backend)) {
            throw new UserInputException(cfg.origins.where("device_config.backend")
                    + ": 'sim' given, expected cpu or ttnn (the sim backend models time and carries no values to compare)");
        }
        RunData data = RunData.load(cfg);
        JobPlan plan = PlanBuilder.build(cfg, data.dataset().tokenizer().vocabSize());
        System.out.printf("verify: %s, %d stages on %d ranks, %s%s, %d microbatches, %s backend, mesh %s per rank; reference: all"
                        + " blocks on %s, no pipeline%n", config, plan.stages(), plan.ranks(), plan.schedule().name(),
                plan.readyFirst() ? " (ready-first)" : "", plan.microbatches(), plan.backend(), plan.rankMesh(),
                singleDevice ? "one cpu device" : "one " + plan.backend() + " submesh " + plan.rankMesh()
                        + (plan.parallelism().ddp() || plan.parallelism().tp() ? " with the same DDP/TP" : ""));
        boolean ok = true;
        boolean multiProcess = cfg.multihost.enabled && "aeron".equals(cfg.multihost.socketType);
        LaunchCommand.Launcher workers = null;
        PipelineRuntime started;
        if (multiProcess) {
            Deployment deployment = Deployment.of(cfg);
            System.out.println("multi-process: rank 0 here, ranks 1.." + (plan.ranks() - 1) + " as worker processes (Aeron UDP on "
                    + deployment.seed().host() + ")");
            workers = new LaunchCommand.Launcher(config, job.toArgs(), deployment, System.out, System.err);
            try {
                workers.start(1, plan.ranks());
                AeronTransport t = AeronTransport.start(WorkerCommand.aeronConfig(plan, deployment, 0));
                try {
                    started = PipelineRuntime.startWorker(plan, deployment, 0, t, Duration.ofSeconds(90));
                } catch (RuntimeException e) {
                    t.close();
                    throw e;
                }
            } catch (RuntimeException | java.io.IOException e) {
                workers.close();
                throw e;
            }
        } else {
            started = PipelineRuntime.start(plan);
        }
        String failure = null;
        PipelineRuntime runtime = started;
        try (MeshDevice refMesh = singleDevice ? Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults())
                : Backends.open(plan.backend(), plan.rankMesh(), plan.meshOptions());
             ReferenceTrainer ref = new ReferenceTrainer(plan.model(), refMesh.asSubmesh(),
                     singleDevice ? Parallelism.NONE : plan.parallelism(), plan.seed(),
                     plan.optimizer(), plan.lr(), plan.clipMaxNorm(), wholeBatch ? 1 : plan.microbatches())) {
            TrainingRun batchesOf = new TrainingRun(cfg, data, plan, null, System.out);
            System.out.printf("%5s %14s %14s %14s  %s%n", "step", "pipeline loss", "reference loss", "max rel diff", "worst parameter");
            for (int step = 0; step < steps; step++) {
                List<Batch> batches = batchesOf.batches(step);
                Coordinator.StepReport p = runtime.step(step, batches);
                ReferenceTrainer.StepResult r = ref.step(step, batches);
                WeightDiff d = WeightDiff.compare(runtime.weights(), ref.weights());
                boolean stepOk = d.maxRelative() <= tolerance
                        && Math.abs(p.loss() - r.loss()) <= tolerance * Math.max(1.0, Math.abs(r.loss()));
                ok &= stepOk;
                System.out.printf(Locale.ROOT, "%5d %14.6f %14.6f %14.3e  %s%s%n", step, p.loss(), r.loss(), d.maxRelative(),
                        d.worstParam(), stepOk ? "" : "   <-- beyond tolerance " + tolerance);
            }
        } catch (RuntimeException e) {
            failure = e.getMessage();
            throw e;
        } finally {
            runtime.close(failure);
            if (workers != null) workers.finish(20);
        }
        System.out.println(ok ? "OK: the pipelined run matches the reference trainer within " + tolerance
                : "MISMATCH: the pipelined run differs from the reference trainer beyond " + tolerance);
        return ok ? Main.EXIT_OK : Main.EXIT_FAILURE;
    }
}

package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.multihost.WorkerProcesses;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.actors.train.Verification;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.ParentCommand;

import java.nio.file.Path;
import java.util.concurrent.Callable;

/**
 * {@code ttpipe verify CONFIG}: the pipelined job and the non-pipelined reference trainer side by
 * side on the same seed and data; per step both losses and the largest relative weight difference.
 */
@Command(name = "verify",
        mixinStandardHelpOptions = true,
        description = {"Check a pipelined job against the reference trainer: losses, gradient norms and weights, step by step.",
                "The reference runs all blocks on one submesh without a pipeline, on the same seed and data.",
                "Exit code 0 when every step agrees within the tolerance, 1 when one does not."},
        footer = {"", "Examples:",
                "  ttpipe verify configs/nanogpt-pp4-1f1b.yaml",
                "  ttpipe verify configs/nanogpt-pp4-zb.yaml --steps 8",
                "  ttpipe verify configs/nanogpt-pp2.yaml --schedule interleaved --microbatches 4 --mode ready-first",
                "  ttpipe verify configs/nanogpt-pp2.yaml --json     # the table goes to stderr, one JSON object to stdout"})
public final class VerifyCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "CONFIG", description = "A training config YAML.")
    Path config;

    @Mixin
    JobOptions job = new JobOptions();

    @Mixin
    DryRunOptions preview = new DryRunOptions();

    @ParentCommand
    Main main;

    @Option(names = "--steps", paramLabel = "N", defaultValue = "5", description = "Steps to compare (default ${DEFAULT-VALUE}).")
    int steps;

    @Option(names = "--tolerance", paramLabel = "X", defaultValue = "1e-5",
            description = "Largest relative difference accepted in the loss, the gradient norm and (norm-wise) each weight "
                    + "(default ${DEFAULT-VALUE}).")
    double tolerance;

    @Option(names = "--single-device", description = {"Run the reference trainer on one cpu device (no DDP/TP) instead of the",
            "job's own backend and per-rank mesh. Differences in summation order then show: about 1e-5, amplified by",
            "AdamW on near-zero gradients."})
    boolean singleDevice;

    @Option(names = "--whole-batch", description = {"Let the reference trainer take each batch in one pass instead of the same",
            "microbatches one after another (results then agree only to float summation order, about 1e-5..1e-4)."})
    boolean wholeBatch;

    @Option(names = "--json", description = "Print one JSON object (the verdict and every step's figures); the table goes to stderr.")
    boolean json;

    @Override
    public Integer call() throws Exception {
        if (steps < 1) throw new UserInputException("--steps: " + steps + " given, expected a positive integer");
        if (!(tolerance >= 0) || Double.isInfinite(tolerance)) {
            throw new UserInputException("--tolerance: " + tolerance + " given, expected a finite relative difference >= 0 (e.g. 1e-5)");
        }
        TtpipeConfig cfg = job.resolve(config, null);
        JobOptions.refuseRestarts(cfg, "ttpipe verify");
        if (cfg.device.backend == Backend.SIM) {
            throw new UserInputException(cfg.origins.where("device_config.backend")
                    + ": 'sim' given, expected cpu or ttnn (the sim backend models time and carries no values to compare)");
        }
        if (preview.preview(cfg, System.out)) return Main.EXIT_OK;
        TrainingJob trainingJob = TrainingJob.fromConfig(cfg);
        Verification v = new Verification(trainingJob, steps, tolerance, singleDevice, wholeBatch);
        Verification.PipelineStart start = WorkerProcesses.needed(trainingJob)
                ? WorkerProcesses.forVerify(config, job.toArgs()) : Verification.inProcess(main.faults());
        Verification.Outcome o = v.run(config, start, json ? System.err : System.out);
        if (json) System.out.println(json(o));
        return o.ok() ? Main.EXIT_OK : Main.EXIT_FAILURE;
    }

    private String json(Verification.Outcome o) {
        StringBuilder j = new StringBuilder("{\"config\":").append(Json.str(config.toString())).append(",\"ok\":").append(o.ok())
                .append(",\"tolerance\":").append(Json.num(tolerance)).append(",\"steps\":[");
        for (int i = 0; i < o.steps().size(); i++) {
            Verification.Step s = o.steps().get(i);
            j.append(i == 0 ? "" : ",").append("{\"step\":").append(s.step())
                    .append(",\"pipeline_loss\":").append(Json.num(s.pipelineLoss()))
                    .append(",\"reference_loss\":").append(Json.num(s.referenceLoss()))
                    .append(",\"pipeline_grad_norm\":").append(Json.num(s.pipelineGradNorm()))
                    .append(",\"reference_grad_norm\":").append(Json.num(s.referenceGradNorm()))
                    .append(",\"grad_norm_rel_diff\":").append(Json.num(s.gradNormRelDiff()))
                    .append(",\"max_rel_diff\":").append(Json.num(s.maxRelDiff()))
                    .append(",\"worst_parameter\":").append(Json.str(s.worstParameter()))
                    .append(",\"ok\":").append(s.ok()).append('}');
        }
        return j.append("]}").toString();
    }
}

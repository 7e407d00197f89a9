package dev.ttpipe.actors.train;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.Faults;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.telemetry.MetricsServer;
import dev.ttpipe.actors.telemetry.Terminal;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.ReferenceTrainer;
import dev.ttpipe.stages.WeightDiff;
import dev.ttpipe.stages.checkpoint.StageState;
import dev.ttpipe.stages.data.Batch;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * {@code ttpipe verify}: a training job's pipeline and the non-pipelined reference trainer side by
 * side on the same seed and batches ({@link TrainingJob#batches}); per step both losses, both global
 * gradient norms (before clipping) and the largest norm-wise relative weight difference, each within
 * the tolerance. The gradient norms catch what the weights cannot: AdamW's update does not depend on
 * the gradient's scale, so a pipeline whose gradients are twice too large moves the weights by less
 * than the tolerance. A multi-process config runs rank 0 here and the other ranks as worker processes.
 *
 * @param singleDevice the reference on one cpu device instead of the job's backend and per-rank mesh
 * @param wholeBatch   the reference takes each batch in one pass instead of the same microbatches
 */
public record Verification(TrainingJob job, int steps, double tolerance, boolean singleDevice, boolean wholeBatch) {

    /**
     * One compared step: both losses, both global gradient norms (before clipping), their relative
     * difference, the largest norm-wise relative weight difference and the parameter it is in.
     */
    public record Step(int step, double pipelineLoss, double referenceLoss, double pipelineGradNorm, double referenceGradNorm,
                       double gradNormRelDiff, double maxRelDiff, String worstParameter, boolean ok) {
    }

    /** The verdict (every step within the tolerance) and the steps compared. */
    public record Outcome(boolean ok, List<Step> steps) {
    }

    /** Starts the pipeline a verification drives: all ranks in this JVM, or rank 0 here and the others as processes. */
    @FunctionalInterface
    public interface PipelineStart {
        Started start(TrainingJob job, PrintStream out) throws IOException, InterruptedException;
    }

    /** What ends a started pipeline's helpers (the worker processes: waits for them to exit). */
    @FunctionalInterface
    public interface Finish {
        void finish() throws InterruptedException;
    }

    /** A started pipeline and what ends it after the runtime has closed. */
    public record Started(PipelineRuntime runtime, Finish finish) {
    }

    /** Every rank in this JVM. */
    public static final PipelineStart IN_PROCESS = inProcess(Faults.NONE);

    /** Every rank in this JVM, with {@code faults} injected into the pipeline (not into the reference trainer). */
    public static PipelineStart inProcess(Faults faults) {
        return (job, out) -> new Started(PipelineRuntime.start(job.plan(), faults), () -> { });
    }

    /**
     * Runs it, printing the table and the verdict to {@code out}; {@code start} starts the pipelined side
     * ({@link #IN_PROCESS}, or the worker processes of a multi-process config).
     */
    public Outcome run(Path configFile, PipelineStart start, PrintStream out) throws IOException, InterruptedException {
        JobPlan plan = job.plan();
        Terminal.printWrapped(out, String.format(Locale.ROOT, "verify: %s, %d stages on %d ranks, %s%s, %d microbatches, %s"
                        + " optimizer, %s backend, mesh %s per rank; reference: all blocks on %s, no pipeline", configFile, plan.stages(),
                plan.ranks(),
                plan.schedule().name(), plan.readyFirst() ? " (ready-first)" : "", plan.microbatches(),
                plan.optimizer().kind().name().toLowerCase(Locale.ROOT),
                plan.backend() + (plan.model().dtype() == DType.BF16 ? " bf16" : ""), plan.rankMesh(),
                singleDevice ? "one cpu device" : "one " + plan.backend() + " submesh " + plan.rankMesh()
                        + (plan.parallelism().ddp() || plan.parallelism().tp() ? " with the same DDP/TP" : "")));
        Started started = start.start(job, out);
        PipelineRuntime runtime = started.runtime();
        boolean ok = true;
        List<Step> compared = new ArrayList<>();
        String failure = null;
        job.watchdog(runtime, out);
        MetricsServer telemetry = null;
        var tc = job.config().telemetry;
        if (tc.port > 0) {
            try {
                telemetry = MetricsServer.start(runtime, tc.bindHost, tc.port);
                Terminal.printWrapped(out, "telemetry: " + telemetry.url() + "/metrics, " + telemetry.url() + "/status");
            } catch (IOException e) {
                out.println("telemetry: no endpoint (" + e.getMessage() + ")");
            }
        }
        try (MeshDevice refMesh = singleDevice ? Backends.open(Backend.CPU.id(), new MeshShape(1, 1), MeshOptions.defaults())
                : Backends.open(plan.backend().id(), plan.rankMesh(), plan.meshOptions());
             ReferenceTrainer ref = new ReferenceTrainer(plan.model(), refMesh.asSubmesh(),
                     singleDevice ? Parallelism.NONE : plan.parallelism(), plan.seed(),
                     plan.optimizer(), plan.lr(), plan.clipMaxNorm(), wholeBatch ? 1 : plan.microbatches())) {
            if (job.initFrom() != null) {
                runtime.loadState(job.initFrom(), 0);
                StageState.load(job.initFrom(), plan.model(), List.of(ref.stage()));
                Terminal.printWrapped(out, "both initialised from " + job.initFrom());
            }
            // 79 columns; the worst parameter (long names) gets its own line where a step is beyond the tolerance
            out.printf("%4s %13s %14s %12s %12s %9s %9s%n", "step", "pipeline loss", "reference loss",
                    "pipeline |g|", "ref. |g|", "|g| diff", "max diff");
            for (int step = 0; step < steps; step++) {
                List<Batch> batches = job.batches(step);
                Coordinator.StepReport p = runtime.step(step, batches);
                ReferenceTrainer.StepResult r = ref.step(step, batches);
                WeightDiff d = WeightDiff.compare(runtime.weights(), ref.weights());
                double gradDiff = Math.abs(p.gradNorm() - r.gradNorm()) / Math.max(r.gradNorm(), Double.MIN_NORMAL);
                boolean stepOk = d.maxRelative() <= tolerance && gradDiff <= tolerance
                        && Math.abs(p.loss() - r.loss()) <= tolerance * Math.max(1.0, Math.abs(r.loss()));
                ok &= stepOk;
                // steps counted from 1, as train counts them
                compared.add(new Step(step + 1, p.loss(), r.loss(), p.gradNorm(), r.gradNorm(), gradDiff, d.maxRelative(),
                        d.worstParam(), stepOk));
                out.printf(Locale.ROOT, "%4d %13.6f %14.6f %12.5e %12.5e %9.2e %9.2e%n", step + 1, p.loss(), r.loss(),
                        p.gradNorm(), r.gradNorm(), gradDiff, d.maxRelative());
                if (!stepOk) {
                    out.printf(Locale.ROOT, "     beyond the tolerance %s; worst parameter %s%n", tolerance, d.worstParam());
                }
            }
        } catch (RuntimeException e) {
            failure = e.getMessage();
            throw e;
        } finally {
            if (telemetry != null) telemetry.close();
            runtime.close(failure);
            started.finish().finish();
        }
        Terminal.printWrapped(out, ok ? "OK: the pipelined run matches the reference trainer within " + tolerance
                : "MISMATCH: the pipelined run differs from the reference trainer beyond " + tolerance);
        return new Outcome(ok, List.copyOf(compared));
    }
}

package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.Checkpoints;
import dev.ttpipe.actors.train.Preemption;
import dev.ttpipe.actors.train.CollectorRestart;
import dev.ttpipe.actors.train.TrainingJob;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.ParentCommand;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;

/** {@code ttpipe train [CONFIG]}: simulate all stages on one host, each a Pekko actor, and train. */
@Command(name = "train",
        mixinStandardHelpOptions = true,
        description = {"Train with every pipeline stage as an actor in this JVM (cpu, sim or ttnn backend).",
                "With no CONFIG: a small GPT over 4 stages, 1F1B, cpu backend, on arithmetic lines ttpipe generates (about a minute)."},
        footer = {"", "Examples:",
                "  ttpipe train",
                "  ttpipe train configs/nanogpt-pp4-1f1b.yaml --max-steps 20",
                "  ttpipe train --data ../shared/data/tinyshakespeare.txt --stages 2 --schedule gpipe",
                "  ttpipe train configs/sim-pp16.yaml",
                "  ttpipe train configs/nanogpt-pp4-1f1b.yaml --resume runs/20261123-101500-nanogpt-pp4-1f1b",
                "  ttpipe train configs/nanogpt-pp2.yaml --resume latest --allow-config-change --max-steps 80",
                "  ttpipe train configs/nanogpt-pp2.yaml --run-dir runs/job-42 --resume auto    # first start and every requeue",
                "  ttpipe train configs/nanogpt-pp2.yaml --set training_config.learning_rate=1e-3 --dry-run",
                "  ttpipe train configs/nanogpt-pp2.yaml --set training_config.eval_every=20 --print-config",
                "",
                "Each run writes runs/<time>-<project>/ with config.yaml, vocab.txt, metrics.jsonl, trace.json and",
                "checkpoints/ (every model_save_interval steps and at the last step).",
                "SIGTERM or Ctrl-C: the step running finishes, a checkpoint is saved there, run.json says preempted, the",
                "command that resumes is printed, and the exit code is 143 (SIGTERM) or 130 (SIGINT); a second signal stops at once."})
public final class TrainCommand implements Callable<Integer> {
    static final String DEFAULT_CONFIG = "/dev/ttpipe/actors/default-train.yaml";

    @Parameters(index = "0", arity = "0..1", paramLabel = "CONFIG", description = "A training config YAML (TTML-shaped).")
    Path config;

    @Mixin
    JobOptions job = new JobOptions();

    @Mixin
    DryRunOptions preview = new DryRunOptions();

    @ParentCommand
    Main main;

    @Option(names = "--run-dir", paramLabel = "DIR", description = {"Write the run here instead of runs/<time>-<project> (with",
            "--resume: the resumed run's directory). Never one that holds another run's checkpoints."})
    Path runDir;

    @Option(names = "--resume", paramLabel = "PATH", description = {"Continue from a checkpoint: a checkpoint directory",
            "(step-NNNNNN), a run directory or checkpoint root (its newest), 'latest' (the newest run's), or 'auto':",
            "the newest of --run-dir's own checkpoints, or the beginning when it has none (one command line for",
            "the first start and every requeue)."})
    String resume;

    @Option(names = "--log-every", paramLabel = "N", description = {"When the output is not a terminal (a log), one progress",
            "line every N steps (default: about every 10 s)."})
    Integer logEvery;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Option(names = "--allow-config-change", description = {"Resume although the config differs from the checkpoint's",
            "(learning rate, max_steps, the split, the schedule; the model's shape may not change)."})
    boolean allowConfigChange;

    @Override
    public Integer call() throws Exception {
        TtpipeConfig cfg = job.resolve(config, DEFAULT_CONFIG);
        JobOptions.refuseRestarts(cfg, "ttpipe train");
        if (config == null && job.data != null) {
            // the embedded default names its runs after its corpus; with --data, after the data file
            String stem = job.data.getFileName().toString().replaceFirst("\\.[^.]*$", "");
            cfg.training.projectName = stem.isEmpty() ? "train" : stem;
        }
        if (preview.preview(cfg, System.out)) return Main.EXIT_OK;
        TrainingJob job = TrainingJob.fromConfig(cfg);
        CollectorRestart.restartIfWorthIt(job.plan(), Main.class.getName(), Main.processArgs, System.out, System.err);
        if (AUTO.equals(resume)) {
            if (!job.resumeAuto(requireRunDir(runDir), allowConfigChange, System.out)) return Main.EXIT_OK;
        } else if (resume != null) {
            job.resumeFrom(Checkpoints.find(resume, Path.of(cfg.training.runsDir), System.err), allowConfigChange);
        }
        if (logEvery != null) {
            if (logEvery < 1) throw new UserInputException("--log-every: " + logEvery + " given, expected a positive integer");
            job.logEvery(logEvery);
        }
        List<String> commandLine = new ArrayList<>(List.of("ttpipe"));                 // originalArgs starts at "train"
        commandLine.addAll(spec.commandLine().getParseResult().originalArgs());
        job.invocation(commandLine);
        Path dir = job.runDirectory(runDir);
        // SIGTERM (SLURM's, Kubernetes') or Ctrl-C: finish the step, save a checkpoint there, exit 143 or 130.
        // A second one stops at once: this hook keeps the timeline and the summary so far, and says where it stopped.
        Thread onSignal = new Thread(job::interrupted, "ttpipe-interrupted");
        Runtime.getRuntime().addShutdownHook(onSignal);
        TrainingJob.Result result;
        try (Preemption preemption = Preemption.onSignals(System.err);
             PipelineRuntime runtime = PipelineRuntime.start(job.plan(), main.faults())) {
            job.preemption(preemption);
            result = job.run(runtime, dir, System.out);
        } finally {
            try {
                Runtime.getRuntime().removeShutdownHook(onSignal);
            } catch (IllegalStateException shuttingDown) {
                // the hook is running: it writes what there is
            }
        }
        return result.stoppedBy() != null ? result.stoppedBy().exitCode() : Main.EXIT_OK;
    }

    /** {@code --resume auto}'s value. */
    static final String AUTO = "auto";

    /** --resume auto resumes in the run directory every start shares: it must be named. */
    static Path requireRunDir(Path runDir) {
        if (runDir == null) {
            throw new UserInputException("--resume auto: no --run-dir given, expected --run-dir DIR (the run directory that the"
                    + " first start and every requeue share)");
        }
        return runDir;
    }
}

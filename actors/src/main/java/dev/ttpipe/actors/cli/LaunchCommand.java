package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.ExitCodes;
import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.multihost.Launcher;
import dev.ttpipe.actors.telemetry.Terminal;
import dev.ttpipe.actors.telemetry.TextWrap;
import dev.ttpipe.actors.train.Preemption;
import dev.ttpipe.actors.train.Checkpoints;
import dev.ttpipe.actors.train.TrainingJob;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Unmatched;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;

/**
 * {@code ttpipe launch CONFIG}: single-host emulation of a multi-host job. Starts one
 * {@code ttpipe worker} child process per rank on this machine (with its rank's env_overrides),
 * prefixes their output with the rank, stops all of them on Ctrl-C or as soon as one fails, and
 * leaves no process or Aeron directory behind.
 */
@Command(name = "launch",
        mixinStandardHelpOptions = true,
        description = {"Run a multi-process job on this machine, one `ttpipe worker` process per rank.",
                "Tensors go over Aeron UDP on loopback, control over a Pekko Cluster, as on real hosts. Output lines carry their rank."},
        footer = {"", "Examples:",
                "  ttpipe launch configs/multihost-pp2.yaml",
                "  ttpipe launch configs/multihost-pp4.yaml --hosts 4 --max-steps 10",
                "  ttpipe launch configs/multihost-pp2.yaml --run-dir runs/pp2 --resume auto",
                "",
                "Flags after CONFIG other than --hosts are passed to every worker (e.g. --max-steps, --schedule,",
                "--set KEY=VALUE); with --print-config or --dry-run launch prints and starts nothing.",
                "SIGTERM or Ctrl-C: passed on to the workers; rank 0 finishes the step and saves a checkpoint, and launch",
                "exits with 143 (SIGTERM) or 130 (SIGINT) and prints the command that resumes."})
public final class LaunchCommand implements Callable<Integer> {
    /** Restarts of a launched job when training_config.max_restarts is not given. */
    static final int DEFAULT_RESTARTS = 3;

    @Parameters(index = "0", paramLabel = "CONFIG", description = "The job's config YAML.")
    Path config;

    @Option(names = "--hosts", paramLabel = "N", description = "Worker processes (default: one per pipeline rank).")
    Integer hosts;

    @Unmatched
    List<String> passThrough = new ArrayList<>();

    @Override
    public Integer call() throws Exception {
        LaunchedWorkerOptions check = new LaunchedWorkerOptions();
        new CommandLine(check).setUnmatchedArgumentsAllowed(true).parseArgs(passThrough.toArray(new String[0]));
        TtpipeConfig cfg = check.job.resolve(config, null);  // bad input fails here, once, with exit code 2
        int ranks = cfg.pipeline().ranks();
        int n = hosts != null ? hosts : ranks;
        if (n != ranks) {
            throw new UserInputException("--hosts: " + n + " given, expected " + ranks + " (one worker per pipeline rank of "
                    + config + ")");
        }
        if (cfg.multihost.socketType != SocketType.AERON) {
            throw new UserInputException(cfg.origins.where("multihost_config.socket_type") + ": '" + cfg.multihost.socketType
                    + "' given, expected aeron for workers in separate processes");
        }
        Deployment deployment = Deployment.of(cfg);
        if (check.preview.preview(cfg, System.out)) {
            if (check.preview.dryRun) System.out.println("launch would start " + n + " worker processes, one per rank");
            return Main.EXIT_OK;
        }
        int maxRestarts = cfg.training.maxRestarts >= 0 ? cfg.training.maxRestarts : DEFAULT_RESTARTS;
        // One run directory for the whole launch (a resumed run's own by default), so a restarted job resumes from, and goes on
        // writing, the same one.
        List<String> args = new ArrayList<>(passThrough);
        boolean auto = TrainCommand.AUTO.equals(check.resume);          // the workers look in --run-dir (rank 0 decides)
        if (auto) TrainCommand.requireRunDir(check.runDir);
        Checkpoints.Found resumed = check.resume == null || auto ? null
                : Checkpoints.find(check.resume, Path.of(cfg.training.runsDir), System.err);
        Path runDir = auto ? check.runDir : TrainingJob.runDirectory(cfg, check.runDir, resumed);   // auto: rank 0 checks it
        if (check.runDir == null) {
            args.add("--run-dir");
            args.add(runDir.toString());
        }
        Launcher launcher = new Launcher(config, args, deployment, System.out, System.err);
        int exit;
        try (Preemption preemption = Preemption.onSignals(System.err)) {
            preemption.onRequest(r -> launcher.signalAll());
            exit = launcher.runWithRestarts(n, maxRestarts, runDir);
            boolean preempted = exit == ExitCodes.SIGTERM || exit == ExitCodes.SIGINT;
            if (preempted && preemption.requested() != null) exit = preemption.requested().exitCode();   // launch's own signal
        }
        if (exit == ExitCodes.SIGTERM || exit == ExitCodes.SIGINT) {
            List<String> again = new ArrayList<>(List.of("ttpipe"));
            again.addAll(spec.commandLine().getParseResult().originalArgs());
            System.out.println(TextWrap.wrapCommand("resume with: " + Preemption.resumeCommand(again, runDir), Terminal.columns(), 4));
        }
        return exit;
    }

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    /** The worker flags the launcher itself reads from the ones it passes on. */
    static final class LaunchedWorkerOptions {
        @CommandLine.Mixin
        JobOptions job = new JobOptions();

        @CommandLine.Mixin
        DryRunOptions preview = new DryRunOptions();

        @Option(names = "--run-dir")
        Path runDir;

        @Option(names = "--resume")
        String resume;
    }
}

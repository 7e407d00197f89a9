package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.multihost.Launcher;
import dev.ttpipe.actors.multihost.Worker;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.telemetry.MetricsServer;
import dev.ttpipe.actors.train.Checkpoints;
import dev.ttpipe.actors.train.TrainingJob;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;

/**
 * {@code ttpipe worker --rank R CONFIG}: one host's process of a multi-host job (as TTML runs one
 * process per host). It owns rank R's stages and submesh, joins the Pekko Cluster seeded by rank 0,
 * and moves tensors to and from the other ranks over Aeron UDP. Rank 0 also runs the Coordinator
 * and the training loop, and writes the run directory.
 */
@Command(name = "worker",
        mixinStandardHelpOptions = true,
        description = {"Run one rank of a multi-process job (one process per host, like tt-run).",
                "Every host runs the same CONFIG with its own --rank; rank 0 is the cluster seed, runs the Coordinator",
                "and prints progress. Hosts and ports come from the config's rank_bindings (default: 127.0.0.1,",
                "control port 25520 + rank, data port 40456 + 2 x rank)."},
        footer = {"", "Examples:",
                "  host-a$ ttpipe worker --rank 0 configs/multihost-pp2.yaml",
                "  host-b$ ttpipe worker --rank 1 configs/multihost-pp2.yaml",
                "  srun -N2 bash -c 'ttpipe worker --rank $SLURM_PROCID configs/multihost-pp2.yaml'",
                "  mpirun -np 2 bash -c 'ttpipe worker --rank $OMPI_COMM_WORLD_RANK configs/multihost-pp2.yaml'"})
public final class WorkerCommand implements Callable<Integer> {
    @Option(names = "--rank", required = true, paramLabel = "R", description = "This process's pipeline rank (0..P-1).")
    int rank;

    @Parameters(index = "0", paramLabel = "CONFIG", description = "The job's config YAML (the same file on every host).")
    Path config;

    @Mixin
    JobOptions job = new JobOptions();

    @Mixin
    DryRunOptions preview = new DryRunOptions();

    @Option(names = "--join-timeout", paramLabel = "SECONDS", defaultValue = "60",
            description = "How long to wait for the other ranks to join (default ${DEFAULT-VALUE}).")
    int joinTimeout;

    @Option(names = "--run-dir", paramLabel = "DIR", description = "Rank 0 writes the run here instead of runs/<time>-<project>.")
    Path runDir;

    @Option(names = "--resume", paramLabel = "PATH", description = {"Rank 0: continue from a checkpoint (a checkpoint directory,",
            "a run directory or 'latest'); every rank loads its part of it, whatever split wrote it. Other ranks ignore it."})
    String resume;

    @Option(names = "--allow-config-change", description = "Rank 0: resume although the config differs from the checkpoint's.")
    boolean allowConfigChange;

    @Override
    public Integer call() throws Exception {
        TtpipeConfig cfg = job.resolve(config, null);
        int ranks = cfg.pipeline().ranks();
        if (rank < 0 || rank >= ranks) {
            throw new UserInputException("--rank: " + rank + " given, expected 0.." + (ranks - 1) + " (the job has " + ranks + " ranks)");
        }
        if (preview.preview(cfg, System.out)) return Main.EXIT_OK;
        TrainingJob training = TrainingJob.fromConfig(cfg);
        // Rank 0 recovers failed steps in place: `ttpipe launch` restarts a dead worker (and says how often);
        // by hand, whatever restarts a worker (SLURM's requeue, Kubernetes) does, and rank 0 waits for it.
        String launched = System.getenv(Launcher.MAX_RESTARTS_ENV);
        int restarts = launched != null ? Integer.parseInt(launched) : Math.max(0, cfg.training.maxRestarts);
        if (rank == 0 && restarts > 0) training.recoverInPlace(restarts);
        if (resume != null && rank == 0) {
            training.resumeFrom(Checkpoints.find(resume, Path.of(cfg.training.runsDir), System.err), allowConfigChange);
        }
        Worker worker = new Worker(training, rank);
        System.out.println(worker.describe());
        PipelineRuntime runtime = worker.start(Duration.ofSeconds(joinTimeout));
        if (rank != 0) {
            String failure;
            MetricsServer telemetry = null;
            if (cfg.telemetry.port > 0) {
                // this worker's own rank, on telemetry.port + rank (rank 0 serves the whole job on telemetry.port)
                try {
                    telemetry = MetricsServer.start(runtime, cfg.telemetry.bindHost,
                            cfg.telemetry.port + rank, List.of(rank));
                } catch (IOException e) {
                    System.out.println("telemetry: no endpoint for rank " + rank + " (" + e.getMessage() + ")");
                }
            }
            try (runtime) {
                System.out.println("rank " + rank + " joined " + String.format(Locale.ROOT, "%.1f s after its process started",
                        ManagementFactory.getRuntimeMXBean().getUptime() / 1e3) + "; serving until rank 0 ends the job"
                        + (telemetry == null ? "" : "; telemetry " + telemetry.url() + "/metrics"));
                failure = runtime.awaitEnd();
            } finally {
                if (telemetry != null) telemetry.close();
            }
            if (failure != null) {
                System.err.println("ttpipe: rank " + rank + ": the job ended: " + failure);
                return Main.EXIT_FAILURE;
            }
            System.out.println("rank " + rank + ": job done");
            return Main.EXIT_OK;
        }
        String failure = null;
        try {
            training.run(runtime, training.runDirectory(runDir), System.out);
            return Main.EXIT_OK;
        } catch (RuntimeException e) {
            failure = e.getMessage();
            throw e;
        } finally {
            runtime.close(failure);
        }
    }
}

package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.multihost.Launcher;
import dev.ttpipe.actors.multihost.LauncherWatch;
import dev.ttpipe.actors.multihost.RankEnvironment;
import dev.ttpipe.actors.multihost.Worker;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.runtime.Watchdog;
import dev.ttpipe.actors.telemetry.MetricsServer;
import dev.ttpipe.actors.train.Checkpoints;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.actors.runtime.HostGuardian;
import dev.ttpipe.actors.train.Preemption;
import dev.ttpipe.actors.telemetry.Terminal;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;

/**
 * {@code ttpipe worker CONFIG}: one host's process of a multi-host job (as TTML runs one process per
 * host). It owns rank R's stages and submesh, joins the Pekko Cluster seeded by rank 0, and moves
 * tensors to and from the other ranks over Aeron UDP. Rank 0 also runs the Coordinator and the training
 * loop, and writes the run directory. The rank (and, where the launcher names them, the hosts) come from
 * the launcher's environment ({@link RankEnvironment}: SLURM, torchrun, Open MPI, PMIx, Kubernetes) or
 * from {@code --rank}.
 */
@Command(name = "worker",
        mixinStandardHelpOptions = true,
        description = {"Run one rank of a multi-process job (one process per host, like tt-run).",
                "Every host runs the same CONFIG; rank 0 is the cluster seed, runs the Coordinator and prints progress.",
                "The rank comes from --rank or from the launcher that started the worker: SLURM (SLURM_PROCID), torchrun",
                "(RANK), Open MPI (OMPI_COMM_WORLD_RANK), PMIx (PMIX_RANK) or a Kubernetes Indexed Job (JOB_COMPLETION_INDEX).",
                "Hosts come from the config's rank_bindings, else from SLURM's node list or the Kubernetes pods' DNS names",
                "(TTPIPE_K8S_SERVICE), else 127.0.0.1; ports: control 25520 + the rank's index on its host, data 40456 + 2 x it.",
                "Where only rank 0's host is known (torchrun's MASTER_ADDR), every other rank joins it and announces its own",
                "endpoint: the address that routes to rank 0 (or TTPIPE_HOST), ports from the local rank (or TTPIPE_CONTROL_PORT,",
                "TTPIPE_DATA_PORT)."},
        footer = {"", "Examples:",
                "  host-a$ ttpipe worker --rank 0 configs/multihost-pp2.yaml",
                "  host-b$ ttpipe worker --rank 1 configs/multihost-pp2.yaml",
                "  srun -N2 --ntasks-per-node=1 ttpipe worker configs/multihost-pp2.yaml",
                "  mpirun -np 2 --map-by node ttpipe worker my-pp2.yaml   # hosts in rank_bindings",
                "  sbatch examples/slurm/multihost-pp2.sbatch",
                "  kubectl apply -f examples/kubernetes/multihost-pp2.yaml",
                "",
                "SIGTERM or Ctrl-C on any worker: rank 0 finishes the step and saves a checkpoint,",
                "every worker exits with 143 (SIGTERM) or 130 (SIGINT); the same command with",
                "--run-dir DIR --resume auto goes on from there. docs/clusters.md: the variables",
                "each launcher sets, and how hosts and ports are derived."})
public final class WorkerCommand implements Callable<Integer> {
    @Option(names = "--rank", paramLabel = "R", description = {"This process's pipeline rank (0..P-1); default: the launcher's",
            "(SLURM_PROCID, RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, JOB_COMPLETION_INDEX)."})
    Integer rank;

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
            "a run directory, 'latest', or 'auto': the newest of --run-dir's own checkpoints, or the beginning when it has",
            "none); every rank loads its part of it, whatever split wrote it. Other ranks ignore it."})
    String resume;

    @Option(names = "--allow-config-change", description = "Rank 0: resume although the config differs from the checkpoint's.")
    boolean allowConfigChange;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        TtpipeConfig cfg = job.resolve(config, null);
        RankEnvironment launcher = RankEnvironment.resolve(System.getenv(), rank, cfg.pipeline().ranks(), config.toString());
        int rank = launcher.rank();
        if (preview.preview(cfg, System.out)) return Main.EXIT_OK;
        TrainingJob training = TrainingJob.fromConfig(cfg);
        // Rank 0 recovers failed steps in place: `ttpipe launch` restarts a dead worker (and says how often);
        // by hand, whatever restarts a worker (SLURM's requeue, Kubernetes) does, and rank 0 waits for it.
        String launched = System.getenv(Launcher.MAX_RESTARTS_ENV);
        int restarts = launched != null ? Integer.parseInt(launched) : Math.max(0, cfg.training.maxRestarts);
        if (rank == 0 && restarts > 0) training.recoverInPlace(restarts);
        boolean work = true;
        if (rank == 0 && TrainCommand.AUTO.equals(resume)) {
            work = training.resumeAuto(TrainCommand.requireRunDir(runDir), allowConfigChange, System.out);
        } else if (rank == 0 && resume != null) {
            training.resumeFrom(Checkpoints.find(resume, Path.of(cfg.training.runsDir), System.err), allowConfigChange);
        }
        Worker worker = new Worker(training, rank, launcher.placement(), launcher.localRank(), System.getenv());
        Terminal.printWrapped(System.out, launcher.describe());
        Terminal.printWrapped(System.out, worker.describe());
        training.launcher(launcher.engine(), launcher.variables());
        List<String> commandLine = new ArrayList<>(List.of("ttpipe"));
        commandLine.addAll(spec.commandLine().getParseResult().originalArgs());
        training.invocation(commandLine);
        // SIGTERM or Ctrl-C on any worker: rank 0 finishes the step and saves; every worker exits 143 or 130. Under
        // `ttpipe launch`, which passes its own signal on to every worker, a second signal is the same request again.
        try (Preemption preemption = Preemption.onSignals(System.err, !RankEnvironment.LAUNCH.equals(launcher.engine()))) {
            // rank 0 hears a worker's signal; a worker hears that rank 0 ended the job for one
            AtomicReference<HostGuardian.Preempt> endedFor = new AtomicReference<>();
            Consumer<HostGuardian.Preempt> heard = rank == 0
                    ? p -> preemption.request(new Preemption.Request(p.signal(), p.exitCode(), "on rank " + p.rank()))
                    : endedFor::set;
            if (RankEnvironment.LAUNCH.equals(launcher.engine())) {
                // launch's workers do not train on unsupervised: a launcher that dies stops them as SIGTERM would
                ProcessHandle.current().parent().ifPresent(p -> LauncherWatch.watch(p, preemption, rank, System.err));
            }
            PipelineRuntime runtime = worker.start(Duration.ofSeconds(joinTimeout), heard,
                    RankEnvironment.LAUNCH.equals(launcher.engine()));
            runtime.notices(line -> Terminal.printWrapped(System.out, Watchdog.PREFIX + line));  // rank 0's job sets its own
            for (String line : worker.describePeers(runtime.deployment())) Terminal.printWrapped(System.out, line);
            if (!worker.announcing().isEmpty()) training.peersThroughRank0(runtime.deployment(), worker.announcing());
            if (rank != 0) {
                preemption.onRequest(r -> runtime.relayPreemption(r.signal(), r.exitCode(), rank));
                return serve(cfg, runtime, rank, endedFor);
            }
            training.preemption(preemption);
            return lead(cfg, training, runtime, work);
        }
    }

    /** Rank 0: the training loop, then the end of the job for every worker. */
    private int lead(TtpipeConfig cfg, TrainingJob training, PipelineRuntime runtime, boolean work) throws IOException {
        String failure = null;
        try {
            if (!work) return Main.EXIT_OK;                                 // --resume auto: the run is finished
            TrainingJob.Result result = training.run(runtime, training.runDirectory(runDir), System.out);
            Preemption.Request stopped = result.stoppedBy();
            if (stopped == null) return Main.EXIT_OK;
            runtime.endPreempted(new HostGuardian.Preempt(stopped.where().isEmpty() ? stopped.signal() + " on rank 0"
                    : stopped.describe(), stopped.exitCode(), 0));
            return stopped.exitCode();
        } catch (RuntimeException e) {
            failure = e.getMessage();
            throw e;
        } finally {
            runtime.close(failure);
        }
    }

    /** A worker other than rank 0: serves its stages until rank 0 ends the job. */
    private int serve(TtpipeConfig cfg, PipelineRuntime runtime, int rank, AtomicReference<HostGuardian.Preempt> endedFor)
            throws InterruptedException {
        String failure;
        MetricsServer telemetry = null;
        if (cfg.telemetry.port > 0) {
            // this worker's own rank, on telemetry.port + rank (rank 0 serves the whole job on telemetry.port)
            try {
                telemetry = MetricsServer.start(runtime, cfg.telemetry.bindHost, cfg.telemetry.port + rank, List.of(rank));
            } catch (IOException e) {
                Terminal.printWrapped(System.out, "telemetry: no endpoint for rank " + rank + " (" + e.getMessage() + ")");
            }
        }
        try (runtime) {
            Terminal.printWrapped(System.out, "rank " + rank + " joined " + String.format(Locale.ROOT, "%.1f s after its process"
                    + " started", ManagementFactory.getRuntimeMXBean().getUptime() / 1e3) + "; serving until rank 0 ends the job"
                    + (telemetry == null ? "" : "; telemetry " + telemetry.url() + "/metrics"));
            failure = runtime.awaitEnd();
        } finally {
            if (telemetry != null) telemetry.close();
        }
        if (failure != null) {
            System.err.println("ttpipe: rank " + rank + ": the job ended: " + failure);
            return Main.EXIT_FAILURE;
        }
        HostGuardian.Preempt stopped = endedFor.get();
        if (stopped != null) {
            Terminal.printWrapped(System.out, "rank " + rank + ": the job stopped for " + stopped.signal() + "; rank 0 saved a checkpoint");
            return stopped.exitCode();
        }
        System.out.println("rank " + rank + ": job done");
        return Main.EXIT_OK;
    }
}

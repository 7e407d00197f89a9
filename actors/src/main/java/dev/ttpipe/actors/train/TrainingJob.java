package dev.ttpipe.actors.train;

import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.ConfigDiff;
import dev.ttpipe.actors.config.ConfigWriter;
import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.LinkCheck;
import dev.ttpipe.actors.runtime.MemoryPlan;
import dev.ttpipe.actors.runtime.PipelineFailure;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.runtime.Watchdog;
import dev.ttpipe.actors.runtime.ActionEvent;
import dev.ttpipe.actors.telemetry.ChromeTrace;
import dev.ttpipe.actors.telemetry.LinkTable;
import dev.ttpipe.actors.telemetry.MetricsServer;
import dev.ttpipe.actors.telemetry.Stragglers;
import dev.ttpipe.actors.telemetry.StageTable;
import dev.ttpipe.actors.telemetry.StepAnalysis;
import dev.ttpipe.actors.telemetry.StepMetrics;
import dev.ttpipe.actors.telemetry.TensorBoardEvents;
import dev.ttpipe.actors.telemetry.Terminal;
import dev.ttpipe.actors.telemetry.TextWrap;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.cpu.CpuKernels;
import dev.ttpipe.device.ttnn.BridgeLibrary;
import dev.ttpipe.stages.Evaluation;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.checkpoint.CheckpointException;
import dev.ttpipe.stages.data.ArithmeticCorpus;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.function.Consumer;

/**
 * One training job: the plan, the data and the loop that steps a {@link PipelineRuntime} through
 * the batches, with evaluation, samples and the run directory ({@code config.yaml},
 * {@code vocab.txt}, {@code metrics.jsonl}, {@code trace.json}). {@code ttpipe train}, rank 0 of
 * {@code ttpipe worker}, {@code ttpipe verify} (for its batches) and the examples all run jobs
 * through this class, so there is one training loop.
 *
 * <pre>
 * TrainingJob job = TrainingJob.fromConfig(cfg);
 * try (PipelineRuntime runtime = PipelineRuntime.start(job.plan())) {
 *     TrainingJob.Result r = job.run(runtime, runDir, System.out);
 * }
 * </pre>
 */
public final class TrainingJob {
    /** A trace.json larger than this gets a line on how to open it (Perfetto in a browser holds about 2 GB in all). */
    static final long LARGE_TRACE_BYTES = 512L << 20;

    /** How long a failing job waits for each checkpoint still being written before it gives it up. */
    static final int FINISH_SAVES_ON_FAILURE_SECONDS = 5;

    private final TtpipeConfig cfg;
    private final boolean fromConfig;
    private final TrainingData data;
    private final JobPlan plan;
    private Checkpoints.Found resumeFrom;

    private TrainingJob(TtpipeConfig cfg, boolean fromConfig, TrainingData data, JobPlan plan) {
        this.cfg = cfg;
        this.fromConfig = fromConfig;
        this.data = data;
        this.plan = plan;
    }

    /**
     * The job a validated config describes: its data (or the generated corpus) and its plan, whose
     * memory is planned before anything starts.
     *
     * @throws dev.ttpipe.actors.config.ConfigException also when a device would run out of memory
     */
    public static TrainingJob fromConfig(TtpipeConfig cfg) {
        TrainingJob job = planned(cfg);
        job.memory.check(cfg.origins.where("device_config.memory_per_device"));
        return job;
    }

    /**
     * {@link #fromConfig} without comparing the memory plan with the devices' memory: the plan of a config that
     * {@code ttpipe tune} may change until it fits.
     */
    public static TrainingJob planned(TtpipeConfig cfg) {
        TrainingData data = TrainingData.load(cfg);
        TrainingJob job = new TrainingJob(cfg, true, data, JobPlan.from(cfg, data.dataset().tokenizer().vocabSize()));
        job.memory = MemoryPlan.of(job.plan, cfg.origins.where("multihost_config.pipeline_parallel_config.num_microbatches"));
        return job;
    }

    private MemoryPlan memory;

    /** Each device's planned memory (null for a job built in code). */
    public MemoryPlan memoryPlan() {
        return memory;
    }

    /** A job built in code: {@code plan} trained for {@code steps} steps on {@code text}, default evaluation. */
    public static TrainingJob of(JobPlan plan, TextDataset text, int steps) {
        TtpipeConfig cfg = new TtpipeConfig();
        cfg.training.maxSteps = steps;
        cfg.training.seed = (int) plan.seed();
        return new TrainingJob(cfg, false, new TrainingData(text, "text given in code", false), plan);
    }

    private Path initFromDir;

    /** The directory training_config.init_from resolves to (null: ttpipe's own initialisation). */
    public Path initFrom() {
        if (initFromDir == null && cfg.training.initFrom != null) initFromDir = InitFrom.resolve(cfg);
        return initFromDir;
    }

    public JobPlan plan() {
        return plan;
    }

    public TrainingData data() {
        return data;
    }

    public TtpipeConfig config() {
        return cfg;
    }

    public int steps() {
        return cfg.training.maxSteps;
    }

    /** The config as written into the run directory and into every checkpoint. */
    String configYaml() {
        return fromConfig ? ConfigWriter.toYaml(cfg) : "# a job built in code\n# " + plan.fingerprint() + "\n";
    }

    /**
     * Continues from {@code checkpoint}: its weights, optimizer state and step. Refuses (one line per
     * key, all at once) when the job's config differs from the checkpoint's unless {@code allowConfigChange};
     * even then the model's shape must be the same (checked tensor by tensor when loading).
     */
    public void resumeFrom(Checkpoints.Found checkpoint, boolean allowConfigChange) {
        List<String> diff = ConfigDiff.differences(checkpoint.config(), configYaml());
        if (!diff.isEmpty() && !allowConfigChange) {
            throw new CheckpointException("--resume: the checkpoint " + checkpoint.dir()
                    + " was written with another config (" + String.join("; ", diff) + "); pass --allow-config-change to resume"
                    + " anyway (learning rate, max_steps and the split may change; the model's shape may not)");
        }
        if (checkpoint.step() >= steps()) {
            throw new CheckpointException("--resume: the checkpoint " + checkpoint.dir() + " is at step "
                    + checkpoint.step() + ", expected fewer than max_steps " + steps() + " (raise --max-steps, with --allow-config-change, to train further)");
        }
        this.resumeFrom = checkpoint;
    }

    /**
     * {@code --resume auto}: continues from the latest complete checkpoint this run saves to ({@code runDir}'s
     * checkpoints, or training_config.checkpoint_dir), or starts from the beginning when there is none yet, so
     * one command line serves the first start and every requeue. False when that checkpoint is at max_steps
     * already: the run is finished and there is nothing to do.
     */
    public boolean resumeAuto(Path runDir, boolean allowConfigChange, PrintStream out) {
        Checkpoints own = checkpoints(runDir);
        if (own == null) {
            Terminal.printWrapped(out, "--resume auto: the sim backend saves no checkpoints; starting from the beginning");
            return true;
        }
        own.close();
        if (!Files.isRegularFile(own.root().resolve(Checkpoints.LATEST))) {
            Terminal.printWrapped(out, "--resume auto: no checkpoint in " + own.root() + " yet; starting from the beginning");
            return true;
        }
        Checkpoints.Found found = Checkpoints.find(own.root().toString(), Path.of(cfg.training.runsDir));
        if (found.step() >= steps()) {
            Terminal.printWrapped(out, "--resume auto: " + found.dir() + " is at step " + found.step() + " of " + steps()
                    + ": the run is finished, nothing to do");
            return false;
        }
        resumeFrom(found, allowConfigChange);
        return true;
    }

    private Preemption preemption = new Preemption();

    /** Stop at the next step boundary when {@code p} is requested (SIGTERM, SIGINT): save, record, return. */
    public void preemption(Preemption p) {
        this.preemption = p;
    }

    /** How long a recovery waits for a dead rank's replacement to join. */
    static final Duration RECOVERY_TIMEOUT = Duration.ofSeconds(120);

    private int maxRecoveries;

    /**
     * Recover from up to {@code n} failed steps in place (rank 0 of a job that `ttpipe launch` started,
     * which restarts a dead worker): the ranks rejoin under a fresh job id, a dead rank's replacement
     * included, roll back to the latest checkpoint (or the start) and the loop goes on from there.
     */
    public void recoverInPlace(int n) {
        this.maxRecoveries = n;
    }

    /** Where this run's checkpoints go, or null when it saves none (no run directory and no checkpoint_dir, or the sim backend). */
    Checkpoints checkpoints(Path runDir) {
        // A sim run's weights are placeholders: a checkpoint of them would only cost the host copy and the disk.
        if (plan.backend() == Backend.SIM) return null;
        Path root = cfg.training.checkpointDir != null ? Path.of(cfg.training.checkpointDir)
                : runDir != null ? runDir.resolve("checkpoints") : null;
        return root == null ? null : new Checkpoints(this, root, cfg.training.modelSaveInterval, cfg.training.checkpointKeep);
    }

    /** This job's run directory: {@link #runDirectory(TtpipeConfig, Path, Checkpoints.Found)} for its config and resume. */
    public Path runDirectory(Path explicit) throws IOException {
        return runDirectory(cfg, explicit, resumeFrom);
    }

    /**
     * The run directory of a job, created: {@code explicit}; else, resuming a checkpoint of a run directory
     * ({@code RUN/checkpoints/step-N}), that run's, so one run's metrics.jsonl, stdout.log and checkpoints go on
     * in one place; else a new {@code runs_dir/<time>-<project>}. Refused in one line: an empty name, a file, and a
     * directory whose checkpoint root already holds complete checkpoints that this job does not continue (a fresh
     * run would mix its metrics with theirs and prune them from under {@code latest}).
     */
    public static Path runDirectory(TtpipeConfig cfg, Path explicit, Checkpoints.Found resumed) throws IOException {
        Path dir = explicit;
        if (dir != null && dir.toString().isBlank()) {
            throw new UserInputException("--run-dir: '" + dir + "' given, expected a directory to write the run into");
        }
        if (dir != null && Files.exists(dir) && !Files.isDirectory(dir)) {
            throw new UserInputException("--run-dir: " + dir + " is a file, expected a directory (a new one, or the run being resumed)");
        }
        if (dir == null && resumed != null) dir = runOf(resumed);
        if (dir == null) {
            String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
            String name = cfg.training.projectName.replaceAll("[^A-Za-z0-9._-]", "_");
            dir = Path.of(cfg.training.runsDir, stamp + "-" + name);
            for (int i = 2; Files.exists(dir); i++) dir = Path.of(cfg.training.runsDir, stamp + "-" + name + "-" + i);
        }
        refuseToMix(cfg, dir, resumed);
        Files.createDirectories(dir);
        return dir;
    }

    /** The run directory a checkpoint was saved in ({@code RUN/checkpoints/step-N}, RUN holding its config.yaml), or null. */
    private static Path runOf(Checkpoints.Found ck) {
        Path root = ck.dir().toAbsolutePath().normalize().getParent();
        if (root == null || !root.getFileName().toString().equals("checkpoints")) return null;
        Path run = root.getParent();
        if (run == null || !Files.isRegularFile(run.resolve("config.yaml"))) return null;
        Path given = ck.dir().getParent().getParent();                  // as the user named it, for the messages
        return given != null ? given : run;
    }

    private static void refuseToMix(TtpipeConfig cfg, Path dir, Checkpoints.Found resumed) throws IOException {
        boolean ownRoot = cfg.training.checkpointDir == null;
        Path root = ownRoot ? dir.resolve("checkpoints") : Path.of(cfg.training.checkpointDir);
        List<Path> there = Checkpoints.complete(root);
        if (there.isEmpty()) return;
        if (resumed != null && Files.isSameFile(resumed.dir().getParent(), root)) return;     // the run being continued
        Path newest = there.get(there.size() - 1);
        String where = ownRoot ? "--run-dir: " + dir : cfg.origins.where("training_config.checkpoint_dir") + ": " + root;
        throw new UserInputException(where + " holds an earlier run's checkpoints (the newest " + newest.getFileName() + "), expected"
                + " a directory of its own; continue that run with --resume " + (ownRoot ? dir : newest) + ", or pick another "
                + (ownRoot ? "--run-dir" : "checkpoint_dir"));
    }

    /** The batches of optimizer step {@code step}: one per accumulation pass, the same on every rank and in the reference. */
    public List<Batch> batches(int step) {
        List<Batch> out = new ArrayList<>();
        for (int a = 0; a < plan.accumulation(); a++) {
            out.add(data.dataset().trainBatch(plan.seed(), step * plan.accumulation() + a, plan.batchSize(), plan.seqLen()));
        }
        return out;
    }

    /**
     * What a run measured; {@code stoppedBy}: the preemption it stopped for at a step boundary (checkpoint saved),
     * null when it ran to max_steps.
     */
    public record Result(double[] losses, double tokensPerSecond, double validationLoss, Coordinator.StepReport last,
                         Preemption.Request stoppedBy) {
    }

    /**
     * Trains for {@link #steps()} steps on {@code runtime} (started by the caller, who closes it).
     * {@code runDir} null: no files; {@code out} null: nothing printed.
     */
    public Result run(PipelineRuntime runtime, Path runDir, PrintStream out) throws IOException {
        if (out == null) out = new PrintStream(OutputStream.nullOutputStream());
        OutputStream log = null;
        if (runDir != null) {
            // Everything printed also goes to the run directory's stdout.log.
            log = Files.newOutputStream(runDir.resolve("stdout.log"), StandardOpenOption.CREATE,
                    StandardOpenOption.APPEND);
            out = new PrintStream(new Tee(out, log), true, StandardCharsets.UTF_8);
        }
        try {
            return runLogged(runtime, runDir, out);
        } finally {
            out.flush();
            if (log != null) log.close();
        }
    }

    /** The state of a run that an interruption (Ctrl-C, SIGTERM) flushes: the timeline so far and the last step. */
    private final class Session {
        final Path runDir;
        final PrintStream out;
        final RunRecord record;
        final List<ActionEvent> traced = new ArrayList<>();
        final List<Coordinator.StepReport> tracedReports = new ArrayList<>();
        final double[] losses = new double[steps()];
        long traceOrigin;
        int first;
        int done;
        Coordinator.StepReport last;
        StepAnalysis lastAnalysis;
        boolean finished;
        boolean wasInterrupted;
        boolean failedRecorded;

        Session(Path runDir, PrintStream out) {
            this.runDir = runDir;
            this.out = out;
            this.record = runDir == null ? null : new RunRecord(runDir, invocation, cfg.origins.flags(), cfg.training.dataPath);
            if (record != null && launcherEngine != null) record.launcher(launcherEngine, launcherVariables, peers, announced);
            Arrays.fill(losses, Double.NaN);          // steps before a resumed run's first stay NaN
        }

        synchronized void stepped(int step, Coordinator.StepReport r, StepAnalysis a) {
            losses[step] = r.loss();
            if (step - first < cfg.telemetry.traceSteps || step == steps() - 1) {
                if (traced.isEmpty()) traceOrigin = r.startNs();
                traced.addAll(r.events());
                tracedReports.add(r);
            }
            last = r;
            lastAnalysis = a;
            done = step + 1;
        }

        /** The steps trace.json holds, counted from 1: {@code steps 1-10 and 60}, {@code step 3}. */
        synchronized String tracedSteps() {
            List<Integer> steps = new ArrayList<>();
            for (Coordinator.StepReport r : tracedReports) steps.add(r.step() + 1);
            return ChromeTrace.stepsText(steps);
        }

        synchronized void writeTrace() throws IOException {
            if (runDir != null) ChromeTrace.write(runDir.resolve("trace.json"), plan.schedule(), traced, tracedReports, traceOrigin);
        }

        /** The run stopped by {@code e}: run.json says {@code failed: } and why (once; an interrupted run stays so). */
        synchronized void failed(Throwable e) {
            if (record == null || failedRecorded || wasInterrupted) return;
            failedRecorded = true;
            String why = e.getMessage() == null ? e.getClass().getSimpleName() : e.getMessage();
            try {
                record.write("failed: " + why, done, Double.NaN);
            } catch (IOException | RuntimeException ignored) {
                // the failure itself is what gets reported
            }
        }

        /** Ctrl-C or SIGTERM: one line, the trace and the summary so far, and the record says so. */
        synchronized void interrupted() {
            if (finished) return;
            finished = true;
            wasInterrupted = true;
            out.println();
            Terminal.printWrapped(out, "interrupted at step " + done + " of " + steps());
            try {
                writeTrace();
                if (record != null) record.write("interrupted at step " + done, done, Double.NaN);
            } catch (IOException e) {
                Terminal.printWrapped(out, "(could not write the run directory: " + e.getMessage() + ")");
            }
            printSoFar();
        }

        /** A run that failed: the summary of the steps so far (the record and the trace are written by the caller). */
        synchronized void failed() {
            if (finished) return;
            finished = true;
            out.println();
            printSoFar();
        }

        /** The loss and the stage table of the steps so far, and where the trace is. */
        private void printSoFar() {
            if (last != null) {
                out.printf(Locale.ROOT, "loss %s -> %s over steps %d..%d%n", lossText(losses[first]), lossText(last.loss()),
                        first + 1, done);
                StageTable.print(out, plan, lastAnalysis, last);
            }
            if (runDir != null) Terminal.printWrapped(out, "wrote " + runDir.resolve("trace.json") + " (the steps so far)");
            out.flush();
        }
    }

    private volatile Session session;

    /** Flushes a running job's timeline and summary (a shutdown hook calls this on Ctrl-C or SIGTERM). */
    public void interrupted() {
        Session s = session;
        if (s != null) s.interrupted();
    }

    /**
     * Turns on the hang watchdog of {@code runtime} as the config says ({@code telemetry.stall_warning_s},
     * {@code training_config.step_timeout_s}); its diagnoses go to {@code out}, and so do the notices about a
     * worker that does not answer (multihost_config.liveness_grace_s), whatever the config says.
     */
    public void watchdog(PipelineRuntime runtime, PrintStream out) {
        Consumer<String> print = diagnosis -> {
            out.println();
            Terminal.printWrapped(out, Watchdog.PREFIX + diagnosis);  // also in the run's stdout.log
        };
        runtime.notices(print);
        if (cfg.telemetry.stallWarningS <= 0 && cfg.training.stepTimeoutS <= 0) return;
        runtime.watchdog(Duration.ofSeconds(cfg.telemetry.stallWarningS > 0 ? cfg.telemetry.stallWarningS : 1L << 30),
                Duration.ofSeconds(cfg.training.stepTimeoutS), print);
    }

    /** The command line that started the job, for run.json. */
    public void invocation(List<String> commandLine) {
        this.invocation = List.copyOf(commandLine);
    }

    private List<String> invocation = List.of("(Java API)");
    private String launcherEngine;
    private Map<String, String> launcherVariables = Map.of();

    private Deployment peers;
    private List<Integer> announced = List.of();

    /**
     * For run.json: the ranks found each other through rank 0; {@code everyRank} holds every rank's endpoint,
     * {@code announced} the ranks that announced theirs.
     */
    public void peersThroughRank0(Deployment everyRank, List<Integer> announced) {
        this.peers = everyRank;
        this.announced = List.copyOf(announced);
    }

    /** For run.json: the launcher that started this job's workers and the variables it was read from. */
    public void launcher(String engine, Map<String, String> variables) {
        this.launcherEngine = engine;
        this.launcherVariables = new LinkedHashMap<>(variables);
    }
    private int logEvery;

    /** When the output is not a terminal: a progress line every this many steps (0: about every 10 s). */
    public void logEvery(int steps) {
        this.logEvery = steps;
    }

    private Result runLogged(PipelineRuntime runtime, Path runDir, PrintStream out) throws IOException {
        Session st = new Session(runDir, out);
        try {
            return runSession(runtime, st, out);
        } catch (RuntimeException | IOException | Error e) {
            st.failed(e);                       // whatever stops the run, run.json says so (never left "running")
            throw e;
        }
    }

    private Result runSession(PipelineRuntime runtime, Session st, PrintStream out) throws IOException {
        Path runDir = st.runDir;
        Terminal.printWrapped(out, describe());
        if (plan.backend() == Backend.TTNN) Terminal.printWrapped(out, bridgeLine());
        if (memory != null) Terminal.printWrapped(out, memory.summary());
        if (plan.backend() == Backend.SIM && allLocal(runtime)) {
            String note = collectorNote(plan.schedule().ranks(), plan.schedule().microbatches(), collectors());
            if (note != null) Terminal.printWrapped(out, note);
        }
        if (runDir != null) {
            Terminal.printWrapped(out, "run directory: " + runDir);
            if (plan.backend() == Backend.TTNN) st.record.bridgeLibrary(BridgeLibrary.loaded().orElse(null));
            if (fromConfig) Files.writeString(runDir.resolve("config.yaml"), configYaml(), StandardCharsets.UTF_8);
            data.dataset().tokenizer().save(runDir.resolve("vocab.txt"));
            st.record.write("running", 0, Double.NaN);
        }
        if (!allLocal(runtime)) {
            LinkCheck.Report links = checkLinks(runtime);
            out.print(LinkTable.text(links));
            if (st.record != null) {
                st.record.links(LinkTable.json(links), LinkTable.checkJson(links, plan.activationFrameBytes()));
                st.record.write("running", 0, Double.NaN);
            }
        }
        if (resumeFrom != null) {
            runtime.loadState(resumeFrom.dir(), resumeFrom.optimizerSteps());
            st.first = resumeFrom.step();
            st.done = st.first;
            Terminal.printWrapped(out, "resumed from " + resumeFrom.dir() + " at step " + st.first);
        } else if (initFrom() != null) {
            long t0 = System.nanoTime();
            runtime.loadState(initFrom(), 0);
            Terminal.printWrapped(out, String.format(Locale.ROOT, "initialised from %s (%.1f s; each rank read its own stages' tensors)", initFrom(),
                    (System.nanoTime() - t0) / 1e9));
        }
        if (cfg.training.saveAndExit != null) return saveAndExit(runtime, st, out);
        session = st;
        MetricsServer metricsServer = null;
        if (cfg.telemetry.port > 0) {
            try {
                metricsServer = MetricsServer.start(runtime, cfg.telemetry.bindHost, cfg.telemetry.port);
                metricsServer.totalSteps(steps());
                Terminal.printWrapped(out, "telemetry: " + metricsServer.url() + "/metrics (Prometheus), " + metricsServer.url() + "/status (JSON)");
                if (st.record != null) {
                    st.record.telemetry(metricsServer.url());
                    st.record.write("running", st.done, Double.NaN);        // so `ttpipe top RUN_DIR` finds it now
                }
            } catch (IOException e) {
                Terminal.printWrapped(out, "telemetry: no endpoint (" + cfg.origins.where("telemetry.port") + ": " + e.getMessage()
                        + "; set telemetry.port to a free port, or 0)");
            }
        }
        try {
            return trainSteps(runtime, st, out, metricsServer);
        } finally {
            if (metricsServer != null) metricsServer.close();
        }
    }

    /**
     * TTML's save-and-exit: the weights the job starts from (and the resumed optimizer state) as a checkpoint
     * under {@code training_config.save_and_exit} (its {@code step-N/} and {@code latest}, loadable by
     * init_from, --resume and `ttpipe export`), and no training.
     */
    private Result saveAndExit(PipelineRuntime runtime, Session st, PrintStream out) throws IOException {
        Path root = Path.of(cfg.training.saveAndExit);
        int optimizerSteps = resumeFrom != null ? resumeFrom.optimizerSteps() : 0;
        List<Checkpoints.Saved> saved;
        try (Checkpoints checkpoints = new Checkpoints(this, root, 0, Integer.MAX_VALUE)) {
            checkpoints.save(runtime, st.first, optimizerSteps);
            saved = checkpoints.awaitAll();
        }
        Terminal.printWrapped(out, "save_and_exit: wrote the weights at step " + st.first + " to " + saved.get(saved.size() - 1).dir()
                + " (" + cfg.origins.where("training_config.save_and_exit") + "); not training");
        if (st.record != null) st.record.write("saved and exited (training_config.save_and_exit)", st.first, Double.NaN);
        return new Result(st.losses, Double.NaN, Double.NaN, null, null);
    }

    private Result trainSteps(PipelineRuntime runtime, Session st, PrintStream out, MetricsServer metricsServer) throws IOException {
        int steps = steps();
        int first = st.first;
        Path runDir = st.runDir;
        watchdog(runtime, out);
        Checkpoints checkpoints = checkpoints(runDir);
        Path metricsFile = runDir == null ? null : runDir.resolve("metrics.jsonl");
        // A resume (or a fresh start into a run directory with metrics) goes on appending to the same metrics.jsonl; its
        // first line says so, and from there on its steps supersede any earlier line of the same step.
        StepMetrics.Mark mark = resumeFrom != null ? new StepMetrics.Mark("resume", resumeFrom.step(), resumeFrom.dir())
                : metricsFile != null && Files.isRegularFile(metricsFile) && Files.size(metricsFile) > 0
                ? new StepMetrics.Mark("restart", 0, null) : null;
        BufferedWriter metrics = metricsFile == null ? null
                : Files.newBufferedWriter(metricsFile, StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        TensorBoardEvents tensorboard = runDir == null || !cfg.telemetry.tensorboard ? null
                : TensorBoardEvents.open(runDir.resolve("tensorboard"));
        if (tensorboard != null && mark != null) tensorboard.restartedAt(mark.fromStep() + 1, mark.kind());
        if (metricsServer != null && mark != null) metricsServer.marked(mark);
        long tokensTotal = 0;
        double secondsTotal = 0;
        int optimizerSteps = resumeFrom != null ? resumeFrom.optimizerSteps() : 0;   // steps applied: not the non-finite ones
        int stoppedAt = -1;
        List<Checkpoints.Saved> saves = List.of();
        Double endVal = null;                                       // measured after the last step, before its metrics line
        boolean endMeasured = false;
        try {
            Progress progress = new Progress(out, steps, first, logEvery);
            Stragglers stragglers = new Stragglers(plan, allLocal(runtime), Stragglers.Thresholds.of(cfg.telemetry));
            int recoveries = 0, nonFiniteInARow = 0, lastValStep = 0;
            double lastVal = Double.NaN;                            // the last validation loss (eval_every), on the progress line
            for (int step = first; step < steps; step++) {
                String saveFailed = checkpoints == null ? null : checkpoints.failure();     // at each step boundary
                if (saveFailed != null) throw stopped(saveFailed, step, steps);
                if (preemption.requested() != null) {
                    stoppedAt = step;
                    break;
                }
                Coordinator.StepReport r;
                try {
                    r = runtime.step(step, batches(step));
                } catch (PipelineFailure e) {
                    if (recoveries >= maxRecoveries) throw e;
                    Checkpoints.Found back = recover(runtime, checkpoints, e, ++recoveries, step, out);
                    mark = new StepMetrics.Mark("recovery", back == null ? 0 : back.step(), back == null ? null : back.dir());
                    if (metricsServer != null) metricsServer.marked(mark);
                    step = (back == null ? 0 : back.step()) - 1;
                    optimizerSteps = back == null ? 0 : back.optimizerSteps();
                    nonFiniteInARow = 0;
                    continue;
                }
                if (!r.applied()) {
                    nonFiniteInARow++;
                    out.println();
                    Terminal.printWrapped(out, String.format(Locale.ROOT, "step %d: %s; not applied (%d in a row; training_config.max_nonfinite_steps"
                            + " = %d)", step + 1, r.nonFinite(), nonFiniteInARow, cfg.training.maxNonfiniteSteps));
                    if (nonFiniteInARow >= cfg.training.maxNonfiniteSteps) {
                        throw new PipelineFailure(nonFiniteInARow + " steps in a row (" + (step + 2 - nonFiniteInARow) + ".." + (step + 1)
                                + ") had non-finite values, none applied; the last: " + r.nonFinite() + " (training_config"
                                + ".max_nonfinite_steps = " + cfg.training.maxNonfiniteSteps + "; lower the learning rate or set"
                                + " training_config.clip_grad_norm_max_norm)");
                    }
                } else {
                    nonFiniteInARow = 0;
                    optimizerSteps++;
                }
                StepAnalysis a = StepAnalysis.of(plan.schedule(), r);
                st.stepped(step, r, a);
                for (String line : stragglers.observe(r)) {
                    progress.note(line.startsWith(" ") ? line : TextWrap.wrap("step " + (step + 1) + ": " + line, Terminal.columns(), 2));
                }
                if (metricsServer != null) metricsServer.stepped(r, a, stragglers.view());
                Double val = null;
                boolean end = step + 1 == steps;
                if (end ? plan.backend() != Backend.SIM : cfg.training.evalEvery > 0 && (step + 1) % cfg.training.evalEvery == 0) {
                    val = validationLoss(runtime, end ? "at the end" : "after step " + (step + 1), out);
                    if (end) {
                        endVal = val;
                        endMeasured = true;
                    }
                    if (val != null && Double.isNaN(val)) val = null;              // no validation data
                    if (val != null) {
                        lastVal = val;
                        lastValStep = step + 1;
                        if (metricsServer != null) metricsServer.validated(step + 1, val);
                    }
                }
                if (tensorboard != null) {
                    if (mark != null && mark.kind().equals("recovery")) tensorboard.restartedAt(mark.fromStep() + 1, "recovery");
                    tensorboard.scalars(step + 1, StepMetrics.scalars(r, a, val));
                }
                if (metrics != null) {
                    metrics.write(StepMetrics.jsonLine(r, a, val, plan.schedule(), mark));
                    mark = null;
                    metrics.newLine();
                    metrics.flush();
                }
                if (checkpoints != null && checkpoints.due(step + 1, steps)) {
                    try {
                        checkpoints.save(runtime, step + 1, optimizerSteps);
                    } catch (PipelineFailure e) {
                        throw stopped(e.getMessage(), step + 1, steps);
                    }
                }
                if (step > first) {             // the first step includes warm-up (JIT, allocations)
                    tokensTotal += r.tokens();
                    secondsTotal += r.seconds();
                }
                double tps = r.tokens() / Math.max(1e-9, r.seconds());
                progress.update(step + 1, String.format(Locale.ROOT, "loss %s%s, %s tok/s, bubble %.0f%%%s",
                        lossText(r.loss()), Double.isNaN(lastVal) ? "" : ", val " + lossText(lastVal) + " @" + lastValStep, human(tps),
                        100 * a.bubble(),
                        a.predicted() == null ? "" : String.format(Locale.ROOT, " (sim %.0f%%)", 100 * a.predicted().bubbleFraction())));
            }
            if (checkpoints != null) saves = checkpoints.awaitAll();     // a save that failed fails the run like a failed step
        } catch (RuntimeException e) {
            st.failed(e);
            if (checkpoints != null) {
                // the checkpoints taken before the failure, finished (a dead rank's never are: `latest` keeps naming the one before)
                try (checkpoints) {
                    checkpoints.abandonPending(FINISH_SAVES_ON_FAILURE_SECONDS);
                } catch (RuntimeException ignored) {
                    // the failure is what gets reported
                }
            }
            try {
                st.writeTrace();                                       // the timeline up to the failure
            } catch (IOException | RuntimeException ignored) {
                // the failure is what gets reported
            }
            st.failed();
            throw e;
        } finally {
            if (metrics != null) metrics.close();
            if (tensorboard != null) tensorboard.close();
        }
        synchronized (st) {
            if (st.finished) return new Result(st.losses, Double.NaN, Double.NaN, st.last, null);   // interrupted meanwhile
            st.finished = true;
        }
        if (stoppedAt >= 0) return preempted(runtime, st, checkpoints, stoppedAt, optimizerSteps, out);
        if (checkpoints != null) checkpoints.close();
        st.writeTrace();
        Coordinator.StepReport last = st.last;
        double[] losses = st.losses;
        out.println();
        double tokensPerSecond = secondsTotal > 0 ? tokensTotal / secondsTotal : Double.NaN;
        Terminal.printWrapped(out, String.format(Locale.ROOT, "%s over steps %d..%d; %s tokens/s (steps %d..%d)",
                Double.isNaN(last.loss()) ? "no loss values (the sim backend models time only)"
                        : "loss " + lossText(losses[first]) + " -> " + lossText(last.loss()), first + 1, steps,
                secondsTotal > 0 ? human(tokensPerSecond) : "n/a", first + 2, steps));
        if (!saves.isEmpty()) Terminal.printWrapped(out, Checkpoints.summary(saves));
        StageTable.print(out, plan, st.lastAnalysis, last);
        double val = Double.NaN;
        if (plan.backend() == Backend.SIM) {
            Terminal.printWrapped(out, "(sim backend: no values, so no validation loss, samples or checkpoints)");
        } else {
            Double v = endMeasured ? endVal : validationLoss(runtime, "at the end", out);
            if (v != null) {
                val = v;
                out.printf(Locale.ROOT, "validation loss: %s nats/%s%n", lossText(val), data.dataset().tokenizer().name().equals("char") ? "char" : "token");
            }
            if (allLocal(runtime)) {
                printSamples(runtime, out);
            } else {
                Terminal.printWrapped(out, "(multi-process job: samples need every stage in one process; run `ttpipe train` with"
                        + " the same config to see them)");
            }
        }
        if (runDir != null) {
            st.record.write("finished", steps, val);
            Path trace = runDir.resolve("trace.json");
            long traceBytes = Files.isRegularFile(trace) ? Files.size(trace) : 0;
            Terminal.printWrapped(out, "wrote " + runDir.resolve("metrics.jsonl") + ", " + trace + " (" + st.tracedSteps() + ", "
                    + Sizes.format(traceBytes) + "; open in https://ui.perfetto.dev), run.json, stdout.log");
            String large = largeTraceNote(traceBytes, cfg.telemetry.traceSteps);
            if (large != null) Terminal.printWrapped(out, large);
        }
        return new Result(losses, tokensPerSecond, val, last, null);
    }

    /**
     * Preempted before step {@code step} (0-based: {@code step} steps are done): saves a checkpoint of this step
     * boundary unless this run's checkpoints hold one, waits for every save, writes the trace, the summary so far
     * and run.json (status {@code preempted}), and prints the command that resumes.
     */
    private Result preempted(PipelineRuntime runtime, Session st, Checkpoints checkpoints, int step, int optimizerSteps,
                             PrintStream out) throws IOException {
        Preemption.Request why = preemption.requested();
        out.println();
        String saved;
        if (checkpoints == null) {
            saved = "no checkpoint (" + (plan.backend() == Backend.SIM ? "the sim backend saves none" : "no run directory") + ")";
        } else {
            try (checkpoints) {
                checkpoints.awaitAll();                             // the interval's saves, finished first
                if (step > 0 && !checkpoints.has(step)) {
                    checkpoints.save(runtime, step, optimizerSteps);
                    checkpoints.awaitAll();
                }
            }
            saved = step == 0 ? "no step done, no checkpoint" : "the checkpoint of step " + step + " is saved ("
                    + checkpoints.root().resolve(Checkpoints.dirName(step)) + ")";
        }
        st.writeTrace();
        String resume = st.runDir == null ? null : Preemption.resumeCommand(invocation, st.runDir);
        if (st.record != null) {
            st.record.preempted(why.describe(), resume);
            st.record.write("preempted", step, Double.NaN);
        }
        Terminal.printWrapped(out, "preempted (" + why.describe() + ") at step " + step + " of " + steps() + ": " + saved);
        if (st.last != null) {
            out.printf(Locale.ROOT, "loss %s -> %s over steps %d..%d%n", lossText(st.losses[st.first]), lossText(st.last.loss()),
                    st.first + 1, step);
            StageTable.print(out, plan, st.lastAnalysis, st.last);
        }
        if (resume != null) {
            out.println(TextWrap.wrapCommand("resume with: " + resume, Terminal.columns(), 4));
            if (!allLocal(runtime)) Terminal.printWrapped(out, "(every worker, as it was started)");
        }
        out.flush();
        return new Result(st.losses, Double.NaN, Double.NaN, st.last, why);
    }

    /** A checkpoint that was not saved: it stops the job at the step boundary where that is known. */
    private static PipelineFailure stopped(String saveFailed, int stepsDone, int steps) {
        return new PipelineFailure(saveFailed + "; the job stopped after step " + stepsDone + " of " + steps);
    }

    /**
     * After step {@code step} failed: every rank rejoins (a dead rank's replacement included), the
     * weights and optimizer state roll back to the newest checkpoint (this run's, else the one it
     * resumed from, else the initial weights), which is returned (null: the initial weights).
     */
    private Checkpoints.Found recover(PipelineRuntime runtime, Checkpoints checkpoints, PipelineFailure failure, int recovery, int step,
                        PrintStream out) {
        long t0 = System.nanoTime();
        out.println();
        Terminal.printWrapped(out, failure.getMessage());
        Terminal.printWrapped(out, "recovering (" + recovery + " of " + maxRecoveries + ", training_config.max_restarts): every rank rejoins the job,"
                + " a restarted one too, and rolls back");
        runtime.rejoin(RECOVERY_TIMEOUT);
        double rejoined = (System.nanoTime() - t0) / 1e9;
        if (!allLocal(runtime)) {
            try {
                out.println(LinkTable.summary(checkLinks(runtime)));   // a restarted rank's links too
            } catch (PipelineFailure e) {
                throw new PipelineFailure("recovery: " + e.getMessage(), e);
            }
        }
        Checkpoints.Found ck = checkpoints == null ? null : checkpoints.abandonPending();
        if (ck == null) ck = resumeFrom;
        int back = ck == null ? 0 : ck.step();
        int fromMemory = 0;
        if (ck != null) fromMemory = runtime.loadState(ck.dir(), ck.step(), ck.optimizerSteps());
        else if (initFrom() != null) runtime.loadState(initFrom(), 0);
        else runtime.reinitialize();
        Terminal.printWrapped(out, String.format(Locale.ROOT, "recovered in %.1f s (every rank joined after %.1f s; %d of %d ranks restored from their"
                        + " copy in memory, the others from the disk): back at %s; steps %d..%d are redone",
                (System.nanoTime() - t0) / 1e9, rejoined, fromMemory, plan.ranks(),
                ck != null ? "the checkpoint of step " + back + " (" + ck.dir() + ")" : "the initial weights (no checkpoint yet)",
                back + 1, step + 1));
        return ck;
    }

    /** Writes to two streams (the console and the run's stdout.log). */
    private static final class Tee extends OutputStream {
        private final OutputStream a, b;

        Tee(OutputStream a, OutputStream b) {
            this.a = a;
            this.b = b;
        }

        @Override
        public void write(int c) throws IOException {
            a.write(c);
            b.write(c);
        }

        @Override
        public void write(byte[] buf, int off, int len) throws IOException {
            a.write(buf, off, len);
            b.write(buf, off, len);
        }

        @Override
        public void flush() throws IOException {
            a.flush();
            b.flush();
        }
    }

    /**
     * A multi-process job's link check ({@link LinkCheck}), as multihost_config says: before step 1 and after a
     * recovery, so that a missing or slow link fails the start in seconds, naming it.
     */
    public LinkCheck.Report checkLinks(PipelineRuntime runtime) {
        return runtime.checkLinks(cfg.multihost.linkCheckBytes, Duration.ofMillis(Math.round(cfg.multihost.linkCheckTimeoutS * 1000)));
    }

    /** How to open a trace.json of {@code bytes} (over {@link #LARGE_TRACE_BYTES}), or null for a smaller one. */
    static String largeTraceNote(long bytes, int traceSteps) {
        if (bytes <= LARGE_TRACE_BYTES) return null;
        return "trace.json is " + Sizes.format(bytes) + ": Perfetto in a browser holds a whole trace in about 2 GB of memory,"
                + " so open one this large through Perfetto's trace_processor (docs/telemetry.md#large-traces), or keep fewer"
                + " steps with telemetry.trace_steps (now " + traceSteps + ")";
    }

    /** At least this many ranks x microbatches of the sim backend in one JVM: G1's pauses grow long enough to show. */
    static final long SIM_PAUSES_SHOW = CollectorRestart.DEFAULT_ABOVE;

    /**
     * A note for a sim run of {@code ranks x microbatches} in this JVM under G1 ({@code collectors}: the collectors'
     * names), or null: every rank's stash and actions are Java objects, and at 256 x 1024 the young collections copy
     * about 100 MB each, pausing 100-200 ms, which lengthen a pass where they land; ZGC does not pause for it. Such a
     * run is under G1 only where someone chose it or its heap, the JVM has no ZGC, or the machine has too little memory for
     * ZGC's heap: otherwise {@link CollectorRestart} restarted it.
     */
    static String collectorNote(int ranks, int microbatches, List<String> collectors) {
        if ((long) ranks * microbatches < SIM_PAUSES_SHOW || collectors.stream().noneMatch(c -> c.startsWith("G1"))) return null;
        return "note: " + ranks + " ranks x " + microbatches + " microbatches of the sim backend in one JVM: the G1 collector"
                + " pauses 100-200 ms at this size, and where a pause lands it lengthens a pass against the simulator"
                + " (12-34% over in 5 of 43 runs of 256 x 1024 measured); TTPIPE_JAVA_OPTS='-XX:+UseZGC "
                + CollectorRestart.heapFlag(ranks, microbatches) + "' avoids it (docs/backends.md#sim)";
    }

    /** The names of this JVM's garbage collectors ({@code G1 Young Generation}, {@code ZGC Cycles}, ...). */
    private static List<String> collectors() {
        List<String> names = new ArrayList<>();
        for (var gc : java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()) names.add(gc.getName());
        return names;
    }

    private static boolean allLocal(PipelineRuntime runtime) {
        return runtime.deployment() == null;
    }

    /** One paragraph: the model, the pipeline, the data and the split. */
    public String describe() {
        StringBuilder sb = new StringBuilder();
        sb.append(String.format(Locale.ROOT, "ttpipe train: %s %d blocks x %d dim, %d heads, vocab %d | %d stages on %d ranks, %s%s, %d microbatches of %d x %d tokens | %s backend, mesh %s per rank%s",
                plan.model().type().name().toLowerCase(Locale.ROOT), plan.model().numBlocks(), plan.model().embeddingDim(),
                plan.model().numHeads(), plan.model().vocabSize(), plan.stages(), plan.ranks(), plan.schedule().name(),
                plan.readyFirst() ? " (ready-first)" : "", plan.microbatches(), plan.microbatchSize(), plan.seqLen(),
                plan.backend(), plan.rankMesh(), parallelText()));
        sb.append("\nnumerics: ").append(numerics());
        sb.append("\ndata: ").append(data.description());
        int[] blocks = plan.slices().stream().mapToInt(StageSlice::blocks).toArray();
        sb.append("\nblocks per stage: ").append(blocksPerStage(blocks, Terminal.columns() - "blocks per stage: ".length()));
        return sb.toString();
    }

    /**
     * The split as a list, {@code [2, 2, 1, 1]}, when that fits {@code width} columns; else, when shorter, by runs:
     * {@code 2 (stages 0-5), 1 (stages 6-255)}, so 256 stages take one line instead of ten.
     */
    static String blocksPerStage(int[] blocks, int width) {
        StringBuilder list = new StringBuilder("[");
        for (int s = 0; s < blocks.length; s++) list.append(s == 0 ? "" : ", ").append(blocks[s]);
        list.append(']');
        if (list.length() <= width) return list.toString();
        StringBuilder runs = new StringBuilder();
        for (int s = 0; s < blocks.length; ) {
            int end = s;
            while (end + 1 < blocks.length && blocks[end + 1] == blocks[s]) end++;
            runs.append(runs.length() == 0 ? "" : ", ").append(blocks[s])
                    .append(end == s ? " (stage " + s + ")" : " (stages " + s + "-" + end + ")");
            s = end + 1;
        }
        return runs.length() < list.length() ? runs.toString() : list.toString();
    }

    /** The dtype, recompute, gradient accumulation and (cpu backend) the matmul engine, in one line. */
    private String numerics() {
        var m = plan.model();
        String text = m.dtype().name().toLowerCase(Locale.ROOT) + ", recompute " + (m.recompute() ? "on (runner_type"
                + " memory_efficient)" : "off") + ", gradient accumulation " + plan.accumulation();
        if (plan.backend() != Backend.CPU) return text;
        String engine = m.dtype() == DType.BF16 && CpuKernels.bf16Matmul() != null ? CpuKernels.bf16Matmul() : CpuKernels.matmul();
        if (engine == null) return text + ", matmul chosen when the devices open";
        int paren = engine.indexOf(" (");
        return text + ", matmul " + (paren > 0 ? engine.substring(0, paren) : engine) + " (run.json has the details)";
    }

    /**
     * Backend ttnn: the bridge library that runs, in one line (the TTNN C++ shim, or the reference C emulation
     * when no TTNN library was found), with what it says it is and where it was loaded from.
     */
    private static String bridgeLine() {
        return "bridge library: " + BridgeLibrary.loaded().map(BridgeLibrary.Loaded::describe)
                .orElse("none loaded in this process (each rank's process loads its own)");
    }

    private String parallelText() {
        var p = plan.parallelism();
        if (!p.ddp() && !p.tp()) return "";
        return " (" + (p.ddp() ? "DDP " + p.ddpSize() : "") + (p.ddp() && p.tp() ? " x " : "") + (p.tp() ? "TP " + p.tpSize() : "") + ")";
    }

    /** All stages in order, gathered from their ranks (the pipeline is idle between steps). */
    static List<Stage> stagesInOrder(PipelineRuntime runtime) {
        Stage[] ordered = new Stage[runtime.plan().stages()];
        for (int r = 0; r < runtime.plan().ranks(); r++) {
            List<Stage> local = runtime.onDevice(r, stages -> stages);
            for (Stage s : local) ordered[s.index()] = s;
        }
        return List.of(ordered);
    }

    /**
     * Mean loss over {@code eval_batches} validation batches (NaN when the data holds none): in this process when
     * every stage is here ({@link #localValidationLoss}), else pipelined through the ranks, wherever they run
     * ({@link #pipelinedValidationLoss}). Both give the same bits.
     */
    public double validationLoss(PipelineRuntime runtime) {
        return allLocal(runtime) ? localValidationLoss(runtime) : pipelinedValidationLoss(runtime);
    }

    /**
     * {@link #validationLoss}, or null when a pipelined evaluation failed (a rank died meanwhile: the next step
     * fails too, and recovers), which is then printed, {@code when} saying at which point of the run.
     */
    private Double validationLoss(PipelineRuntime runtime, String when, PrintStream out) {
        try {
            return validationLoss(runtime);
        } catch (PipelineFailure e) {
            out.println();
            Terminal.printWrapped(out, "validation " + when + " failed: " + e.getMessage());
            return null;
        }
    }

    /** Every stage gathered in this process, the validation batches run through them one after another. */
    public double localValidationLoss(PipelineRuntime runtime) {
        List<Batch> val = validationBatches();
        if (val.isEmpty()) return Double.NaN;
        List<Stage> stages = stagesInOrder(runtime);
        return runtime.onDevice(0, ignored -> Evaluation.meanLoss(stages, val));
    }

    /**
     * Between steps, the validation batches pipelined through the job's ranks as microbatches of forward-only
     * passes ({@link PipelineRuntime#eval}), the ranks in this process or in others; the losses are added in
     * batch order, as {@link Evaluation#meanLoss} adds them.
     */
    public double pipelinedValidationLoss(PipelineRuntime runtime) {
        List<Batch> val = validationBatches();
        return val.isEmpty() ? Double.NaN : runtime.eval(val).loss();
    }

    /**
     * {@code eval_batches} validation batches of up to 16 sequences (the batch size, a multiple of the DDP size),
     * none when the data holds too few validation tokens.
     */
    private List<Batch> validationBatches() {
        TextDataset d = data.dataset();
        List<Batch> val = new ArrayList<>();
        if (d.validationTokens() < plan.seqLen() + 2) return val;
        int b = Math.max(1, Math.min(plan.batchSize(), 16));
        if (plan.parallelism().ddp()) b = Math.max(plan.parallelism().ddpSize(), b - b % plan.parallelism().ddpSize());
        for (int i = 0; i < cfg.training.evalBatches; i++) val.add(d.validationBatch(plan.seed(), i, b, plan.seqLen()));
        return val;
    }

    private void printSamples(PipelineRuntime runtime, PrintStream out) {
        List<Stage> stages = stagesInOrder(runtime);
        var tok = data.dataset().tokenizer();
        double temperature = cfg.eval.temperature;
        // A model with more ids than the tokenizer (TTML pads vocab_size; an imported model) samples the tokenizer's ids only.
        out.println("samples (" + (temperature > 0 ? "temperature " + temperature : "greedy") + "):");
        if (data.arithmetic()) {
            Random rng = new Random(cfg.training.seed + 1);
            int correct = 0, n = 8;
            for (int i = 0; i < n; i++) {
                int x = rng.nextInt(TrainingData.ARITHMETIC_MAX + 1), y = rng.nextInt(TrainingData.ARITHMETIC_MAX + 1);
                String prompt = "\n" + x + "+" + y + "=";
                int[] ids = runtime.onDevice(0, ignored -> Evaluation.generate(stages, tok.encode(prompt), 4, temperature,
                        cfg.eval.topK, cfg.training.seed, tok.vocabSize()));
                String text = tok.decode(ids).substring(1);
                int nl = text.indexOf('\n');
                String line = nl < 0 ? text : text.substring(0, nl);
                boolean ok = ArithmeticCorpus.isCorrect(line);
                if (ok) correct++;
                out.printf("  %-10s %s%n", line, ok ? "right" : "wrong (" + (x + y) + ")");
            }
            out.printf("%d of %d sums right%n", correct, n);
        } else {
            String prompt = cfg.eval.prompt != null && tok.canEncode(cfg.eval.prompt) ? cfg.eval.prompt
                    : tok.decode(data.dataset().validationBatch(plan.seed(), 0, 1, Math.min(16, plan.seqLen())).inputs());
            int n = Math.max(1, cfg.eval.sampleTokens);
            int[] ids = runtime.onDevice(0, ignored -> Evaluation.generate(stages, tok.encode(prompt), n, temperature,
                    cfg.eval.topK, cfg.training.seed, tok.vocabSize()));
            out.println("---");
            out.println(TextWrap.wrap(tok.decode(ids), Terminal.columns(), 0));      // each line of the text at the width
            out.println("---");
        }
    }

    public static String lossText(double loss) {
        return Double.isNaN(loss) ? "n/a" : String.format(Locale.ROOT, "%.4f", loss);
    }

    public static String human(double v) {
        if (v >= 1e6) return String.format(Locale.ROOT, "%.2fM", v / 1e6);
        if (v >= 1e3) return String.format(Locale.ROOT, "%.1fk", v / 1e3);
        return String.format(Locale.ROOT, "%.0f", v);
    }
}

package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.cluster.ClusterSettings;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.cpu.CpuMeshDevice;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.checkpoint.CheckpointException;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.transport.AeronTransport;
import dev.ttpipe.transport.FabricTransport;
import dev.ttpipe.transport.LocalTransport;
import dev.ttpipe.transport.Transport;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.javadsl.AskPattern;
import org.apache.pekko.pattern.StatusReply;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.IntConsumer;

/**
 * A pipeline job inside one JVM: one ActorSystem, a {@link HostGuardian} with a StageActor per rank,
 * the Coordinator, one mesh carved into a submesh per rank, and the in-process transport. The
 * calling thread drives it step by step; everything else runs in actors and device queues.
 */
public final class PipelineRuntime implements AutoCloseable {
    private final JobPlan plan;
    private final MeshDevice mesh;
    private final Transport transport;
    private final ActorSystem<HostGuardian.Command> system;
    private final ActorRef<Coordinator.Command> coordinator;
    private final Duration stepTimeout;

    private final Deployment deployment;
    private boolean closed;
    private final CompletableFuture<String> ended;

    private PipelineRuntime(JobPlan plan, MeshDevice mesh, Transport transport, ActorSystem<HostGuardian.Command> system,
                            Duration stepTimeout, Deployment deployment, CompletableFuture<String> ended,
                            Duration joinTimeout, boolean hostsCoordinator) {
        this.plan = plan;
        this.mesh = mesh;
        this.transport = transport;
        this.system = system;
        this.stepTimeout = stepTimeout;
        this.deployment = deployment;
        this.ended = ended;
        this.coordinator = hostsCoordinator ? awaitCoordinator(joinTimeout) : null;
    }

    private ActorRef<Coordinator.Command> awaitCoordinator(Duration joinTimeout) {
        try {
            return ask(system, HostGuardian.GetCoordinator::new, joinTimeout);
        } catch (PipelineFailure e) {
            if (deployment == null) throw e;
            List<Integer> missing = ask(system, HostGuardian.GetMissing::new, Duration.ofSeconds(5));
            StringBuilder sb = new StringBuilder();
            for (int r : missing) {
                sb.append(sb.length() == 0 ? "" : ", ").append("rank ").append(r).append(" (")
                        .append(deployment.rank(r).controlAddress()).append(")");
            }
            throw new PipelineFailure(sb + " did not join within " + joinTimeout.toSeconds() + " s: start `ttpipe worker --rank R "
                    + "CONFIG` on each, and check it can reach the seed " + deployment.seed().controlAddress()
                    + (deployment.tls() == null ? "" : " and that every rank's multihost_config.tls.trust_store holds the others'"
                    + " certificates (or their CA)"));
        }
    }

    /** Opens the mesh and starts the actors. */
    public static PipelineRuntime start(JobPlan plan) {
        return start(plan, Faults.NONE);
    }

    /**
     * Opens the plan's mesh of {@code shape}. On the cpu backend with bf16 weights, the bf16 matmul engine is chosen
     * here rather than at the first product, so the run's header and run.json name the engine bf16 products run on.
     */
    private static MeshDevice open(JobPlan plan, MeshShape shape) {
        MeshDevice mesh = Backends.open(plan.backend().id(), shape, plan.meshOptions());
        if (mesh instanceof CpuMeshDevice cpu && plan.model().dtype() == DType.BF16) cpu.bf16MatmulKernel();
        return mesh;
    }

    /** Opens the mesh and starts the actors, with {@code faults} injected (tests, {@code ttpipe bench faults}). */
    public static PipelineRuntime start(JobPlan plan, Faults faults) {
        return start(plan, Duration.ofMinutes(30), faults);
    }

    public static PipelineRuntime start(JobPlan plan, Duration stepTimeout, Faults faults) {
        MeshShape rankMesh = plan.rankMesh();
        MeshDevice mesh = open(plan, new MeshShape(rankMesh.rows() * plan.ranks(), rankMesh.cols()));
        try {
            List<Submesh> subs = mesh.createSubmeshes(rankMesh);
            Map<Integer, Submesh> byRank = new HashMap<>();
            for (int r = 0; r < plan.ranks(); r++) byRank.put(r, subs.get(r));
            Transport transport = inProcessTransport(plan, mesh, byRank, faults);
            ActorSystem<HostGuardian.Command> system = ActorSystem.create(
                    HostGuardian.create(plan, byRank, transport, faults), "ttpipe", localConfig());
            return new PipelineRuntime(plan, mesh, transport, system, stepTimeout, null, null, Duration.ofSeconds(30), true);
        } catch (RuntimeException e) {
            mesh.close();
            throw e;
        }
    }

    /**
     * The transport between ranks of one process: {@code local} hands tensors over, {@code aeron}
     * moves them through an embedded media driver over IPC, {@code fabric} device to device through
     * the mesh's sockets.
     */
    static Transport inProcessTransport(JobPlan plan, MeshDevice mesh, Map<Integer, Submesh> byRank, Faults faults) {
        switch (plan.transport()) {
            case AERON: {
                int[] ranks = new int[plan.ranks()];
                for (int r = 0; r < ranks.length; r++) ranks[r] = r;
                return AeronTransport.start(AeronTransport.Config.ipc(plan.jobId(), ranks).withFault(faults.frames()));
            }
            case FABRIC:
                return new FabricTransport(mesh, byRank);
            default:
                return new LocalTransport();
        }
    }

    /** Pekko settings for a single-process job: local provider, logging through SLF4J. */
    static Config localConfig() {
        return ConfigFactory.parseString(String.join("\n",
                "pekko.actor.provider = local",
                "pekko.loggers = [\"org.apache.pekko.event.slf4j.Slf4jLogger\"]",
                "pekko.logging-filter = \"org.apache.pekko.event.slf4j.Slf4jLoggingFilter\"",
                "pekko.loglevel = INFO",
                "pekko.log-dead-letters = off",
                "pekko.log-dead-letters-during-shutdown = off",
                "pekko.coordinated-shutdown.run-by-jvm-shutdown-hook = off"))
                .withFallback(ConfigFactory.load());
    }

    /**
     * One worker process of a multi-host job: rank {@code rank}'s submesh, its StageActor, the Aeron
     * transport to the other ranks, a Pekko Cluster node bound to the rank's host and control port
     * (rank 0 is the seed). On rank 0 it waits up to {@code joinTimeout} for every rank to join and
     * then drives the job like {@link #start}; other ranks serve until rank 0 ends the job
     * ({@link #awaitEnd}).
     */
    public static PipelineRuntime startWorker(JobPlan plan, Deployment deployment, int rank, Transport transport,
                                              Duration joinTimeout) {
        return startWorker(plan, deployment, rank, transport, joinTimeout, p -> { }, false);
    }

    /**
     * {@link #startWorker(JobPlan, Deployment, int, Transport, Duration)}, with {@code onPreempt} told, on rank 0, when
     * a worker passes on a signal ({@link #relayPreemption}) and, on the other ranks, when rank 0 ends the job for one.
     * {@code killDeclaredDead}: every worker is a child of one {@code ttpipe launch} here, which starts again a worker
     * that dies: the process of a rank declared dead (silent for longer than its liveness grace) is killed.
     */
    public static PipelineRuntime startWorker(JobPlan plan, Deployment deployment, int rank, Transport transport,
                                              Duration joinTimeout, Consumer<HostGuardian.Preempt> onPreempt,
                                              boolean killDeclaredDead) {
        MeshDevice mesh = open(plan, plan.rankMesh());
        try {
            Map<Integer, Submesh> byRank = Map.of(rank, mesh.createSubmeshes(plan.rankMesh()).get(0));
            CompletableFuture<String> ended = new CompletableFuture<>();
            AtomicReference<Consumer<String>> notices = new AtomicReference<>(HostGuardian.Liveness.PRINTED.notices());
            HostGuardian.Liveness liveness = new HostGuardian.Liveness(killDeclaredDead, line -> notices.get().accept(line));
            ActorSystem<HostGuardian.Command> system = ClusterSettings.startSystem(
                    HostGuardian.createWorker(plan, byRank, transport, deployment, rank == 0, ended, onPreempt, liveness),
                    deployment, rank);
            endWithNode(system, ended);
            try {
                if (rank != 0) ClusterSettings.awaitJoined(system, deployment, joinTimeout, ended::isDone);
                PipelineRuntime runtime = new PipelineRuntime(plan, mesh, transport, system, Duration.ofMinutes(30), deployment,
                        ended, joinTimeout, rank == 0);
                runtime.notices = notices;
                return runtime;
            } catch (RuntimeException e) {
                system.terminate();
                throw e;
            }
        } catch (RuntimeException e) {
            transport.close();
            mesh.close();
            throw e;
        }
    }

    /** A node that the others removed from the cluster shuts itself down: the worker ends with it, not waits forever. */
    private static void endWithNode(ActorSystem<?> system, CompletableFuture<String> ended) {
        system.getWhenTerminated().thenRun(() -> ended.complete("this worker's cluster node shut down before rank 0 ended"
                + " the job (it was removed from the cluster)"));
    }

    /**
     * {@link #startWorker(JobPlan, Deployment, int, Transport, Duration, Consumer)} where some ranks' hosts are not known
     * ({@link Deployment#announcing()}; this rank's own endpoint is set): the cluster node starts first and joins
     * rank 0, the ranks exchange their endpoints through it ({@link Rendezvous}, up to {@code joinTimeout}), and
     * only then does {@code transportFor} start the transport with every rank's, and the actors begin.
     * {@link #deployment()} then holds every rank's endpoint.
     *
     * @param source the launcher that named rank 0's host, for messages
     */
    public static PipelineRuntime startAnnouncing(JobPlan plan, Deployment deployment, int rank,
                                                  Function<Deployment, Transport> transportFor, Duration joinTimeout,
                                                  Consumer<HostGuardian.Preempt> onPreempt, String source) {
        MeshDevice mesh = open(plan, plan.rankMesh());
        ActorSystem<HostGuardian.Command> system = null;
        Transport transport = null;
        try {
            Map<Integer, Submesh> byRank = Map.of(rank, mesh.createSubmeshes(plan.rankMesh()).get(0));
            CompletableFuture<String> ended = new CompletableFuture<>();
            AtomicReference<Consumer<String>> notices = new AtomicReference<>(HostGuardian.Liveness.PRINTED.notices());
            // never under launch (it names every rank's host): a rank declared dead is not killed here
            HostGuardian.Liveness liveness = new HostGuardian.Liveness(false, line -> notices.get().accept(line));
            system = ClusterSettings.startSystem(
                    HostGuardian.createDeferredWorker(plan, byRank, rank == 0, ended, onPreempt, liveness), deployment, rank);
            endWithNode(system, ended);
            if (rank != 0) ClusterSettings.awaitJoined(system, deployment, joinTimeout, ended::isDone);
            Deployment everyRank = Rendezvous.exchange(system, deployment, rank, joinTimeout, source);
            transport = transportFor.apply(everyRank);
            system.tell(new HostGuardian.Begin(transport, everyRank));
            PipelineRuntime runtime = new PipelineRuntime(plan, mesh, transport, system, Duration.ofMinutes(30), everyRank,
                    ended, joinTimeout, rank == 0);
            runtime.notices = notices;
            return runtime;
        } catch (RuntimeException e) {
            if (system != null) system.terminate();
            if (transport != null) transport.close();
            mesh.close();
            throw e;
        }
    }

    /** On a worker that is not rank 0: waits until the job ends; returns null when it ended normally, else why. */
    public String awaitEnd() throws InterruptedException {
        try {
            return ended.get();
        } catch (ExecutionException e) {
            return String.valueOf(e.getCause());
        }
    }

    public JobPlan plan() {
        return plan;
    }

    public MeshDevice mesh() {
        return mesh;
    }

    public Transport transport() {
        return transport;
    }

    /**
     * Turns on the hang watchdog: while a step runs, when no rank has finished an action for
     * {@code warnAfter}, {@code warn} gets the diagnosis (each rank's state and the blocking chain), again
     * every {@code warnAfter} while it lasts; with {@code stepTimeout} > 0 a step that takes longer fails
     * with that diagnosis.
     */
    public void watchdog(Duration warnAfter, Duration stepTimeout, Consumer<String> warn) {
        this.warnAfter = warnAfter;
        this.watchdogStepTimeout = stepTimeout;
        this.warn = warn;
    }

    /**
     * Where a worker's notices about a rank that does not answer go (multihost_config.liveness_grace_s): this
     * process's stdout until set.
     */
    public void notices(Consumer<String> to) {
        notices.set(to);
    }

    private AtomicReference<Consumer<String>> notices = new AtomicReference<>();
    private Duration warnAfter;
    private Duration watchdogStepTimeout = Duration.ZERO;
    private Consumer<String> warn;

    /** Runs one optimizer step; throws {@link PipelineFailure} naming where it failed. */
    public Coordinator.StepReport step(int step, List<Batch> batches) {
        CompletionStage<Coordinator.StepReport> f = AskPattern.askWithStatus(coordinator,
                r -> new Coordinator.RunStep(step, batches, r), stepTimeout, system.scheduler());
        try {
            if (warnAfter != null) watch(step, f.toCompletableFuture());
            return await(f, coordinator, stepTimeout);
        } catch (PipelineFailure e) {
            throw new PipelineFailure("step " + (step + 1) + " failed: " + e.getMessage(), e.getCause());
        }
    }

    /**
     * Evaluation: {@code batches} (all of one size and sequence length) pipelined over the ranks as microbatches,
     * each scored by the last stage, on a forward-only plan ({@link JobPlan.Builder#forwardOnly}) or between the
     * steps of a training job, whose ranks may be in other processes ({@link JobPlan#evalSchedule}); throws
     * {@link PipelineFailure} naming where it failed.
     */
    public Coordinator.EvalReport eval(List<Batch> batches) {
        return await(AskPattern.askWithStatus(coordinator, r -> new Coordinator.RunEval(batches, r), stepTimeout, system.scheduler()),
                coordinator, stepTimeout);
    }

    /**
     * Generation on a forward-only plan of at least {@code prompt.length} one-token microbatches: the prompt
     * pipelined through the ranks, then {@code n} new tokens, each picked by the Coordinator from the last
     * stage's logits ({@link dev.ttpipe.stages.Sampler}); {@code onToken} sees each as it comes, on the
     * Coordinator's thread. Each rank keeps its stages' key/value caches.
     */
    public Coordinator.GenerateReport generate(int[] prompt, int n, double temperature, int topK, long seed, int sampledIds,
                                               IntConsumer onToken) {
        return await(AskPattern.askWithStatus(coordinator, r -> new Coordinator.RunGenerate(prompt, n, temperature, topK, seed,
                sampledIds, onToken, r), stepTimeout, system.scheduler()), coordinator, stepTimeout);
    }

    /** Waits for the step in one-second slices, asking every rank what it does when nothing has finished for a while. */
    private void watch(int step, CompletableFuture<Coordinator.StepReport> f) {
        long start = System.nanoTime();
        long lastWarn = 0;
        while (!f.isDone()) {
            try {
                f.get(1, TimeUnit.SECONDS);
                return;
            } catch (TimeoutException e) {
                // look at the ranks
            } catch (ExecutionException e) {
                return;                                            // reported by await
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
            long now = System.nanoTime();
            long stepMs = (now - start) / 1_000_000;
            boolean timedOut = !watchdogStepTimeout.isZero() && stepMs >= watchdogStepTimeout.toMillis();
            if (stepMs < warnAfter.toMillis() && !timedOut) continue;
            List<StageStats> stats = new ArrayList<>();
            for (int r = 0; r < plan.ranks(); r++) {
                try {
                    stats.add(stats(r, Duration.ofSeconds(2)));
                } catch (PipelineFailure unanswered) {
                    stats.add(null);
                }
            }
            if (f.isDone()) return;
            long stalled = Watchdog.stalledMs(stats, stepMs);
            if (timedOut) {
                throw new PipelineFailure("step " + (step + 1) + " took longer than training_config.step_timeout_s = "
                        + watchdogStepTimeout.toSeconds() + "; " + Watchdog.diagnose(stats, stalled));
            }
            if (stalled >= warnAfter.toMillis() && (lastWarn == 0 || now - lastWarn >= warnAfter.toNanos())) {
                warn.accept(Watchdog.diagnose(stats, stalled));
                lastWarn = now;
            }
        }
    }

    public Deployment deployment() {
        return deployment;
    }

    public ActorRef<StageActor.Command> rank(int r) {
        return ask(system, reply -> new HostGuardian.GetRank(r, reply), Duration.ofSeconds(10));
    }

    public StageStats stats(int r, Duration timeout) {
        ActorRef<StageActor.Command> ref = rank(r);
        return ask(ref, StageActor.GetStats::new, timeout);
    }

    /** Every parameter's value on the host, by name, gathered from all ranks. */
    public Map<String, float[]> weights() {
        Map<String, float[]> out = new LinkedHashMap<>();
        for (int r = 0; r < plan.ranks(); r++) {
            ActorRef<StageActor.Command> ref = rank(r);
            StageActor.Weights w = ask(ref, StageActor.GetWeights::new, Duration.ofMinutes(5));
            out.putAll(w.values());
        }
        return out;
    }

    /**
     * Takes a checkpoint's host copy on every rank (between steps, on each device queue) and starts
     * the background writers on {@code dir}; returns when every copy is taken, before the files are written.
     */
    public void saveState(int step, Path dir) {
        for (int r = 0; r < plan.ranks(); r++) {
            ActorRef<StageActor.Command> ref = rank(r);
            await(AskPattern.askWithStatus(ref, (ActorRef<StatusReply<Integer>> reply) ->
                    new StageActor.SaveState(step, dir.toString(), reply), Duration.ofMinutes(10), system.scheduler()),
                    ref, Duration.ofMinutes(10));
        }
    }

    /**
     * Waits for every rank's files of step {@code step}'s {@link #saveState}, all of them even when one failed (so that
     * no rank still writes into the directory when the caller removes it); then throws the first failure.
     */
    public List<StageActor.SavedFiles> awaitSaved(int step) {
        List<CompletionStage<StageActor.SavedFiles>> asked = new ArrayList<>();
        for (int r = 0; r < plan.ranks(); r++) {
            asked.add(AskPattern.askWithStatus(rank(r), (ActorRef<StatusReply<StageActor.SavedFiles>> reply) ->
                    new StageActor.AwaitSaved(step, reply), Duration.ofMinutes(30), system.scheduler()));
        }
        List<StageActor.SavedFiles> out = new ArrayList<>();
        PipelineFailure first = null;
        for (int r = 0; r < plan.ranks(); r++) {
            try {
                out.add(await(asked.get(r), rank(r), Duration.ofMinutes(30)));
            } catch (PipelineFailure e) {
                if (Thread.currentThread().isInterrupted()) throw e;      // given up on (a rank died): no waiting for the rest
                if (first == null) first = e;
            }
        }
        if (first != null) throw first;
        return out;
    }

    /**
     * Loads every rank's parameters and optimizer state from the checkpoint in {@code dir} (any split).
     *
     * @throws dev.ttpipe.stages.checkpoint.CheckpointException when the checkpoint does not fit this model
     */
    public void loadState(Path dir, int optimizerSteps) {
        loadState(dir, -1, optimizerSteps);
    }

    /**
     * {@link #loadState(java.nio.file.Path, int)} of the checkpoint of step {@code step}: a rank that
     * still holds its host copy of that checkpoint restores from memory. Returns how many ranks did.
     */
    public int loadState(Path dir, int step, int optimizerSteps) {
        int fromMemory = 0;
        for (int r = 0; r < plan.ranks(); r++) {
            ActorRef<StageActor.Command> ref = rank(r);
            try {
                fromMemory += await(AskPattern.askWithStatus(ref, (ActorRef<StatusReply<Integer>> reply) ->
                        new StageActor.LoadState(dir.toString(), step, optimizerSteps, reply), Duration.ofMinutes(30), system.scheduler()),
                        ref, Duration.ofMinutes(30));
            } catch (PipelineFailure e) {
                if (e.getCause() instanceof CheckpointException c) throw c;
                throw e;
            }
        }
        return fromMemory;
    }

    /**
     * After a failed step: every rank joins again under a fresh job id, dropping what it held of that
     * step; a rank whose process died is waited for (up to {@code timeout}) until its replacement
     * registers. The weights are as the failed step left them: load a checkpoint or
     * {@link #reinitialize} next.
     */
    public void rejoin(Duration timeout) {
        CompletionStage<Long> f = AskPattern.askWithStatus(coordinator, Coordinator.Rejoin::new, timeout, system.scheduler());
        try {
            await(f, coordinator, timeout);
        } catch (PipelineFailure e) {
            List<Integer> missing = deployment == null ? List.of() : ask(system, HostGuardian.GetMissing::new, Duration.ofSeconds(5));
            throw new PipelineFailure("recovery: " + (missing.isEmpty() ? e.getMessage()
                    : "rank(s) " + missing + " did not come back within " + timeout.toSeconds() + " s"), e);
        }
    }

    /**
     * The link check of a multi-process job ({@link LinkCheck}): every control link and every data link the
     * pipeline's frames cross carries a small frame and one of {@code largeBytes}, each within {@code deadline}.
     * Waits until every rank has joined the job. Returns every link's figures.
     *
     * @throws PipelineFailure with one line naming the link that failed (both ranks, hosts and ports) and what was measured
     */
    public LinkCheck.Report checkLinks(long largeBytes, Duration deadline) {
        if (deployment == null) throw new IllegalStateException("checkLinks: not a multi-process job");
        LinkCheck.Plan p = LinkCheck.plan(plan, deployment, largeBytes, deadline);
        Duration wait = p.worstCase();
        return await(AskPattern.askWithStatus(coordinator, (ActorRef<StatusReply<LinkCheck.Report>> r) -> new Coordinator.CheckLinks(p, r),
                wait, system.scheduler()), coordinator, wait);
    }

    /** Every rank rebuilds its stages as at the job's start (initial weights, no optimizer state). */
    public void reinitialize() {
        for (int r = 0; r < plan.ranks(); r++) {
            ActorRef<StageActor.Command> ref = rank(r);
            await(AskPattern.askWithStatus(ref, (ActorRef<StatusReply<Integer>> reply) ->
                    new StageActor.Reinitialize(reply), Duration.ofMinutes(10), system.scheduler()), ref, Duration.ofMinutes(10));
        }
    }

    /** Runs {@code work} on rank {@code r}'s device queue with its stages and returns its result. */
    @SuppressWarnings("unchecked")
    public <T> T onDevice(int r, Function<List<Stage>, T> work) {
        ActorRef<StageActor.Command> ref = rank(r);
        Duration timeout = Duration.ofMinutes(30);
        CompletionStage<Object> f = AskPattern.askWithStatus(ref,
                reply -> new StageActor.RunOnDevice(stages -> work.apply(stages), reply), timeout, system.scheduler());
        try {
            return (T) await(f, ref, timeout);
        } catch (PipelineFailure e) {
            if (e.getCause() instanceof RuntimeException re) throw re;     // the work's own exception, as thrown
            throw new PipelineFailure("rank " + r + ": " + e.getMessage(), e.getCause());
        }
    }

    private <Req, Res> Res ask(ActorRef<Req> target, Function<ActorRef<Res>, Req> message, Duration timeout) {
        return await(AskPattern.ask(target, message::apply, timeout, system.scheduler()), target, timeout);
    }

    /** The answer, or a {@link PipelineFailure} saying why there is none (an error reply keeps its exception as cause). */
    private <Res> Res await(CompletionStage<Res> f, ActorRef<?> target, Duration timeout) {
        try {
            return f.toCompletableFuture().get(timeout.toMillis() + 1000, TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof TimeoutException || c instanceof TimeoutException
                    || (c != null && c.getClass().getSimpleName().contains("Timeout"))) {
                throw new PipelineFailure("no answer from " + target.path().name() + " within " + timeout.toSeconds() + " s");
            }
            throw new PipelineFailure(String.valueOf(c == null ? e.getMessage() : c.getMessage()), c == null ? e : c);
        } catch (TimeoutException e) {
            throw new PipelineFailure("no answer from " + target.path().name() + " within " + timeout.toSeconds() + " s");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new PipelineFailure("interrupted");
        }
    }

    /** On a worker that is not rank 0: passes this process's {@code signal} on to rank 0, whose loop stops at the next step. */
    public void relayPreemption(String signal, int exitCode, int rank) {
        system.tell(new HostGuardian.Preempt(signal, exitCode, rank));
    }

    private HostGuardian.Preempt endedFor;

    /** On rank 0: the job stopped for {@code why} (its checkpoint saved); {@link #close} tells every worker so. */
    public synchronized void endPreempted(HostGuardian.Preempt why) {
        this.endedFor = why;
    }

    @Override
    public void close() {
        close(null);
    }

    /** Ends the job: on rank 0 of a multi-process job tells every worker first ({@code failure} null: success). */
    public synchronized void close(String failure) {
        if (closed) return;
        closed = true;
        if (deployment != null && coordinator != null) {
            try {
                ask(system, (ActorRef<Boolean> r) -> new HostGuardian.EndAll(failure, failure != null, endedFor, r),
                        Duration.ofSeconds(10));
                Thread.sleep(300); // let the messages leave before the node goes away
            } catch (RuntimeException | InterruptedException ignored) {
                // workers notice rank 0 leaving anyway
            }
        }
        system.terminate();
        try {
            system.getWhenTerminated().toCompletableFuture().get(failure == null ? 30 : 5, TimeUnit.SECONDS);
        } catch (Exception e) {
            // fall through: free the devices anyway
        }
        transport.close();
        mesh.close();
    }
}

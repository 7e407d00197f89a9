package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.cluster.ClusterMessage;
import dev.ttpipe.device.Device;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.transport.FrameHeader;
import dev.ttpipe.transport.TensorChannel;
import dev.ttpipe.transport.TensorKind;
import dev.ttpipe.transport.TensorPayload;
import dev.ttpipe.transport.Transport;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.PostStop;
import org.apache.pekko.actor.typed.javadsl.ActorContext;
import org.apache.pekko.actor.typed.javadsl.BehaviorBuilder;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.javadsl.StashBuffer;
import org.apache.pekko.pattern.StatusReply;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.Function;

/**
 * One pipeline rank, as an actor: the protocol between the {@link Coordinator}, the transport and
 * the rank. It owns the rank's {@link RankState} (its stages on its submesh, its device queue, its
 * checkpoints) and {@link RankExecutor} (which action of its row of the schedule runs next), and
 * turns messages into calls on them and their answers into messages. Kernels run on the device
 * queue, so the actor keeps answering (stats, the watchdog) while one runs.
 * <pre>
 *   initialising --stages built--> idle --BeginPass--> in a pass --row done--> idle
 *        |                          ^                      |
 *        | building failed          |  JoinJob, new id     | a kernel or send failed, a frame was dropped
 *        v                          |  (rejoin)            v
 *      broken                       +------------------ failed --BeginPass--> in a pass
 * </pre>
 * <ul>
 *   <li><b>initialising</b>: the device queue builds the stages; every message but {@link GetStats}
 *   waits in a stash.</li>
 *   <li><b>broken</b>: building them failed: {@link JoinJob} and {@link BeginPass} are answered with
 *   why.</li>
 *   <li><b>idle</b>: between passes. Tensors of the next pass may already arrive (another rank started
 *   it first) and wait in the executor's buffers (a frame dropped meanwhile fails that pass as it begins);
 *   the end-of-step work ({@link FinishStep}, {@link ApplyOptimizer}) and the state's operations (save,
 *   load, reinitialise) run here.</li>
 *   <li><b>in a pass</b>: arrivals and finished kernels move the row on; when every action of the row
 *   is done (and, on a device queue that runs ahead, the queue has run it), the Coordinator gets
 *   {@link Coordinator.PassDone}.</li>
 *   <li><b>failed</b>: a kernel or send failed, or a frame meant for the rank was dropped: the
 *   Coordinator got {@link Coordinator.RankFailed} naming rank, stage, action and microbatch; arrivals
 *   are dropped and late kernel results freed until a new pass, or a rejoin under a fresh job id.</li>
 * </ul>
 * In every phase after initialising the rank also takes its part in the {@link LinkCheck} before step 1:
 * it answers pings, probes a data link when asked ({@link LinkProbes}) and echoes the probe frames of others.
 * A {@link JoinJob} with a new job id (a rejoin after a failed step) is taken in every phase but
 * initialising and broken: what the rank held of the step is dropped, and results of kernels still
 * queued belong to an old generation and are ignored.
 * On a device queue that runs ahead of the actor (sim), a pass ends when the queue has run it all.
 */
public final class StageActor {

    /** The actor's protocol. */
    public sealed interface Command {
    }

    /**
     * Run this rank's row for one forward pass. {@code data} is non-null on the first and last stages' ranks;
     * {@code inference}: what an inference pass computes (null: a training pass). On a training plan an
     * evaluation pass has a negative number and runs the rank's row of {@link JobPlan#evalSchedule} instead of
     * its training row; its frames carry that number, so each goes to the row it belongs to.
     */
    public record BeginPass(int step, int pass, MicrobatchData data, Inference inference, ActorRef<Coordinator.Command> replyTo)
            implements Command, ClusterMessage {
        /** A training pass. */
        public BeginPass(int step, int pass, MicrobatchData data, ActorRef<Coordinator.Command> replyTo) {
            this(step, pass, data, null, replyTo);
        }
    }

    /**
     * A tensor from another rank, not yet on the devices; {@code arrivedNs} is when the transport
     * delivered it, stamped on the transport's thread (not when the actor got to the message).
     */
    public record Arrived(TensorPayload payload, long arrivedNs) implements Command {
    }

    /**
     * From the Coordinator before the first step: the job's id (the transport adopts it, so frames of
     * another job are dropped) and the plan's fingerprint, which must equal this rank's own.
     */
    public record JoinJob(long jobId, String fingerprint, ActorRef<Coordinator.Command> replyTo) implements Command, ClusterMessage {
    }

    /** After the last pass of a step: all-reduce DDP gradients and report this rank's gradient sum of squares. */
    public record FinishStep(int step, ActorRef<Coordinator.Command> replyTo) implements Command, ClusterMessage {
    }

    /**
     * Step every local stage's optimizer with this learning rate and clip factor; {@code skip}: the
     * step had a non-finite loss or gradient, so drop the gradients and change nothing. {@code tiedGrad}:
     * the summed gradient of a token embedding tied across stages, for this rank's halves (else null).
     */
    public record ApplyOptimizer(int step, double lr, double clip, boolean skip, float[] tiedGrad, ActorRef<Coordinator.Command> replyTo)
            implements Command, ClusterMessage {
    }

    /**
     * Rebuilds this rank's stages and optimizers as at the job's start (the seed's initial weights,
     * no optimizer state): a recovery before the first checkpoint starts over from there.
     */
    public record Reinitialize(ActorRef<StatusReply<Integer>> replyTo) implements Command, ClusterMessage {
    }

    /** Answered at once, even while a kernel runs. */
    public record GetStats(ActorRef<StageStats> replyTo) implements Command, ClusterMessage {
    }

    /** Every local parameter's value on the host (runs on the device queue). */
    public record GetWeights(ActorRef<Weights> replyTo) implements Command, ClusterMessage {
    }

    /** Parameter values by name. */
    public record Weights(Map<String, float[]> values) implements ClusterMessage {
    }

    /**
     * Between steps: copies every local stage's parameters and optimizer moments to host memory on
     * the device queue and answers (with the rank) as soon as the copy is taken; a background writer
     * then writes them as {@code stage-SS.safetensors} into {@code dir} while training goes on.
     */
    public record SaveState(int step, String dir, ActorRef<StatusReply<Integer>> replyTo) implements Command, ClusterMessage {
    }

    /** Answers when the files of step {@code step}'s {@link SaveState} are on the disk. */
    public record AwaitSaved(int step, ActorRef<StatusReply<SavedFiles>> replyTo) implements Command, ClusterMessage {
    }

    /** What a rank wrote: each file's name, SHA-256 and size; how long the host copy and the write took. */
    public record SavedFiles(int rank, Map<String, String> sha256, long bytes, double copySeconds, double writeSeconds)
            implements ClusterMessage {
    }

    /**
     * Loads this rank's parameters and optimizer moments from the checkpoint in {@code dir}, whatever
     * split wrote it (tensors are found by name), and sets every optimizer to {@code optimizerSteps}.
     */
    public record LoadState(String dir, int step, int optimizerSteps, ActorRef<StatusReply<Integer>> replyTo)
            implements Command, ClusterMessage {
    }

    /** Runs {@code work} on the device queue with this rank's stages (evaluation, generation, tests). */
    public record RunOnDevice(Function<List<Stage>, Object> work, ActorRef<StatusReply<Object>> replyTo)
            implements Command {
    }

    /** A compute action {@code executor} queued in {@code generation} is done; {@code queueDepth}: tensors waiting when it was queued. */
    private record ComputeDone(RankExecutor executor, int generation, RankState.Computed result, int queueDepth) implements Command {
    }

    private record ComputeFailed(RankExecutor executor, int generation, Action action, Throwable error) implements Command {
    }

    /** The end-of-step work is done: the gradient reduction ({@code reduced}) or the optimizer step (null). */
    private record StepWorkDone(RankState.Reduced reduced, long startNs, long endNs, ActorRef<Coordinator.Command> replyTo)
            implements Command {
    }

    /** The transport dropped a frame meant for this rank (checksum, a chunk missing or out of order). */
    public record FrameDropped(String channel, String problem) implements Command {
    }

    /** A send of {@code executor}'s, of job {@code jobId}, failed (ignored once the job has moved on to a fresh id). */
    private record SendFailed(RankExecutor executor, Action action, Throwable error, long jobId) implements Command {
    }

    private record Initialized(Throwable error) implements Command {
    }

    // ---- the link check ({@link LinkCheck}, this rank's side in {@link LinkProbes}) ------------------------------

    /** A control link's ping, number {@code seq}: answered at once with a {@link LinkCheck.Pong} of the same payload. */
    public record Ping(int seq, byte[] payload, ActorRef<LinkCheck.Command> replyTo) implements Command, ClusterMessage {
    }

    /**
     * Probe the data link from this rank to {@code toRank} in check {@code check}: {@value LinkCheck#SMALL_FRAMES} small
     * frames and one of {@code largeBytes}, one at a time, each echoed within {@code deadlineMs}; answered with a
     * {@link LinkCheck.Probed}.
     */
    public record ProbeLink(int check, int toRank, long largeBytes, long deadlineMs, ActorRef<LinkCheck.Command> replyTo)
            implements Command, ClusterMessage {
    }

    /** Answered with a {@link LinkCheck.Seen}: the probe frames of check {@code check} this rank got from {@code fromRank}. */
    public record GetProbesSeen(int check, int fromRank, ActorRef<LinkCheck.Command> replyTo) implements Command, ClusterMessage {
    }

    /** The frames of the probe of {@code request}, made on the device queue, or why they could not be. */
    record ProbeFrames(ProbeLink request, List<Tensor> frames, Throwable error) implements Command {
    }

    /** Frame {@code index} of the probe of {@code request} was not echoed within its deadline. */
    record ProbeExpired(ProbeLink request, int index) implements Command {
    }

    /** Frame {@code index} of the probe of {@code request} could not be sent. */
    record ProbeSendFailed(ProbeLink request, int index, Throwable error) implements Command {
    }

    /** Rank {@code rank} of {@code plan} on {@code submesh}, with {@code faults} injected ({@link Faults#NONE} but in tests). */
    public static Behavior<Command> create(JobPlan plan, int rank, Submesh submesh, Transport transport, Faults faults) {
        return Behaviors.withStash(1024, stash -> Behaviors.setup(ctx ->
                new StageActor(ctx, stash, plan, rank, new RankState(plan, rank, submesh, faults), transport).initialising()));
    }

    private final ActorContext<Command> ctx;
    private final StashBuffer<Command> stash;
    private final JobPlan plan;
    private final int rank;
    private final RankState state;
    /** Runs the rank's row of the plan's schedule: training passes (an inference plan: every pass). */
    private final RankExecutor executor;
    /**
     * On a training plan, runs its row of the evaluation schedule ({@link JobPlan#evalSchedule}); made for the
     * first evaluation pass (a job that never evaluates lowers no such schedule), null until then.
     */
    private RankExecutor evalExecutor;
    /** The executor of the latest pass begun. */
    private RankExecutor active;
    private final Transport transport;
    /** Channels to other ranks by rank, opened on first use. */
    private final TensorChannel[] channels;
    private final LinkProbes probes;
    /** The pass being run (its data and who to answer), in a pass. */
    private BeginPass current;
    // The phases after initialising, built once.
    private final Behavior<Command> idle;
    private final Behavior<Command> inPass;
    private final Behavior<Command> failed;

    private StageActor(ActorContext<Command> ctx, StashBuffer<Command> stash, JobPlan plan, int rank, RankState state,
                       Transport transport) {
        this.ctx = ctx;
        this.stash = stash;
        this.plan = plan;
        this.rank = rank;
        this.state = state;
        this.transport = transport;
        this.channels = new TensorChannel[plan.ranks()];
        this.executor = RankExecutor.of(plan, rank, new Port(false));
        this.active = executor;
        this.probes = new LinkProbes(ctx, rank, plan.ranks(), state, transport);
        this.idle = idle();
        this.inPass = inPass();
        this.failed = failed();
        ActorRef<Command> self = ctx.getSelf();
        state.initialized().whenComplete((v, err) -> self.tell(new Initialized(unwrap(err))));
    }

    // ---- phases ---------------------------------------------------------------------------------------

    private Behavior<Command> initialising() {
        return Behaviors.receive(Command.class)
                .onMessage(Initialized.class, m -> {
                    if (m.error() == null) return stash.unstashAll(idle);
                    ctx.getLog().error("rank {}: could not build its stages", rank, m.error());
                    return stash.unstashAll(broken(m.error()));
                })
                .onMessage(GetStats.class, this::onGetStats)
                .onMessage(Command.class, m -> {
                    stash.stash(m);
                    return Behaviors.same();
                })
                .onSignal(PostStop.class, s -> onStop())
                .build();
    }

    private Behavior<Command> broken(Throwable error) {
        String why = "building its stages failed: " + Coordinator.describe(error);
        return common(Behaviors.receive(Command.class)
                .onMessage(JoinJob.class, m -> {
                    m.replyTo().tell(new Coordinator.Joined(rank, m.jobId(), why));
                    return Behaviors.same();
                })
                .onMessage(BeginPass.class, m -> {
                    m.replyTo().tell(new Coordinator.RankFailed(rank, "rank " + rank + ": " + why));
                    return Behaviors.same();
                }));
    }

    private Behavior<Command> idle() {
        return common(Behaviors.receive(Command.class)
                .onMessage(BeginPass.class, this::onBeginPass)
                .onMessage(FrameDropped.class, m -> {
                    // The last pass got all its frames: this one is of the next pass, which another rank began first.
                    droppedEarly = m;
                    return betweenPasses(m);
                }));
    }

    private Behavior<Command> inPass() {
        return common(Behaviors.receive(Command.class)
                .onMessage(FrameDropped.class, m -> {
                    // The tensor it carried will not come: fail now, naming the channel (and so the peer
                    // rank), the tensor and what was wrong, instead of waiting until the step times out.
                    ActorRef<Coordinator.Command> replyTo = current.replyTo();
                    if (!active.frameDropped()) return betweenPasses(m);
                    replyTo.tell(new Coordinator.RankFailed(rank, "rank " + rank + ": on " + m.channel() + ", " + m.problem()));
                    current = null;
                    return failed;
                }));
    }

    private Behavior<Command> failed() {
        return common(Behaviors.receive(Command.class)
                .onMessage(BeginPass.class, this::onBeginPass)
                .onMessage(FrameDropped.class, this::betweenPasses)
                .onMessage(Arrived.class, m -> {
                    if (LinkProbes.carries(m.payload())) return onArrived(m);
                    m.payload().discard();                  // of the failed step: its data are dropped
                    return Behaviors.same();
                }));
    }

    /** A frame meant for this rank that was dropped while it was idle: the next pass fails as it begins (see idle()). */
    private FrameDropped droppedEarly;

    private Behavior<Command> betweenPasses(FrameDropped m) {
        ctx.getLog().error("rank {}: on {}, {} (between passes)", rank, m.channel(), m.problem());
        return Behaviors.same();
    }

    /** What every phase after initialising handles, after the phase's own handlers. */
    private Behavior<Command> common(BehaviorBuilder<Command> phase) {
        return phase
                .onMessage(JoinJob.class, this::onJoinJob)
                .onMessage(Arrived.class, this::onArrived)
                .onMessage(Ping.class, m -> {
                    m.replyTo().tell(new LinkCheck.Pong(rank, m.seq(), m.payload()));
                    return Behaviors.same();
                })
                .onMessage(ProbeLink.class, m -> {
                    probes.probe(m);
                    return Behaviors.same();
                })
                .onMessage(ProbeFrames.class, m -> {
                    probes.framesReady(m, executor.jobId());
                    return Behaviors.same();
                })
                .onMessage(ProbeExpired.class, m -> {
                    probes.expired(m);
                    return Behaviors.same();
                })
                .onMessage(ProbeSendFailed.class, m -> {
                    probes.sendFailed(m);
                    return Behaviors.same();
                })
                .onMessage(GetProbesSeen.class, m -> {
                    m.replyTo().tell(probes.seen(m.check(), m.fromRank()));
                    return Behaviors.same();
                })
                .onMessage(ComputeDone.class, m -> {
                    RankState.Computed c = m.result();
                    return passMoved(m.executor().computed(m.generation(), c.action(), c.output(), c.loss(), c.logits(), c.startNs(),
                            c.endNs(), m.queueDepth(), c.inputReadyNs()));
                })
                .onMessage(ComputeFailed.class, m -> onFailed(m.executor(), m.generation(), m.action(), m.error()))
                .onMessage(SendFailed.class, m -> m.jobId() == m.executor().jobId()
                        ? onFailed(m.executor(), m.executor().generation(), m.action(), m.error()) : Behaviors.same())
                .onMessage(BeginPass.class, m -> {
                    ctx.getLog().error("rank {}: pass {} begun while pass {} runs", rank, m.pass(), active.pass());
                    m.replyTo().tell(new Coordinator.RankFailed(rank, "rank " + rank + ": asked to begin pass " + m.pass()
                            + " while pass " + active.pass() + " runs"));
                    return Behaviors.same();
                })
                .onMessage(FinishStep.class, this::onFinishStep)
                .onMessage(ApplyOptimizer.class, this::onApplyOptimizer)
                .onMessage(StepWorkDone.class, this::onStepWorkDone)
                .onMessage(GetStats.class, this::onGetStats)
                .onMessage(GetWeights.class, m -> {
                    state.weights().thenAccept(w -> m.replyTo().tell(new Weights(w)));
                    return Behaviors.same();
                })
                .onMessage(SaveState.class, m -> reply(state.save(m.step(), Path.of(m.dir())), m.replyTo()))
                .onMessage(AwaitSaved.class, this::onAwaitSaved)
                .onMessage(LoadState.class, m -> reply(state.load(Path.of(m.dir()), m.step(), m.optimizerSteps()), m.replyTo()))
                .onMessage(Reinitialize.class, m -> reply(state.reinitialize(), m.replyTo()))
                .onMessage(RunOnDevice.class, m -> reply(state.run(m.work()), m.replyTo()))
                .onSignal(PostStop.class, s -> onStop())
                .build();
    }

    // ---- the pass ---------------------------------------------------------------------------------

    private Behavior<Command> onJoinJob(JoinJob m) {
        String mine = plan.fingerprint();
        if (!mine.equals(m.fingerprint())) {
            m.replyTo().tell(new Coordinator.Joined(rank, m.jobId(), "it was started with a different plan (config or flags) than rank 0;"
                    + " start every worker with the same config and flags\n  rank 0: " + m.fingerprint() + "\n  rank " + rank
                    + ": " + mine));
            return Behaviors.same();
        }
        boolean rejoin = m.jobId() != executor.jobId();
        if (rejoin) droppedEarly = null;                   // of the old job: its passes will not run
        executor.join(m.jobId());
        if (evalExecutor != null) evalExecutor.join(m.jobId());
        transport.adoptJob(m.jobId());
        // Behind what the device queue holds (the stash of a dropped step): answer once that is freed.
        state.execute(() -> m.replyTo().tell(new Coordinator.Joined(rank, m.jobId(), null)));
        if (!rejoin) return Behaviors.same();
        current = null;
        return idle;
    }

    /** A tensor for a pass, or a link check's frame. */
    private Behavior<Command> onArrived(Arrived m) {
        if (LinkProbes.carries(m.payload())) {
            probes.arrived(m.payload(), m.arrivedNs(), executor.jobId());
            return Behaviors.same();
        }
        return passMoved(executorOf(m.payload().header().pass()).arrived(m.payload(), m.arrivedNs()));
    }

    /** The executor whose row pass {@code pass} runs: on a training plan, a negative pass is an evaluation's. */
    private RankExecutor executorOf(int pass) {
        if (pass >= 0 || plan.forwardOnly()) return executor;
        if (evalExecutor == null) evalExecutor = RankExecutor.forEval(plan, rank, executor.jobId(), new Port(true));
        return evalExecutor;
    }

    private Behavior<Command> onBeginPass(BeginPass m) {
        current = m;
        active = executorOf(m.pass());
        RankExecutor.PassResult done = m.inference() == null ? active.begin(m.pass())
                : active.begin(m.pass(), m.inference().microbatches());
        FrameDropped early = droppedEarly;
        droppedEarly = null;
        if (early != null && active.frameDropped()) {
            // A frame of this pass was dropped before it began here: it will not come, so the pass fails now.
            m.replyTo().tell(new Coordinator.RankFailed(rank, "rank " + rank + ": on " + early.channel() + ", " + early.problem()));
            current = null;
            return failed;
        }
        return done == null ? inPass : passMoved(done);
    }

    /** After the executor moved: if the pass is done, answers it and goes idle. */
    private Behavior<Command> passMoved(RankExecutor.PassResult done) {
        if (done != null) {
            ActorRef<Coordinator.Command> replyTo = current.replyTo();
            current = null;
            Coordinator.PassDone answer = new Coordinator.PassDone(rank, done.pass(), done.events(), done.losses(), done.logits());
            if (state.submesh().queuedUntilNanos() <= System.nanoTime()) {
                replyTo.tell(answer);
            } else {
                // The device queue runs ahead (sim): the pass is done when it has run everything issued.
                state.drained().thenRun(() -> replyTo.tell(answer));
            }
            return idle;
        }
        return Behaviors.same();
    }

    private Behavior<Command> onFailed(RankExecutor ex, int generation, Action a, Throwable error) {
        ActorRef<Coordinator.Command> replyTo = ex.inPass() && current != null ? current.replyTo() : null;
        String where = ex.failed(generation, a);
        if (where == null) return Behaviors.same();
        ctx.getLog().debug("{} failed", where, error);
        if (replyTo != null) replyTo.tell(new Coordinator.RankFailed(rank, where + ": " + Coordinator.describe(error)));
        current = null;
        return failed;
    }

    /** An executor's hands: the device queue, the transport and the devices' memory. */
    private final class Port implements RankExecutor.Port {
        /** Whose hands: the evaluation executor's, else the training one's. */
        private final boolean eval;

        Port(boolean eval) {
            this.eval = eval;
        }

        private RankExecutor executor() {
            return eval ? evalExecutor : executor;
        }

        @Override
        public void compute(Action a, TensorPayload input, int buffered) {
            ActorRef<Command> self = ctx.getSelf();
            RankExecutor ex = executor();
            int generation = ex.generation();
            state.compute(a, current.pass(), current.data(), input, current.inference()).whenComplete((c, err) ->
                    self.tell(err == null ? new ComputeDone(ex, generation, c, buffered) : new ComputeFailed(ex, generation, a, unwrap(err))));
        }

        @Override
        public void send(int toRank, FrameHeader h, Tensor t) {
            TensorChannel ch = channels[toRank];
            if (ch == null) channels[toRank] = ch = transport.channel(rank, toRank);
            ActorRef<Command> self = ctx.getSelf();
            RankExecutor ex = executor();
            long job = h.jobId();
            ch.send(h, t).whenComplete((v, err) -> {
                if (err != null) self.tell(new SendFailed(ex, new Action(h.fromStage(), h.kind() == TensorKind.ACTIVATION
                        ? ActionKind.SEND_F : ActionKind.SEND_B, h.microbatch()), err, job));
            });
        }

        @Override
        public long memoryInUse() {
            return state.submesh().maxInUse();
        }

        @Override
        public void abortStep() {
            state.abortStep();
        }
    }

    // ---- end of step ----------------------------------------------------------------------------------

    private Behavior<Command> onFinishStep(FinishStep m) {
        ActorRef<Command> self = ctx.getSelf();
        state.reduceGradients(m.step()).whenComplete((r, err) -> {
            if (err == null) self.tell(new StepWorkDone(r, r.startNs(), r.endNs(), m.replyTo()));
            else m.replyTo().tell(new Coordinator.RankFailed(rank, unwrap(err).getMessage()));
        });
        return Behaviors.same();
    }

    private Behavior<Command> onApplyOptimizer(ApplyOptimizer m) {
        ActorRef<Command> self = ctx.getSelf();
        state.applyOptimizer(m.lr(), m.clip(), m.skip(), m.tiedGrad()).whenComplete((t, err) -> {
            if (err == null) self.tell(new StepWorkDone(null, t[0], t[1], m.replyTo()));
            else m.replyTo().tell(new Coordinator.RankFailed(rank, unwrap(err).getMessage()));
        });
        return Behaviors.same();
    }

    /** Answered on the actor's thread: the event carries the executor's stash count. */
    private Behavior<Command> onStepWorkDone(StepWorkDone m) {
        RankState.Reduced r = m.reduced();
        Submesh submesh = state.submesh();
        ActionEvent e = new ActionEvent(rank, new Action(state.firstStage(), r != null ? ActionKind.REDUCE_GRAD : ActionKind.OPTIMIZER_STEP),
                -1, m.startNs(), m.endNs(), 0, 0, 0, executor.stashed(), submesh.maxInUse());
        if (r != null) {
            m.replyTo().tell(new Coordinator.GradReport(rank, r.sums(), r.nonFinite(), r.nonFiniteStage(), r.tiedGrads(), e));
        } else {
            m.replyTo().tell(new Coordinator.OptimizerDone(rank, e, submesh.maxPeak()));
            submesh.devices().forEach(d -> d.resetPeak());
        }
        return Behaviors.same();
    }

    // ---- queries and the rank's state ---------------------------------------------------------------

    /** What the latest pass's executor does; the actions run are counted over both rows (training and evaluation). */
    private Behavior<Command> onGetStats(GetStats m) {
        Action running = active.running();
        Submesh submesh = state.submesh();
        long actionsRun = executor.actionsRun();
        long[] byKind = executor.actionsByKind();
        if (evalExecutor != null) {
            actionsRun += evalExecutor.actionsRun();
            long[] eval = evalExecutor.actionsByKind();
            for (int k = 0; k < byKind.length; k++) byKind[k] += eval[k];
        }
        m.replyTo().tell(new StageStats(rank, running == null ? null : running.toString(), running != null, active.queuedActions(),
                active.position(), active.rowLength(), active.buffered(), executor.stashed(), submesh.maxInUse(),
                submesh.maxPeak(), actionsRun, active.waiting(state.deviceStartNs()), byKind, transport.droppedFrames(rank), HostName.get(),
                submesh.devices().stream().mapToInt(Device::id).toArray()));
        return Behaviors.same();
    }

    private Behavior<Command> onAwaitSaved(AwaitSaved m) {
        CompletableFuture<SavedFiles> f = state.awaitSaved(m.step());
        if (f == null) {
            m.replyTo().tell(StatusReply.error("rank " + rank + ": no checkpoint of step " + m.step() + " is being written"));
            return Behaviors.same();
        }
        return reply(f, m.replyTo());
    }

    /**
     * Answers {@code replyTo} when {@code f} completes: its value, or the rank's one-line failure
     * ({@link RankState.Failure}), or the exception itself (a user's bad checkpoint keeps its type).
     */
    private <T> Behavior<Command> reply(CompletableFuture<? extends T> f, ActorRef<StatusReply<T>> replyTo) {
        f.whenComplete((v, err) -> {
            Throwable t = unwrap(err);
            replyTo.tell(t == null ? StatusReply.success(v)
                    : t instanceof RankState.Failure ? StatusReply.error(t.getMessage()) : StatusReply.error(t));
        });
        return Behaviors.same();
    }

    private static Throwable unwrap(Throwable t) {
        return t instanceof CompletionException && t.getCause() != null ? t.getCause() : t;
    }

    private Behavior<Command> onStop() {
        probes.stop();
        try {
            executor.drop();
            if (evalExecutor != null) evalExecutor.drop();
        } catch (RuntimeException ignored) {
            // stopping anyway
        }
        state.close();
        return Behaviors.same();
    }
}

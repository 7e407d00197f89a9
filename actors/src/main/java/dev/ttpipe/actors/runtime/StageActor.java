package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.cluster.ClusterMessage;

import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.stages.Inputs;
import dev.ttpipe.stages.Optimizer;
import dev.ttpipe.stages.Param;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.transport.DroppedFrames;
import dev.ttpipe.transport.FrameHeader;
import dev.ttpipe.transport.TensorChannel;
import dev.ttpipe.transport.TensorKind;
import dev.ttpipe.transport.TensorPayload;
import dev.ttpipe.transport.TensorReceiver;
import dev.ttpipe.transport.Transport;
import org.agrona.collections.Long2LongHashMap;
import org.agrona.collections.Long2ObjectHashMap;
import org.agrona.collections.LongHashSet;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.PostStop;
import org.apache.pekko.actor.typed.javadsl.AbstractBehavior;
import org.apache.pekko.actor.typed.javadsl.ActorContext;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.javadsl.Receive;
import org.apache.pekko.pattern.StatusReply;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/**
 * One pipeline rank: owns a submesh and the stages (slices of blocks) the schedule puts on it, and
 * executes its row of the schedule for every forward pass. Device work (F, B, I, W, the DDP
 * reduction, the optimizer) runs on the rank's own single-threaded executor, its device queue, so
 * the actor keeps answering messages while a kernel runs; results come back as messages. Tensors
 * arrive through the transport and wait in buffers until their action is due.
 *
 * <p>Static mode runs the row in order (a RECV waits for its data; SENDs hand the tensor to the
 * transport and move on, or, when the tensor is still being computed, when it is done). Like a
 * device command queue, the device queue holds up to {@link #QUEUE_DEPTH} compute actions, so the
 * next kernel is already queued when the current one ends. On a backend whose device queue runs
 * ahead of the issuing thread and says when it will be done ({@link Submesh#queuedUntilNanos}, the sim
 * backend), an action is done for the actor as soon as it is issued: its times are the queue's, its
 * output is fenced at the action's end and handed on at once (the receiving queue waits for it), and a
 * pass ends when the queue has run everything. The runtime's thread wake-ups then overlap the devices'
 * work instead of adding to it, as they do with a real device's command queue.
 * Ready-first mode runs whichever compute action is ready, keeping to the
 * static schedule's per-stage in-flight limit and to ascending microbatch order of weight-gradient
 * accumulation (so the sums, and therefore the results, are the same bit for bit).
 */
public final class StageActor extends AbstractBehavior<StageActor.Command> {

    /** The actor's protocol. */
    public sealed interface Command {
    }

    /** Run this rank's row for one forward pass. {@code data} is non-null on the first and last stages' ranks. */
    public record BeginPass(int step, int pass, MicrobatchData data, ActorRef<Coordinator.Command> replyTo) implements Command, ClusterMessage {
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
     * step had a non-finite loss or gradient, so drop the gradients and change nothing.
     */
    /** {@code tiedGrad}: the summed gradient of a token embedding tied across stages, for this rank's halves (else null). */
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
    public record RunOnDevice(java.util.function.Function<List<Stage>, Object> work, ActorRef<StatusReply<Object>> replyTo)
            implements Command {
    }

    /**
     * {@code startNs}, {@code endNs}: when the action ran on the device; on a backend whose queue runs
     * ahead of the issuing thread (sim), the queue's times, which may still be ahead when this arrives.
     * {@code inputReadyNs}: on such a backend, when its input from another rank was ready on the
     * device (-1: not known, or no such input).
     */
    private record ComputeDone(int generation, Action action, Tensor output, LossOutput loss, long startNs, long endNs, int queueDepth,
                               long inputReadyNs) implements Command {
    }

    private record ComputeFailed(int generation, Action action, Throwable error) implements Command {
    }

    private record StepWorkDone(ActionKind what, java.util.TreeMap<Integer, double[]> sums, String nonFinite, int nonFiniteStage, float[][] tiedGrads,
                                long startNs, long endNs, ActorRef<Coordinator.Command> replyTo) implements Command {
    }

    /** The transport dropped a frame meant for this rank (checksum, a chunk missing or out of order). */
    private record FrameDropped(String channel, String problem) implements Command {
    }

    /** A send of job {@code jobId} failed (ignored once the job has moved on to a fresh id). */
    private record SendFailed(Action action, Throwable error, long jobId) implements Command {
    }

    private record Initialized(Throwable error) implements Command {
    }

    /**
     * A snapshot for monitoring.
     *
     * @param currentAction the oldest compute action on the device queue (running, or next to run), or null
     * @param queuedActions compute actions on the device queue, at most {@link #QUEUE_DEPTH}
     * @param droppedFrames frames addressed to this rank that its transport dropped since it started, by reason
     */
    public record StageStats(int rank, String currentAction, boolean busy, int queuedActions, int rowPosition, int rowLength,
                             int bufferedArrivals, int stashedMicrobatches, long memoryInUse, long memoryPeak,
                             long actionsRun, Waiting waiting, long[] actionsByKind, DroppedFrames droppedFrames)
            implements ClusterMessage {
    }

    /**
     * What a rank is doing for the hang watchdog, in durations (processes do not share a clock):
     * the compute action on its device ({@code running}, for {@code runningMs}), the RECV its row waits
     * for ({@code waitingFor}, from rank {@code waitingFromRank}, for {@code waitingMs}), and the last
     * action it finished, {@code sinceFinishedMs} ago (-1: none yet).
     */
    public record Waiting(String running, long runningMs, String waitingFor, int waitingFromRank, long waitingMs,
                          String lastFinished, long sinceFinishedMs, boolean inPass) implements ClusterMessage {
    }

    /**
     * Tests only: delays every run of {@code action} on the device by {@code millis} (a stalled kernel),
     * so the watchdog can be seen to name it. Null clears it.
     */
    public static void delayForTests(Action action, long millis) {
        testDelay = action == null ? null : java.util.Map.entry(action, millis);
    }

    private static volatile java.util.Map.Entry<Action, Long> testDelay;

    /**
     * Tests only: from optimizer step {@code fromStep} (counted from 0) on, stage {@code stage}'s first
     * parameter with a gradient gets a NaN gradient before the reduction, as an overflow in its
     * backward would leave it. A negative stage clears it.
     */
    public static void poisonGradientForTests(int stage, int fromStep) {
        testPoison = stage < 0 ? null : new int[]{stage, fromStep};
    }

    private static volatile int[] testPoison;

    /**
     * What the transport delivers to for {@code rank}: arrivals become {@link Arrived} messages. The
     * guardian binds it as soon as the actor is spawned, before any rank can send.
     */
    static TensorReceiver receiverFor(int rank, ActorRef<Command> actor) {
        org.slf4j.Logger log = org.slf4j.LoggerFactory.getLogger(StageActor.class);
        return new TensorReceiver() {
            @Override
            public void onTensor(TensorPayload payload) {
                actor.tell(new Arrived(payload, System.nanoTime()));
            }

            @Override
            public void onError(String channel, String problem) {
                actor.tell(new FrameDropped(channel, problem));
            }

            @Override
            public void onForeignFrame(String channel, String problem) {
                log.debug("rank {}: {}: {}", rank, channel, problem);
            }
        };
    }

    public static Behavior<Command> create(JobPlan plan, int rank, Submesh submesh, Transport transport) {
        return Behaviors.setup(ctx -> new StageActor(ctx, plan, rank, submesh, transport));
    }

    /**
     * Compute actions the actor keeps on the device queue: the running one and the next, so the device
     * goes from one kernel straight to the next instead of waiting for the actor to hear of the first
     * one's end (two thread hand-offs, tens of microseconds).
     */
    static final int QUEUE_DEPTH = 2;

    private final JobPlan plan;
    private final int rank;
    private final Submesh submesh;
    private final Transport transport;
    /** Channels to other ranks by rank, opened on first use. */
    private final TensorChannel[] channels;
    private final ExecutorService device;
    private ExecutorService writer;
    /** Checkpoint files being written, by step. */
    private final Map<Integer, CompletableFuture<SavedFiles>> saved = new HashMap<>();
    private final List<StageSlice> mySlices;
    private final List<Action> row;
    private final int[] inFlightLimit;
    // Touched only on the device thread:
    private final Map<Integer, Stage> stages = new LinkedHashMap<>();
    private final Map<Integer, Optimizer> optimizers = new LinkedHashMap<>();

    // Per pass (actor thread only):
    private BeginPass pass;
    private int position;
    /** Compute actions on the device queue, oldest (running) first: at most {@link #QUEUE_DEPTH}. */
    private final java.util.ArrayDeque<Action> queued = new java.util.ArrayDeque<>();
    /** Remote SENDs (static mode) whose tensor is still being computed: sent as soon as it exists. */
    // Keyed by key(stage, microbatch) or its directed(): primitive maps, nothing boxed per message.
    private final LongHashSet sendOnCompletion = new LongHashSet();
    private final Long2ObjectHashMap<TensorPayload> forwardIn = new Long2ObjectHashMap<>();
    private final Long2ObjectHashMap<TensorPayload> backwardIn = new Long2ObjectHashMap<>();
    private final Long2ObjectHashMap<Tensor> forwardOut = new Long2ObjectHashMap<>();
    private final Long2ObjectHashMap<Tensor> backwardOut = new Long2ObjectHashMap<>();
    private static final long NONE = Long.MIN_VALUE;
    /** When the row reached each RECV still waiting for its tensor. */
    private final Long2LongHashMap recvWaitStart = new Long2LongHashMap(NONE);
    /** The RECV events of this pass whose input no action has used yet (index in {@link #events}), by direction and key. */
    private final Long2LongHashMap recvEvent = new Long2LongHashMap(NONE);
    /** When each buffered tensor arrived (transport's stamp), by direction and key. */
    private final Long2LongHashMap arrivedAt = new Long2LongHashMap(NONE);
    /** The job's id on every frame this rank sends: the plan's, until the Coordinator's JoinJob. */
    private long jobId;
    /** Set on the device thread if building the stages failed. */
    private volatile Throwable deviceInitError;
    private final boolean[] done;
    /** Actions of the row not done in this pass. */
    private int notDone;
    private final int[] inFlight;
    private final int[] lastWeightMb;
    private final LongHashSet forwardDone = new LongHashSet();
    private final LongHashSet inputGradDone = new LongHashSet();
    private final List<ActionEvent> events = new ArrayList<>();
    private final Map<Integer, LossOutput> losses = new HashMap<>();
    private int stashed;
    private long actionsRun;
    /** Compute actions run, by {@link ActionKind} ordinal. */
    private final long[] actionsByKind = new long[ActionKind.values().length];
    private Action lastFinished;
    private long lastFinishedNs;
    /** When the device thread started its current compute action (written there, read by the actor). */
    private volatile long deviceStartNs;
    private boolean failed;
    /** Bumped when the rank (re)joins under a new job id: kernel results of an earlier generation are stale. */
    private int generation;
    private Throwable initError;

    private StageActor(ActorContext<Command> ctx, JobPlan plan, int rank, Submesh submesh, Transport transport) {
        super(ctx);
        this.plan = plan;
        this.rank = rank;
        this.submesh = submesh;
        this.transport = transport;
        this.channels = new TensorChannel[plan.ranks()];
        this.device = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "ttpipe-rank" + rank + "-device");
            t.setDaemon(true);
            return t;
        });
        this.mySlices = plan.slicesOfRank(rank);
        this.row = plan.schedule().row(rank);
        this.inFlightLimit = plan.inFlightLimits();
        this.done = new boolean[row.size()];
        this.inFlight = new int[plan.stages()];
        this.lastWeightMb = new int[plan.stages()];
        this.jobId = plan.jobId();
        ActorRef<Command> self = ctx.getSelf();
        device.execute(() -> {
            Throwable error = null;
            try {
                for (StageSlice s : mySlices) {
                    stages.put(s.index(), new Stage(plan.model(), s, submesh, plan.parallelism(), plan.seed()));
                    optimizers.put(s.index(), new Optimizer(plan.optimizer()));
                }
            } catch (Throwable t) {
                error = t;
                deviceInitError = t;
            }
            self.tell(new Initialized(error));
        });
    }

    @Override
    public Receive<Command> createReceive() {
        return newReceiveBuilder()
                .onMessage(Initialized.class, this::onInitialized)
                .onMessage(JoinJob.class, this::onJoinJob)
                .onMessage(BeginPass.class, this::onBeginPass)
                .onMessage(Arrived.class, this::onArrived)
                .onMessage(ComputeDone.class, this::onComputeDone)
                .onMessage(ComputeFailed.class, this::onComputeFailed)
                .onMessage(SendFailed.class, m -> m.jobId() == jobId ? onComputeFailed(new ComputeFailed(generation, m.action(), m.error())) : this)
                .onMessage(FrameDropped.class, this::onFrameDropped)
                .onMessage(Reinitialize.class, this::onReinitialize)
                .onMessage(FinishStep.class, this::onFinishStep)
                .onMessage(ApplyOptimizer.class, this::onApplyOptimizer)
                .onMessage(StepWorkDone.class, this::onStepWorkDone)
                .onMessage(GetStats.class, this::onGetStats)
                .onMessage(GetWeights.class, this::onGetWeights)
                .onMessage(SaveState.class, this::onSaveState)
                .onMessage(AwaitSaved.class, this::onAwaitSaved)
                .onMessage(LoadState.class, this::onLoadState)
                .onMessage(RunOnDevice.class, this::onRunOnDevice)
                .onSignal(PostStop.class, s -> onStop())
                .build();
    }

    // ---- the pass ---------------------------------------------------------------------------------

    private Behavior<Command> onInitialized(Initialized m) {
        initError = m.error();
        if (initError != null) getContext().getLog().error("rank {}: could not build its stages", rank, initError);
        return this;
    }

    private Behavior<Command> onJoinJob(JoinJob m) {
        String mine = plan.fingerprint();
        if (!mine.equals(m.fingerprint())) {
            m.replyTo().tell(new Coordinator.Joined(rank, m.jobId(), "it was started with a different plan (config or flags) than rank 0;"
                    + " start every worker with the same config and flags\n  rank 0: " + m.fingerprint() + "\n  rank " + rank
                    + ": " + mine));
            return this;
        }
        if (m.jobId() != jobId) {
            // Joining (again, after a failed step): what this rank held of that step is dropped, its
            // gradients too; results of its kernels still on the device queue are ignored (generation),
            // and its frames still in flight carry the old job id, so the transport drops them.
            generation++;
            queued.clear();
            failed = false;
            dropPassState();
        }
        jobId = m.jobId();
        transport.adoptJob(m.jobId());
        // Behind the stages' construction on the device queue: answer once they exist (or failed).
        device.execute(() -> {
            Throwable t = deviceInitError;
            m.replyTo().tell(new Coordinator.Joined(rank, m.jobId(), t == null ? null
                    : "building its stages failed: " + Coordinator.describe(t)));
        });
        return this;
    }

    private Behavior<Command> onBeginPass(BeginPass m) {
        if (initError != null) {
            m.replyTo().tell(new Coordinator.RankFailed(rank, "rank " + rank + ": building its stages failed: "
                    + Coordinator.describe(initError)));
            return this;
        }
        pass = m;
        position = 0;
        failed = false;
        java.util.Arrays.fill(done, false);
        notDone = done.length;
        java.util.Arrays.fill(inFlight, 0);
        java.util.Arrays.fill(lastWeightMb, -1);
        forwardDone.clear();
        inputGradDone.clear();
        sendOnCompletion.clear();
        events.clear();
        recvEvent.clear();
        losses.clear();
        advance();
        return this;
    }

    private Behavior<Command> onArrived(Arrived m) {
        FrameHeader h = m.payload().header();
        if (failed || h.jobId() != jobId) {
            m.payload().discard();
            return this;
        }
        long key = key(h.toStage(), h.microbatch());
        boolean forward = h.kind() == TensorKind.ACTIVATION;
        (forward ? forwardIn : backwardIn).put(key, m.payload());
        arrivedAt.put(directed(key, forward), m.arrivedNs());
        if (pass != null && plan.readyFirst()) {
            // No RECV in the row to time here: mark the arrival so telemetry knows when the data came.
            recvEvent.put(directed(key, forward), events.size());
            record(new Action(h.toStage(), forward ? ActionKind.RECV_F : ActionKind.RECV_B, h.microbatch()),
                    m.arrivedNs(), m.arrivedNs(), 0, 0);
        }
        if (pass != null) advance();
        return this;
    }

    /** Runs as much of the row as is ready: comm actions inline, up to QUEUE_DEPTH compute actions on the device queue. */
    private void advance() {
        if (pass == null || failed) return;
        if (plan.readyFirst()) {
            advanceReadyFirst();
        } else {
            advanceStatic();
        }
        if (queued.isEmpty() && allDone()) finishPass();
    }

    private void advanceStatic() {
        while (position < row.size()) {
            Action a = row.get(position);
            if (a.kind().isCompute() && queued.size() >= QUEUE_DEPTH) return;
            if (!tryRun(position, a)) return;
            position++;
        }
    }

    private void advanceReadyFirst() {
        // Comm actions are implicit here: outputs are sent as soon as they exist, arrivals wait in buffers.
        for (int i = 0; i < row.size() && queued.size() < QUEUE_DEPTH; i++) {
            if (done[i]) continue;
            Action a = row.get(i);
            if (!a.kind().isCompute()) {
                markDone(i); // satisfied implicitly
                continue;
            }
            if (readyFirstAllows(a)) tryRun(i, a);
        }
    }

    private boolean readyFirstAllows(Action a) {
        int s = a.stage(), mb = a.microbatch();
        long key = key(s, mb);
        switch (a.kind()) {
            case F:
                return inFlight[s] < Math.max(1, inFlightLimit[s]);
            case I:
                return forwardDone.contains(key);
            case B:
                // accumulate weight gradients in microbatch order
                return forwardDone.contains(key) && lastWeightMb[s] == mb - 1;
            case W:
                return inputGradDone.contains(key) && lastWeightMb[s] == mb - 1;
            default:
                return true;
        }
    }

    /** Starts {@code a} if it is ready; returns whether it started (or completed, for comm actions). */
    private boolean tryRun(int index, Action a) {
        int s = a.stage(), mb = a.microbatch();
        long key = key(s, mb);
        switch (a.kind()) {
            case RECV_F:
            case RECV_B: {
                Long2ObjectHashMap<TensorPayload> buffer = a.kind() == ActionKind.RECV_F ? forwardIn : backwardIn;
                long now = System.nanoTime();
                long wait = directed(key, a.kind() == ActionKind.RECV_F);
                long waitStart = recvWaitStart.get(wait);
                if (!buffer.containsKey(key)) {
                    if (waitStart == NONE) recvWaitStart.put(wait, now);
                    return false;
                }
                long start = waitStart == NONE ? now : waitStart;
                recvWaitStart.remove(wait);
                // Waited from reaching the RECV until the transport delivered the tensor (not until the actor saw it).
                long arrived = arrivedAt.remove(wait);
                long end = arrived == NONE ? start : Math.max(start, arrived);
                recvEvent.put(wait, events.size());
                record(a, start, end, 0, end - start);
                markDone(index);
                return true;
            }
            case SEND_F:
            case SEND_B: {
                Long2ObjectHashMap<Tensor> out = a.kind() == ActionKind.SEND_F ? forwardOut : backwardOut;
                Tensor t = out.remove(key);
                if (t == null) {
                    // Its producer is still on the device queue (the row runs in order): send it when it is done.
                    sendOnCompletion.add(directed(key, a.kind() == ActionKind.SEND_F));
                    markDone(index);
                    return true;
                }
                long start = System.nanoTime();
                long bytes = send(a.kind() == ActionKind.SEND_F ? TensorKind.ACTIVATION : TensorKind.GRADIENT, s, mb, t);
                record(a, start, System.nanoTime(), bytes, 0);
                markDone(index);
                return true;
            }
            case F:
                if (!stageIsFirst(s) && !forwardIn.containsKey(key)) return false;
                break;
            case B:
            case I:
                if (!stageIsLast(s) && !backwardIn.containsKey(key)) return false;
                break;
            case W:
                break;
            default:
                markDone(index); // REDUCE_GRAD / OPTIMIZER_STEP run in the step protocol
                return true;
        }
        submit(index, a);
        return true;
    }

    private void submit(int index, Action a) {
        int s = a.stage(), mb = a.microbatch();
        long key = key(s, mb);
        TensorPayload in = a.kind() == ActionKind.F ? forwardIn.remove(key)
                : (a.kind() == ActionKind.B || a.kind() == ActionKind.I) ? backwardIn.remove(key) : null;
        BeginPass p = pass;
        int buffered = forwardIn.size() + backwardIn.size();
        queued.addLast(a);
        markDone(index);
        if (a.kind() == ActionKind.F) inFlight[s]++;
        ActorRef<Command> self = getContext().getSelf();
        int gen = generation;
        device.execute(() -> {
            long start = System.nanoTime();
            deviceStartNs = start;
            try {
                var delay = testDelay;
                if (delay != null && delay.getKey().equals(a)) Thread.sleep(delay.getValue());
                Stage stage = stages.get(s);
                // The input from another rank first: on a queue that runs ahead, this is where it waits for the sender.
                Tensor remote = in == null ? null : in.materialize(submesh);
                long inputReady = remote == null ? -1 : submesh.readyAtNanos(remote);
                long queued = submesh.queuedUntilNanos();
                if (queued >= 0) start = Math.max(System.nanoTime(), queued);     // when the queue reaches this action
                Tensor output = null;
                LossOutput loss = null;
                switch (a.kind()) {
                    case F: {
                        Tensor x = stage.isFirst()
                                ? Inputs.ids(submesh.ops(), plan.parallelism(), p.data().inputs()[mb], p.data().microbatchSize(), p.data().seqLen())
                                : remote;
                        if (stage.isLast()) {
                            stage.setTargets(mb, Inputs.ids(submesh.ops(), plan.parallelism(), p.data().targets()[mb],
                                    p.data().microbatchSize(), p.data().seqLen()), p.data().lossScale());
                        }
                        output = stage.forward(p.pass(), mb, x);
                        if (stage.isLast()) loss = stage.loss(mb);
                        break;
                    }
                    case B:
                        output = stage.backward(p.pass(), mb, remote);
                        break;
                    case I:
                        output = stage.backwardInput(p.pass(), mb, remote);
                        break;
                    case W:
                        stage.backwardWeight(p.pass(), mb);
                        break;
                    default:
                        throw new IllegalStateException("not a compute action: " + a);
                }
                // A queue that runs ahead is not waited for: the actor goes on issuing, and a rank that
                // adopts the output waits for it on its own queue. Otherwise the action ends here.
                long end = submesh.queuedUntilNanos();
                if (end < 0) {
                    submesh.synchronize();
                    end = System.nanoTime();
                } else if (output != null) {
                    submesh.fence(output);      // handed on at the action's end, as the simulator assumes
                }
                self.tell(new ComputeDone(gen, a, output, loss, start, end, buffered, inputReady));
            } catch (Throwable t) {
                self.tell(new ComputeFailed(gen, a, t));
            }
        });
    }

    private Behavior<Command> onComputeDone(ComputeDone m) {
        if (m.generation() != generation) {                 // a kernel of a step abandoned by a rejoin
            if (m.output() != null) m.output().close();
            return this;
        }
        Action a = m.action();
        queued.pollFirst();
        actionsRun++;
        actionsByKind[a.kind().ordinal()]++;
        lastFinished = a;
        lastFinishedNs = System.nanoTime();
        int s = a.stage(), mb = a.microbatch();
        if (failed) {
            if (m.output() != null) m.output().close();
            return this;
        }
        if (m.inputReadyNs() >= 0) inputReadyOnDevice(a, m.inputReadyNs());
        switch (a.kind()) {
            case F:
                stashed++;
                forwardDone.add(key(s, mb));
                if (m.loss() != null) losses.put(mb, m.loss());
                if (m.output() != null) route(TensorKind.ACTIVATION, s, s + 1, mb, m.output());
                break;
            case B:
                stashed--;
                inFlight[s]--;
                lastWeightMb[s] = mb;
                if (m.output() != null) route(TensorKind.GRADIENT, s, s - 1, mb, m.output());
                break;
            case I:
                inputGradDone.add(key(s, mb));
                if (m.output() != null) route(TensorKind.GRADIENT, s, s - 1, mb, m.output());
                break;
            case W:
                stashed--;
                inFlight[s]--;
                lastWeightMb[s] = mb;
                break;
            default:
                break;
        }
        events.add(new ActionEvent(rank, a, pass.pass(), m.startNs(), m.endNs(), 0, 0, m.queueDepth(), stashed,
                submesh.maxInUse()));
        advance();
        return this;
    }

    /** Where an output goes: to a stage on this rank directly, else out through the transport (now or at its SEND). */
    private void route(TensorKind kind, int from, int to, int mb, Tensor t) {
        long key = key(to, mb);
        if (plan.schedule().rankOfStage(to) == rank) {
            FrameHeader h = header(kind, from, to, mb, t);
            (kind == TensorKind.ACTIVATION ? forwardIn : backwardIn).put(key, new LocalPayload(h, t));
            return;
        }
        if (plan.readyFirst() || sendOnCompletion.remove(directed(key(from, mb), kind == TensorKind.ACTIVATION))) {
            long start = System.nanoTime();
            long bytes = send(kind, from, mb, t);
            record(new Action(from, kind == TensorKind.ACTIVATION ? ActionKind.SEND_F : ActionKind.SEND_B, mb),
                    start, System.nanoTime(), bytes, 0);
        } else {
            (kind == TensorKind.ACTIVATION ? forwardOut : backwardOut).put(key(from, mb), t);
        }
    }

    private long send(TensorKind kind, int from, int mb, Tensor t) {
        int to = kind == TensorKind.ACTIVATION ? from + 1 : from - 1;
        FrameHeader h = header(kind, from, to, mb, t);
        long bytes = t.bytesPerDevice() * t.submesh().devices().size();
        TensorChannel ch = channel(plan.schedule().rankOfStage(to));
        ActorRef<Command> self = getContext().getSelf();
        long job = jobId;
        ch.send(h, t).whenComplete((v, err) -> {
            if (err != null) self.tell(new SendFailed(new Action(from, kind == TensorKind.ACTIVATION ? ActionKind.SEND_F
                    : ActionKind.SEND_B, mb), err, job));
        });
        return bytes;
    }

    /** The transport's channel to {@code toRank}, looked up once (a send is on the hot path). */
    private TensorChannel channel(int toRank) {
        TensorChannel ch = channels[toRank];
        if (ch == null) channels[toRank] = ch = transport.channel(rank, toRank);
        return ch;
    }

    private FrameHeader header(TensorKind kind, int from, int to, int mb, Tensor t) {
        return new FrameHeader(jobId, pass.pass(), from, to, mb, kind, t.dtype(), t.shape(), t.layout(), 0, 0);
    }

    private void record(Action a, long start, long end, long bytes, long wait) {
        events.add(new ActionEvent(rank, a, pass.pass(), start, end, bytes, wait, forwardIn.size() + backwardIn.size(), stashed,
                submesh.maxInUse()));
    }

    private void markDone(int index) {
        if (!done[index]) {
            done[index] = true;
            notDone--;
        }
    }

    private boolean allDone() {
        return notDone == 0;
    }

    /**
     * On a queue that runs ahead of the actor (sim): {@code a}'s input from another rank was there when
     * the sender's queue produced it, which its RECV now says, instead of when the message came (the
     * runtime's delay in between is then seen as the device's wait, not as the data's).
     */
    private void inputReadyOnDevice(Action a, long readyNs) {
        if (!(a.kind() == ActionKind.F || a.kind() == ActionKind.B || a.kind() == ActionKind.I)) return;
        long i = recvEvent.remove(directed(key(a.stage(), a.microbatch()), a.kind() == ActionKind.F));
        if (i == NONE) return;
        ActionEvent e = events.get((int) i);
        long end = Math.max(e.startNs(), readyNs);
        events.set((int) i, new ActionEvent(e.rank(), e.action(), e.pass(), e.startNs(), end, e.bytes(), end - e.startNs(), e.queueDepth(),
                e.stashed(), e.memory()));
    }

    private void finishPass() {
        BeginPass p = pass;
        pass = null;
        Coordinator.PassDone done = new Coordinator.PassDone(rank, p.pass(), List.copyOf(events), Map.copyOf(losses));
        if (submesh.queuedUntilNanos() <= System.nanoTime()) {
            p.replyTo().tell(done);
        } else {
            // The device queue runs ahead (sim): the pass is done when it has run everything issued.
            device.execute(() -> {
                submesh.synchronize();
                p.replyTo().tell(done);
            });
        }
    }

    private Behavior<Command> onComputeFailed(ComputeFailed m) {
        if (m.generation() != generation) return this;
        if (m.action().kind().isCompute()) queued.pollFirst();
        if (failed) return this;
        failed = true;
        Action a = m.action();
        String where = "rank " + rank + ", stage " + a.stage() + ", action " + a + " (microbatch " + a.microbatch() + ")";
        getContext().getLog().debug("{} failed", where, m.error());
        ActorRef<Coordinator.Command> replyTo = pass != null ? pass.replyTo() : null;
        dropPassState();
        if (replyTo != null) replyTo.tell(new Coordinator.RankFailed(rank, where + ": " + Coordinator.describe(m.error())));
        return this;
    }

    /**
     * A frame meant for this rank was dropped: the tensor it carried will not come, so the pass fails
     * now, naming the channel (and so the peer rank), the tensor and what was wrong, instead of
     * waiting for it until the step times out.
     */
    private Behavior<Command> onFrameDropped(FrameDropped m) {
        String what = "rank " + rank + ": on " + m.channel() + ", " + m.problem();
        if (pass == null || failed) {
            getContext().getLog().error("{} (between passes)", what);
            return this;
        }
        failed = true;
        ActorRef<Coordinator.Command> replyTo = pass.replyTo();
        dropPassState();
        replyTo.tell(new Coordinator.RankFailed(rank, what));
        return this;
    }

    /** After a failure: frees buffered tensors and every stage's stash on the device queue. */
    private void dropPassState() {
        forwardIn.values().forEach(TensorPayload::discard);
        backwardIn.values().forEach(TensorPayload::discard);
        forwardOut.values().forEach(Tensor::close);
        backwardOut.values().forEach(Tensor::close);
        forwardIn.clear();
        backwardIn.clear();
        arrivedAt.clear();
        recvEvent.clear();
        forwardOut.clear();
        backwardOut.clear();
        sendOnCompletion.clear();
        stashed = 0;
        pass = null;
        device.execute(() -> stages.values().forEach(Stage::abortStep));
    }

    // ---- end of step ----------------------------------------------------------------------------------

    private Behavior<Command> onFinishStep(FinishStep m) {
        ActorRef<Command> self = getContext().getSelf();
        device.execute(() -> {
            long start = System.nanoTime();
            try {
                java.util.TreeMap<Integer, double[]> sums = new java.util.TreeMap<>();
                String nonFinite = null;
                int nonFiniteStage = -1;
                List<float[]> tied = new ArrayList<>();
                int[] poison = testPoison;
                for (Stage s : stages.values()) {
                    if (poison != null && poison[0] == s.index() && m.step() >= poison[1]) {
                        s.parameters().stream().filter(p -> p.grad() != null).findFirst()
                                .ifPresent(p -> submesh.ops().scaleInPlace(p.grad(), Float.NaN));
                    }
                    s.reduceGradients();
                    sums.put(s.index(), s.gradSumsOfSquares());
                    // Megatron's tied embedding: this stage's half of the gradient goes to the coordinator, which sums both.
                    if (s.tiedAcrossStages() != null) tied.add(s.tiedAcrossStages().fullGrad().toHost());
                    // Backward runs from the last stage down: the highest stage with a non-finite gradient saw it first.
                    if (s.nonFiniteGradient() != null && s.index() > nonFiniteStage) {
                        nonFiniteStage = s.index();
                        nonFinite = "stage " + s.index() + " (rank " + rank + "), parameter " + s.nonFiniteGradient();
                    }
                }
                submesh.synchronize();
                self.tell(new StepWorkDone(ActionKind.REDUCE_GRAD, sums, nonFinite, nonFiniteStage, tied.toArray(new float[0][]),
                        start, System.nanoTime(), m.replyTo()));
            } catch (Throwable t) {
                m.replyTo().tell(new Coordinator.RankFailed(rank, "rank " + rank + ", gradient reduction: " + Coordinator.describe(t)));
            }
        });
        return this;
    }

    private Behavior<Command> onApplyOptimizer(ApplyOptimizer m) {
        ActorRef<Command> self = getContext().getSelf();
        device.execute(() -> {
            long start = System.nanoTime();
            try {
                for (Map.Entry<Integer, Stage> e : stages.entrySet()) {
                    if (!m.skip() && m.tiedGrad() != null && e.getValue().tiedAcrossStages() != null) {
                        e.getValue().tiedAcrossStages().replaceFullGrad(m.tiedGrad());   // both halves: the same sum, the same update
                    }
                    if (m.skip()) e.getValue().endStep();         // no weight, no moment, no step count changes
                    else optimizers.get(e.getKey()).step(e.getValue(), m.lr(), m.clip());
                }
                submesh.synchronize();
                self.tell(new StepWorkDone(ActionKind.OPTIMIZER_STEP, null, null, -1, null, start, System.nanoTime(), m.replyTo()));
            } catch (Throwable t) {
                m.replyTo().tell(new Coordinator.RankFailed(rank, "rank " + rank + ", optimizer step: " + Coordinator.describe(t)));
            }
        });
        return this;
    }

    private Behavior<Command> onStepWorkDone(StepWorkDone m) {
        ActionEvent e = new ActionEvent(rank, new Action(mySlices.get(0).index(), m.what()), -1, m.startNs(), m.endNs(), 0, 0,
                0, stashed, submesh.maxInUse());
        if (m.what() == ActionKind.REDUCE_GRAD) {
            m.replyTo().tell(new Coordinator.GradReport(rank, m.sums(), m.nonFinite(), m.nonFiniteStage(), m.tiedGrads(), e));
        } else {
            m.replyTo().tell(new Coordinator.OptimizerDone(rank, e, submesh.maxPeak()));
            submesh.devices().forEach(d -> d.resetPeak());
        }
        return this;
    }

    // ---- queries --------------------------------------------------------------------------------------

    private Behavior<Command> onGetStats(GetStats m) {
        Action running = queued.peekFirst();
        m.replyTo().tell(new StageStats(rank, running == null ? null : running.toString(), running != null, queued.size(), position, row.size(),
                forwardIn.size() + backwardIn.size(), stashed, submesh.maxInUse(), submesh.maxPeak(), actionsRun, waiting(),
                actionsByKind.clone(), transport.droppedFrames(rank)));
        return this;
    }

    private Waiting waiting() {
        long now = System.nanoTime();
        Action running = queued.peekFirst();
        long started = deviceStartNs;
        String waitingFor = null;
        int from = -1;
        long waitingMs = 0;
        if (pass != null && !failed && !plan.readyFirst() && position < row.size()) {
            Action next = row.get(position);
            if (next.kind() == ActionKind.RECV_F || next.kind() == ActionKind.RECV_B) {
                boolean fwd = next.kind() == ActionKind.RECV_F;
                long since = recvWaitStart.get(directed(key(next.stage(), next.microbatch()), fwd));
                waitingFor = next.toString();
                from = plan.schedule().rankOfStage(fwd ? next.stage() - 1 : next.stage() + 1);
                waitingMs = since == NONE ? 0 : (now - since) / 1_000_000;
            }
        }
        return new Waiting(running == null ? null : running.toString(), running == null || started == 0 ? 0 : (now - started) / 1_000_000,
                waitingFor, from, waitingMs, lastFinished == null ? null : lastFinished.toString(),
                lastFinishedNs == 0 ? -1 : (now - lastFinishedNs) / 1_000_000, pass != null);
    }

    private Behavior<Command> onSaveState(SaveState m) {
        CompletableFuture<SavedFiles> written = new CompletableFuture<>();
        saved.put(m.step(), written);
        device.execute(() -> {
            long t0 = System.nanoTime();
            List<dev.ttpipe.stages.checkpoint.StageState.Snapshot> snapshots = new ArrayList<>();
            try {
                for (Map.Entry<Integer, Stage> e : stages.entrySet()) {
                    snapshots.add(dev.ttpipe.stages.checkpoint.StageState.snapshot(e.getValue(), optimizers.get(e.getKey())));
                }
            } catch (Throwable t) {
                m.replyTo().tell(StatusReply.error("rank " + rank + ": copying its state to the host failed: " + Coordinator.describe(t)));
                written.completeExceptionally(t);
                return;
            }
            double copySeconds = (System.nanoTime() - t0) / 1e9;
            synchronized (snapshotsInMemory) {
                snapshotsInMemory.put(m.step(), snapshots);
                while (snapshotsInMemory.size() > SNAPSHOTS_KEPT) snapshotsInMemory.pollFirstEntry();
            }
            m.replyTo().tell(StatusReply.success(rank));
            writer().execute(() -> {
                try {
                    var w = dev.ttpipe.stages.checkpoint.StageState.write(java.nio.file.Path.of(m.dir()), snapshots);
                    written.complete(new SavedFiles(rank, w.sha256(), w.bytes(), copySeconds, w.seconds()));
                } catch (Throwable t) {
                    written.completeExceptionally(t);
                }
            });
        });
        return this;
    }

    private Behavior<Command> onAwaitSaved(AwaitSaved m) {
        CompletableFuture<SavedFiles> f = saved.remove(m.step());
        if (f == null) {
            m.replyTo().tell(StatusReply.error("rank " + rank + ": no checkpoint of step " + m.step() + " is being written"));
            return this;
        }
        f.whenComplete((files, err) -> m.replyTo().tell(err == null ? StatusReply.success(files)
                : StatusReply.error("rank " + rank + ": writing the checkpoint failed: " + Coordinator.describe(err))));
        return this;
    }

    private Behavior<Command> onReinitialize(Reinitialize m) {
        device.execute(() -> {
            try {
                for (StageSlice s : mySlices) {
                    Stage old = stages.put(s.index(), new Stage(plan.model(), s, submesh, plan.parallelism(), plan.seed()));
                    if (old != null) old.close();
                    optimizers.put(s.index(), new Optimizer(plan.optimizer()));
                }
                m.replyTo().tell(StatusReply.success(rank));
            } catch (Throwable t) {
                m.replyTo().tell(StatusReply.error("rank " + rank + ": rebuilding its stages failed: " + Coordinator.describe(t)));
            }
        });
        return this;
    }

    /**
     * The host copies of this rank's last checkpoints, by step: a rollback to one of them (a recovery)
     * restores from memory instead of reading the disk. Two, because the newest may never complete
     * (a rank died while it was written) and then the one before is the latest. Costs twice this rank's
     * parameters and optimizer moments in host memory.
     */
    private final java.util.TreeMap<Integer, List<dev.ttpipe.stages.checkpoint.StageState.Snapshot>> snapshotsInMemory =
            new java.util.TreeMap<>();
    static final int SNAPSHOTS_KEPT = 2;

    private Behavior<Command> onLoadState(LoadState m) {
        device.execute(() -> {
            List<dev.ttpipe.stages.checkpoint.StageState.Snapshot> kept;
            synchronized (snapshotsInMemory) {
                kept = snapshotsInMemory.get(m.step());
            }
            if (kept != null && kept.size() == stages.size()) {
                try {
                    for (dev.ttpipe.stages.checkpoint.StageState.Snapshot s : kept) {
                        dev.ttpipe.stages.checkpoint.StageState.restore(s, stages.get(s.stage()));
                    }
                    for (Optimizer o : optimizers.values()) o.restoreSteps(m.optimizerSteps());
                    m.replyTo().tell(StatusReply.success(1));              // from memory
                } catch (Throwable t) {
                    m.replyTo().tell(StatusReply.error("rank " + rank + ": restoring its snapshot of step " + m.step() + " failed: "
                            + Coordinator.describe(t)));
                }
                return;
            }
            try {
                dev.ttpipe.stages.checkpoint.StageState.load(java.nio.file.Path.of(m.dir()), plan.model(), List.copyOf(stages.values()));
                for (Optimizer o : optimizers.values()) o.restoreSteps(m.optimizerSteps());
                m.replyTo().tell(StatusReply.success(0));                      // from the disk
            } catch (Throwable t) {
                m.replyTo().tell(StatusReply.error(t instanceof RuntimeException ? t
                        : new IllegalStateException(Coordinator.describe(t), t)));
            }
        });
        return this;
    }

    /** The checkpoint writer: one background thread, so host copies are written while the device trains on. */
    private ExecutorService writer() {
        if (writer == null) {
            writer = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "ttpipe-rank" + rank + "-writer");
                t.setDaemon(true);
                return t;
            });
        }
        return writer;
    }

    private Behavior<Command> onGetWeights(GetWeights m) {
        device.execute(() -> {
            Map<String, float[]> out = new LinkedHashMap<>();
            for (Stage s : stages.values()) {
                for (Param p : s.parameters()) out.put(p.name(), p.value().toHost());
            }
            m.replyTo().tell(new Weights(out));
        });
        return this;
    }

    private Behavior<Command> onRunOnDevice(RunOnDevice m) {
        device.execute(() -> {
            StatusReply<Object> reply;
            try {
                reply = StatusReply.success(m.work().apply(List.copyOf(stages.values())));
            } catch (Throwable t) {
                reply = StatusReply.error(t);
            }
            m.replyTo().tell(reply);
        });
        return this;
    }

    private Behavior<Command> onStop() {
        dropPassStateQuietly();
        device.execute(() -> {
            stages.values().forEach(Stage::close);
            stages.clear();
        });
        device.shutdown();
        if (writer != null) writer.shutdown();
        try {
            if (!device.awaitTermination(30, TimeUnit.SECONDS)) device.shutdownNow();
        } catch (InterruptedException e) {
            device.shutdownNow();
            Thread.currentThread().interrupt();
        }
        return this;
    }

    private void dropPassStateQuietly() {
        try {
            dropPassState();
        } catch (RuntimeException ignored) {
            // stopping anyway
        }
    }

    private boolean stageIsFirst(int s) {
        return s == 0;
    }

    private boolean stageIsLast(int s) {
        return s == plan.stages() - 1;
    }

    private static long key(int stage, int mb) {
        return ((long) stage << 32) | (mb & 0xffffffffL);
    }

    /** {@code key} told apart by direction: forward (activations) or backward (gradients). */
    private static long directed(long key, boolean forward) {
        return key * 2 + (forward ? 0 : 1);
    }

    /** A tensor passed between two stages of this rank: already on the right submesh. */
    private record LocalPayload(FrameHeader header, Tensor tensor) implements TensorPayload {
        @Override
        public Tensor materialize(Submesh dst) {
            return tensor;
        }

        @Override
        public void discard() {
            tensor.close();
        }
    }

}

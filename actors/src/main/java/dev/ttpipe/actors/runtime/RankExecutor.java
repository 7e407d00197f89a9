package dev.ttpipe.actors.runtime;

import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.transport.FrameHeader;
import dev.ttpipe.transport.TensorKind;
import dev.ttpipe.transport.TensorPayload;
import org.agrona.collections.Long2LongHashMap;
import org.agrona.collections.Long2ObjectHashMap;
import org.agrona.collections.LongHashSet;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.IntUnaryOperator;

/**
 * One rank's row interpreter: decides, for each forward pass, which action of the rank's row of the
 * schedule runs next, and keeps what that needs (tensors waiting for their action, in-flight counts,
 * which outputs go where, the pass's timeline). It runs no kernel and sends nothing itself: it tells
 * its {@link Port} to queue a compute action or send a tensor, and is told when a tensor arrives and
 * when a compute action is done. Single-threaded (the actor's thread) and free of Pekko, so it is
 * tested directly, as {@code Simulator} is.
 *
 * <p>Static mode runs the row in order (a RECV waits for its data; SENDs hand the tensor to the
 * transport and move on, or, when the tensor is still being computed, when it is done). Like a
 * device command queue, the device queue holds up to {@link #QUEUE_DEPTH} compute actions, so the
 * next kernel is already queued when the current one ends. Ready-first mode runs whichever compute
 * action is ready, keeping to the static schedule's per-stage in-flight limit and to ascending
 * microbatch order of weight-gradient accumulation (so the sums, and therefore the results, are the
 * same bit for bit).
 */
final class RankExecutor {

    /**
     * Compute actions kept on the device queue: the running one and the next, so the device goes from
     * one kernel straight to the next instead of waiting for the actor to hear of the first one's end
     * (two thread hand-offs, tens of microseconds).
     */
    static final int QUEUE_DEPTH = 2;

    /** Where the executor's decisions go. */
    interface Port {
        /**
         * Queues compute action {@code a} on the device; {@code input} is its tensor from another stage
         * (null for the first stage's F and for W), {@code buffered} the tensors waiting meanwhile.
         */
        void compute(Action a, TensorPayload input, int buffered);

        /** Sends {@code t} to stage {@code header.toStage()}, on rank {@code toRank}. */
        void send(int toRank, FrameHeader header, Tensor t);

        /** The devices' memory in use now (the largest of the rank's devices). */
        long memoryInUse();

        /** The pass failed or was abandoned: every stage drops what it stashed for backward. */
        void abortStep();
    }

    /**
     * A finished pass: every action's timeline event, and what the microbatches whose last stage is here
     * handed back: their losses (training, evaluation), or logits (generation).
     */
    record PassResult(int pass, List<ActionEvent> events, Map<Integer, LossOutput> losses, Map<Integer, float[]> logits) {
    }

    private static final long NONE = Long.MIN_VALUE;
    private static final int NO_PASS = Integer.MIN_VALUE;

    private final int rank;
    private final List<Action> row;
    private final int stages;
    private final IntUnaryOperator rankOfStage;
    private final int[] inFlightLimit;
    private final boolean readyFirst;
    /** The row has no backward (an inference plan): a forward stashes nothing. */
    private final boolean forwardOnly;
    private final Port port;

    /** The job's id on every frame this rank sends. */
    private long jobId;
    /** Bumped when the rank (re)joins under a new job id: kernel results of an earlier generation are stale. */
    private int generation;
    private int pass = NO_PASS;
    private boolean failed;
    private int position;
    private final boolean[] done;
    /** Actions of the row not done in this pass. */
    private int notDone;
    /** Compute actions on the device queue, oldest (running) first: at most {@link #QUEUE_DEPTH}. */
    private final ArrayDeque<Action> queued = new ArrayDeque<>();
    // Keyed by key(stage, microbatch) or its directed(): primitive maps, nothing boxed per message.
    /** Remote SENDs (static mode) whose tensor is still being computed: sent as soon as it exists. */
    private final LongHashSet sendOnCompletion = new LongHashSet();
    private final Long2ObjectHashMap<TensorPayload> forwardIn = new Long2ObjectHashMap<>();
    private final Long2ObjectHashMap<TensorPayload> backwardIn = new Long2ObjectHashMap<>();
    private final Long2ObjectHashMap<Tensor> forwardOut = new Long2ObjectHashMap<>();
    private final Long2ObjectHashMap<Tensor> backwardOut = new Long2ObjectHashMap<>();
    /** When the row reached each RECV still waiting for its tensor. */
    private final Long2LongHashMap recvWaitStart = new Long2LongHashMap(NONE);
    /** The RECV events of this pass whose input no action has used yet (index in {@link #events}), by direction and key. */
    private final Long2LongHashMap recvEvent = new Long2LongHashMap(NONE);
    /** When each buffered tensor arrived (transport's stamp), by direction and key. */
    private final Long2LongHashMap arrivedAt = new Long2LongHashMap(NONE);
    private final int[] inFlight;
    private final int[] lastWeightMb;
    private final LongHashSet forwardDone = new LongHashSet();
    private final LongHashSet inputGradDone = new LongHashSet();
    private final List<ActionEvent> events = new ArrayList<>();
    private final Map<Integer, LossOutput> losses = new HashMap<>();
    private final Map<Integer, float[]> logits = new HashMap<>();
    private int stashed;
    private long actionsRun;
    /** Compute actions run, by {@link ActionKind} ordinal. */
    private final long[] actionsByKind = new long[ActionKind.values().length];
    private Action lastFinished;
    private long lastFinishedNs;

    RankExecutor(int rank, List<Action> row, int stages, IntUnaryOperator rankOfStage, int[] inFlightLimits, boolean readyFirst,
                 long jobId, Port port) {
        this.rank = rank;
        this.row = List.copyOf(row);
        this.stages = stages;
        this.rankOfStage = rankOfStage;
        this.inFlightLimit = inFlightLimits.clone();
        this.readyFirst = readyFirst;
        this.forwardOnly = JobPlan.forwardOnly(row);
        this.jobId = jobId;
        this.port = port;
        this.done = new boolean[row.size()];
        this.inFlight = new int[stages];
        this.lastWeightMb = new int[stages];
    }

    /** Rank {@code rank}'s executor of {@code plan}. */
    static RankExecutor of(JobPlan plan, int rank, Port port) {
        List<Action> row = plan.schedule().row(rank);
        return new RankExecutor(rank, row, plan.stages(), plan.schedule()::rankOfStage,
                JobPlan.inFlightLimits(row, new int[plan.stages()]), plan.readyFirst(), plan.jobId(), port);
    }

    /**
     * Rank {@code rank}'s executor of {@code plan}'s evaluation passes ({@link JobPlan#evalSchedule}) in job
     * {@code jobId}: forward only, in the row's order.
     */
    static RankExecutor forEval(JobPlan plan, int rank, long jobId, Port port) {
        return new RankExecutor(rank, plan.evalSchedule().row(rank), plan.stages(), plan.schedule()::rankOfStage,
                new int[plan.stages()], false, jobId, port);
    }

    long jobId() {
        return jobId;
    }

    int generation() {
        return generation;
    }

    /** The pass being run, or none ({@link #inPass} false). */
    int pass() {
        return pass;
    }

    boolean inPass() {
        return pass != NO_PASS;
    }

    /**
     * Joins job {@code id}. Under a new id (again, after a failed step) what this rank held of the
     * step is dropped; results of its kernels still on the device queue are ignored (a new
     * generation), and its frames still in flight carry the old id, so the transport drops them.
     */
    void join(long id) {
        if (id != jobId) {
            generation++;
            queued.clear();
            failed = false;
            drop();
        }
        jobId = id;
    }

    // ---- the pass ---------------------------------------------------------------------------------

    /** Starts forward pass {@code p}; returns its result if it is already complete (else null). */
    PassResult begin(int p) {
        return begin(p, Integer.MAX_VALUE);
    }

    /**
     * Starts pass {@code p} over the first {@code microbatches} microbatches of the row (an inference pass
     * may use fewer than the plan has); the row's actions of later microbatches are skipped.
     */
    PassResult begin(int p, int microbatches) {
        pass = p;
        position = 0;
        failed = false;
        Arrays.fill(done, false);
        notDone = done.length;
        for (int i = 0; i < done.length; i++) if (row.get(i).microbatch() >= microbatches) markDone(i);
        Arrays.fill(inFlight, 0);
        Arrays.fill(lastWeightMb, -1);
        forwardDone.clear();
        inputGradDone.clear();
        sendOnCompletion.clear();
        events.clear();
        recvEvent.clear();
        losses.clear();
        logits.clear();
        return advance();
    }

    /**
     * A tensor from another rank (or before its pass began here), delivered by the transport at
     * {@code arrivedNs}. One of another job, or arriving after a failure, is discarded.
     */
    PassResult arrived(TensorPayload payload, long arrivedNs) {
        FrameHeader h = payload.header();
        if (failed || h.jobId() != jobId) {
            payload.discard();
            return null;
        }
        long key = key(h.toStage(), h.microbatch());
        boolean forward = h.kind() == TensorKind.ACTIVATION;
        (forward ? forwardIn : backwardIn).put(key, payload);
        arrivedAt.put(directed(key, forward), arrivedNs);
        if (!inPass()) return null;
        if (readyFirst) {
            // No RECV in the row to time here: mark the arrival so telemetry knows when the data came.
            recvEvent.put(directed(key, forward), events.size());
            record(new Action(h.toStage(), forward ? ActionKind.RECV_F : ActionKind.RECV_B, h.microbatch()), arrivedNs, arrivedNs,
                    h.payloadBytes(), 0, onLink(payload));
        }
        return advance();
    }

    /**
     * Compute action {@code a}, queued in generation {@code gen}, is done: {@code output} goes on to its
     * stage, the event is recorded, and the row moves on; {@code loss} or {@code logits}: what a last stage's
     * F hands back (else null). {@code inputReadyNs}: on a queue that runs ahead (sim), when its input from
     * another rank was ready on the device (-1: not known).
     */
    PassResult computed(int gen, Action a, Tensor output, LossOutput loss, float[] logits, long startNs, long endNs, int queueDepth,
                        long inputReadyNs) {
        if (gen != generation) {                 // a kernel of a step abandoned by a rejoin
            if (output != null) output.close();
            return null;
        }
        queued.pollFirst();
        actionsRun++;
        actionsByKind[a.kind().ordinal()]++;
        lastFinished = a;
        lastFinishedNs = System.nanoTime();
        int s = a.stage(), mb = a.microbatch();
        if (failed || !inPass()) {
            if (output != null) output.close();
            return null;
        }
        if (inputReadyNs >= 0) inputReadyOnDevice(a, inputReadyNs);
        switch (a.kind()) {
            case F:
                if (!forwardOnly) stashed++;
                forwardDone.add(key(s, mb));
                if (loss != null) losses.put(mb, loss);
                if (logits != null) this.logits.put(mb, logits);
                if (output != null) route(TensorKind.ACTIVATION, s, s + 1, mb, output);
                break;
            case B:
                stashed--;
                inFlight[s]--;
                lastWeightMb[s] = mb;
                if (output != null) route(TensorKind.GRADIENT, s, s - 1, mb, output);
                break;
            case I:
                inputGradDone.add(key(s, mb));
                if (output != null) route(TensorKind.GRADIENT, s, s - 1, mb, output);
                break;
            case W:
                stashed--;
                inFlight[s]--;
                lastWeightMb[s] = mb;
                break;
            default:
                break;
        }
        events.add(new ActionEvent(rank, a, pass, startNs, endNs, 0, 0, queueDepth, stashed, port.memoryInUse()));
        return advance();
    }

    /**
     * Action {@code a} of generation {@code gen} failed (a kernel, or a send). Returns where, in a
     * line, if this fails the pass now; null if it changes nothing (stale, or the pass already failed).
     */
    String failed(int gen, Action a) {
        if (gen != generation) return null;
        if (a.kind().isCompute()) queued.pollFirst();
        if (failed) return null;
        failed = true;
        drop();
        return "rank " + rank + ", stage " + a.stage() + ", action " + a + " (microbatch " + a.microbatch() + ")";
    }

    /** A frame meant for this rank was dropped: returns whether that fails the running pass (else there is none). */
    boolean frameDropped() {
        if (!inPass() || failed) return false;
        failed = true;
        drop();
        return true;
    }

    /** Runs as much of the row as is ready: comm actions inline, up to QUEUE_DEPTH compute actions on the device queue. */
    private PassResult advance() {
        if (!inPass() || failed) return null;
        if (readyFirst) {
            advanceReadyFirst();
        } else {
            advanceStatic();
        }
        if (!queued.isEmpty() || notDone > 0) return null;
        PassResult r = new PassResult(pass, List.copyOf(events), Map.copyOf(losses), Map.copyOf(logits));
        pass = NO_PASS;
        return r;
    }

    private void advanceStatic() {
        while (position < row.size()) {
            if (done[position]) {                      // a microbatch this pass does not run
                position++;
                continue;
            }
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
                TensorPayload payload = buffer.get(key);
                long start = waitStart == NONE ? now : waitStart;
                recvWaitStart.remove(wait);
                // Waited from reaching the RECV until the transport delivered the tensor (not until the actor saw it).
                long arrived = arrivedAt.remove(wait);
                long end = arrived == NONE ? start : Math.max(start, arrived);
                recvEvent.put(wait, events.size());
                record(a, start, end, payload.header().payloadBytes(), end - start, onLink(payload));
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
                record(a, start, System.nanoTime(), bytes, 0, -1);
                markDone(index);
                return true;
            }
            case F:
                if (s != 0 && !forwardIn.containsKey(key)) return false;
                break;
            case B:
            case I:
                if (s != stages - 1 && !backwardIn.containsKey(key)) return false;
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
        long key = key(a.stage(), a.microbatch());
        TensorPayload in = a.kind() == ActionKind.F ? forwardIn.remove(key)
                : (a.kind() == ActionKind.B || a.kind() == ActionKind.I) ? backwardIn.remove(key) : null;
        int buffered = forwardIn.size() + backwardIn.size();
        queued.addLast(a);
        markDone(index);
        if (a.kind() == ActionKind.F) inFlight[a.stage()]++;
        port.compute(a, in, buffered);
    }

    /** Where an output goes: to a stage on this rank directly, else out through the transport (now or at its SEND). */
    private void route(TensorKind kind, int from, int to, int mb, Tensor t) {
        long key = key(to, mb);
        if (rankOfStage.applyAsInt(to) == rank) {
            FrameHeader h = header(kind, from, to, mb, t);
            (kind == TensorKind.ACTIVATION ? forwardIn : backwardIn).put(key, new LocalPayload(h, t));
            return;
        }
        if (readyFirst || sendOnCompletion.remove(directed(key(from, mb), kind == TensorKind.ACTIVATION))) {
            long start = System.nanoTime();
            long bytes = send(kind, from, mb, t);
            record(new Action(from, kind == TensorKind.ACTIVATION ? ActionKind.SEND_F : ActionKind.SEND_B, mb),
                    start, System.nanoTime(), bytes, 0, -1);
        } else {
            (kind == TensorKind.ACTIVATION ? forwardOut : backwardOut).put(key(from, mb), t);
        }
    }

    private long send(TensorKind kind, int from, int mb, Tensor t) {
        int to = kind == TensorKind.ACTIVATION ? from + 1 : from - 1;
        port.send(rankOfStage.applyAsInt(to), header(kind, from, to, mb, t), t);
        return t.bytesPerDevice() * t.submesh().devices().size();
    }

    private FrameHeader header(TensorKind kind, int from, int to, int mb, Tensor t) {
        return new FrameHeader(jobId, pass, from, to, mb, kind, t.dtype(), t.shape(), t.layout(), 0, 0);
    }

    private void record(Action a, long start, long end, long bytes, long wait, long linkNs) {
        events.add(new ActionEvent(rank, a, pass, start, end, bytes, wait, buffered(), stashed, port.memoryInUse(), linkNs));
    }

    /** The frame's time on the link, first chunk to last, where the transport timed it; else -1. */
    private static long onLink(TensorPayload p) {
        long first = p.firstChunkNs(), last = p.lastChunkNs();
        return first >= 0 && last >= first ? last - first : -1;
    }

    private void markDone(int index) {
        if (!done[index]) {
            done[index] = true;
            notDone--;
        }
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
                e.stashed(), e.memory(), e.linkNs()));
    }

    /** After a failure or a rejoin: frees buffered tensors, and every stage's stash (through the port). */
    void drop() {
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
        pass = NO_PASS;
        port.abortStep();
    }

    // ---- what monitoring sees -------------------------------------------------------------------------

    /** The oldest compute action on the device queue (running, or next to run), or null. */
    Action running() {
        return queued.peekFirst();
    }

    int queuedActions() {
        return queued.size();
    }

    int position() {
        return position;
    }

    int rowLength() {
        return row.size();
    }

    /** Tensors waiting for their action. */
    int buffered() {
        return forwardIn.size() + backwardIn.size();
    }

    /** Microbatches whose forward is stashed for their backward. */
    int stashed() {
        return stashed;
    }

    long actionsRun() {
        return actionsRun;
    }

    long[] actionsByKind() {
        return actionsByKind.clone();
    }

    /** What the rank is doing, for the hang watchdog; {@code deviceStartNs}: when the running action started. */
    StageStats.Waiting waiting(long deviceStartNs) {
        long now = System.nanoTime();
        Action running = queued.peekFirst();
        String waitingFor = null;
        int from = -1;
        long waitingMs = 0;
        if (inPass() && !failed && !readyFirst && position < row.size()) {
            Action next = row.get(position);
            if (next.kind() == ActionKind.RECV_F || next.kind() == ActionKind.RECV_B) {
                boolean fwd = next.kind() == ActionKind.RECV_F;
                long since = recvWaitStart.get(directed(key(next.stage(), next.microbatch()), fwd));
                waitingFor = next.toString();
                from = rankOfStage.applyAsInt(fwd ? next.stage() - 1 : next.stage() + 1);
                waitingMs = since == NONE ? 0 : (now - since) / 1_000_000;
            }
        }
        return new StageStats.Waiting(running == null ? null : running.toString(),
                running == null || deviceStartNs == 0 ? 0 : (now - deviceStartNs) / 1_000_000,
                waitingFor, from, waitingMs, lastFinished == null ? null : lastFinished.toString(),
                lastFinishedNs == 0 ? -1 : (now - lastFinishedNs) / 1_000_000, inPass());
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

package dev.ttpipe.actors.runtime;

import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.stages.Evaluation;
import dev.ttpipe.stages.Inputs;
import dev.ttpipe.stages.KvCache;
import dev.ttpipe.stages.Optimizer;
import dev.ttpipe.stages.Param;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.checkpoint.StageState;
import dev.ttpipe.stages.checkpoint.StageState.Snapshot;
import dev.ttpipe.transport.TensorPayload;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;

/**
 * What one rank holds on its devices and the work on them: the stages and optimizers the plan puts
 * on the rank, the device queue (one thread; kernels run there in order, so the actor keeps answering
 * messages meanwhile), the end-of-step work (gradient reduction, optimizer), and the rank's state
 * across steps: checkpoint snapshots, their writes and loads, and rollback from memory. No Pekko here:
 * every operation is queued on the device thread and answers with a future; {@link StageActor}
 * turns the answers into messages. (One exception: on a queue that runs ahead, sim, a training compute
 * action is issued on the caller's thread while nothing waits on the device thread; see {@link #compute}.)
 *
 * <p>Failures that a user reads come back as {@link Failure}s whose message names the rank and
 * what failed.
 */
final class RankState implements AutoCloseable {

    /** A failed operation, said in one line naming the rank. */
    static final class Failure extends RuntimeException {
        Failure(String message, Throwable cause) {
            super(message, cause);
        }
    }

    /**
     * One compute action's result: its output for the next stage (or null) and the loss (last stage's
     * F). {@code startNs}, {@code endNs}: when it ran on the device; on a backend whose queue runs ahead
     * of the issuing thread and says when it will be done ({@link Submesh#queuedUntilNanos}, sim), the
     * queue's times, which may still be ahead: the action is done for the actor as soon as it is issued,
     * its output fenced at the action's end and handed on at once (the receiving queue waits for it), so
     * the runtime's thread wake-ups overlap the devices' work as with a real device's command queue.
     * {@code inputReadyNs}: on such a backend, when its input from another rank was ready (-1: not known).
     * {@code logits}: what the last stage of a generation pass hands back (else null).
     */
    record Computed(Action action, Tensor output, LossOutput loss, float[] logits, long startNs, long endNs, long inputReadyNs) {
    }

    /** The end of a step's backward on this rank: gradient sums by stage, where a non-finite value first appeared, tied halves. */
    record Reduced(TreeMap<Integer, double[]> sums, String nonFinite, int nonFiniteStage, float[][] tiedGrads,
                   long startNs, long endNs) {
    }

    /**
     * The host copies of this rank's last checkpoints, by step: a rollback to one of them (a recovery)
     * restores from memory instead of reading the disk. Two, because the newest may never complete
     * (a rank died while it was written) and then the one before is the latest. Costs twice this rank's
     * parameters and optimizer moments in host memory.
     */
    static final int SNAPSHOTS_KEPT = 2;

    private final JobPlan plan;
    private final int rank;
    private final Submesh submesh;
    private final Faults faults;
    private final List<StageSlice> slices;
    private final ExecutorService device;
    private ExecutorService writer;
    private final CompletableFuture<Void> initialized = new CompletableFuture<>();
    /**
     * Work queued on the device thread and not yet run. At 0 nothing runs there, so a compute action may
     * be issued on the caller's thread instead ({@link #compute}); the callers are one thread at a time
     * (the rank's actor), so no other work can be queued meanwhile.
     */
    private final AtomicInteger deviceTasks = new AtomicInteger();
    // Touched only by the device queue's work: on the device thread, or on the caller's for a compute
    // action issued there while the device thread is idle ({@link #compute}):
    private final Map<Integer, Stage> stages = new LinkedHashMap<>();
    private final Map<Integer, Optimizer> optimizers = new LinkedHashMap<>();
    /** Each stage's key/value cache of the sequence being generated ({@link Inference.Decode}). */
    private final Map<Integer, KvCache> caches = new HashMap<>();
    private final TreeMap<Integer, List<Snapshot>> snapshotsInMemory = new TreeMap<>();
    /** Checkpoint files being written, by step (caller's thread). */
    private final Map<Integer, CompletableFuture<StageActor.SavedFiles>> saved = new HashMap<>();
    /** When the device thread started its current compute action (written there, read by the actor). */
    private volatile long deviceStartNs;

    /** Starts the device queue and builds the rank's stages on it ({@link #initialized} says when). */
    RankState(JobPlan plan, int rank, Submesh submesh, Faults faults) {
        this.plan = plan;
        this.rank = rank;
        this.submesh = submesh;
        this.faults = faults;
        this.slices = plan.slicesOfRank(rank);
        this.device = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "ttpipe-rank" + rank + "-device");
            t.setDaemon(true);
            return t;
        });
        onDevice(() -> {
            try {
                for (StageSlice s : slices) {
                    stages.put(s.index(), new Stage(plan.model(), s, submesh, plan.parallelism(), plan.seed()));
                    optimizers.put(s.index(), new Optimizer(plan.optimizer()));
                }
                initialized.complete(null);
            } catch (Throwable t) {
                initialized.completeExceptionally(t);
            }
        });
    }

    /** Completes when the stages exist, exceptionally with why building them failed. */
    CompletableFuture<Void> initialized() {
        return initialized;
    }

    Submesh submesh() {
        return submesh;
    }

    /** The stage of the rank's first slice: where end-of-step events are filed. */
    int firstStage() {
        return slices.get(0).index();
    }

    /** When the device thread started its current compute action (0: none yet). */
    long deviceStartNs() {
        return deviceStartNs;
    }

    /** Runs {@code work} on the device queue, behind everything queued before. */
    void execute(Runnable work) {
        onDevice(work);
    }

    /** Queues {@code work} on the device thread, counted in {@link #deviceTasks} until it has run. */
    private void onDevice(Runnable work) {
        deviceTasks.incrementAndGet();
        try {
            device.execute(() -> {
                try {
                    work.run();
                } finally {
                    deviceTasks.decrementAndGet();
                }
            });
        } catch (RejectedExecutionException e) {
            deviceTasks.decrementAndGet();
            throw e;
        }
    }

    /**
     * Queues compute action {@code a} of forward pass {@code pass}. {@code in}: its tensor from another
     * stage (null for the first stage's F and for W); {@code data}: the microbatches, on the first and
     * last stages' ranks; {@code inference}: what an inference pass's F computes instead (null: training).
     */
    CompletableFuture<Computed> compute(Action a, int pass, MicrobatchData data, TensorPayload in, Inference inference) {
        CompletableFuture<Computed> result = new CompletableFuture<>();
        Runnable task = () -> {
            long start = System.nanoTime();
            deviceStartNs = start;
            try {
                faults.beforeCompute(rank, a);
                Stage stage = stages.get(a.stage());
                int mb = a.microbatch();
                // The input from another rank first: on a queue that runs ahead, this is where it waits for the sender.
                Tensor remote = in == null ? null : in.materialize(submesh);
                long inputReady = remote == null ? -1 : submesh.readyAtNanos(remote);
                long queued = submesh.queuedUntilNanos();
                if (queued >= 0) start = Math.max(System.nanoTime(), queued);     // when the queue reaches this action
                Tensor output = null;
                LossOutput loss = null;
                float[] logits = null;
                switch (a.kind()) {
                    case F: {
                        Tensor x = stage.isFirst() ? ids(data, data.inputs()[mb]) : remote;
                        if (inference != null) {
                            output = inference instanceof Inference.Decode d ? decode(stage, x, d, mb) : stage.infer(x);
                            if (!stage.isLast()) break;
                            // The last stage hands back a score, or the logits of the pass's last token (of the
                            // tokens before it only the keys and values were wanted).
                            try (Tensor last = output) {
                                output = null;
                                if (inference instanceof Inference.Score) loss = Evaluation.score(last.toHost(), data.targets()[mb]);
                                else if (mb == inference.microbatches() - 1) logits = last.toHost();
                            }
                            break;
                        }
                        if (stage.isLast()) stage.setTargets(mb, ids(data, data.targets()[mb]), data.lossScale());
                        output = stage.forward(pass, mb, x);
                        if (stage.isLast()) loss = stage.loss(mb);
                        break;
                    }
                    case B:
                        output = stage.backward(pass, mb, remote);
                        break;
                    case I:
                        output = stage.backwardInput(pass, mb, remote);
                        break;
                    case W:
                        stage.backwardWeight(pass, mb);
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
                result.complete(new Computed(a, output, loss, logits, start, end, inputReady));
            } catch (Throwable t) {
                result.completeExceptionally(t);
            }
        };
        // On a queue that runs ahead (sim), ops only add modeled time to the queue's clock and never wait,
        // so with nothing else on the device thread the action is issued here, on the caller's thread: no
        // hand-over to the device thread and back for each action (at 256 ranks on 2 cores those thread
        // wake-ups, not the modeled work, set the pace). Faults may sleep and inference may read values
        // (a wait), so those stay on the device thread.
        if (inference == null && faults == Faults.NONE && submesh.queuedUntilNanos() >= 0 && deviceTasks.get() == 0) {
            task.run();
        } else {
            onDevice(task);
        }
        return result;
    }

    /** Generation: token {@code mb} of the pass, at its position, against the stage's cache (fresh at position 0). */
    private Tensor decode(Stage stage, Tensor x, Inference.Decode d, int mb) {
        int pos = d.position() + mb;
        if (pos == 0) caches.put(stage.index(), stage.newKvCache(d.capacity()));
        KvCache cache = caches.get(stage.index());
        if (cache == null) {
            x.close();
            throw new IllegalStateException("stage " + stage.index() + ": token at position " + pos + " before the sequence's first");
        }
        return stage.decode(x, pos, cache);
    }

    private Tensor ids(MicrobatchData data, int[] tokens) {
        return Inputs.ids(submesh.ops(), plan.parallelism(), tokens, data.microbatchSize(), data.seqLen());
    }

    /** Completes when the device queue has run everything issued so far (a queue that runs ahead: sim). */
    CompletableFuture<Void> drained() {
        CompletableFuture<Void> done = new CompletableFuture<>();
        onDevice(() -> {
            submesh.synchronize();
            done.complete(null);
        });
        return done;
    }

    /** A failed or abandoned pass: frees every stage's stash. */
    void abortStep() {
        onDevice(() -> stages.values().forEach(Stage::abortStep));
    }

    /** After step {@code step}'s passes: all-reduces the DDP gradients and sums their squares, per stage and parameter. */
    CompletableFuture<Reduced> reduceGradients(int step) {
        CompletableFuture<Reduced> result = new CompletableFuture<>();
        onDevice(() -> {
            long start = System.nanoTime();
            try {
                TreeMap<Integer, double[]> sums = new TreeMap<>();
                String nonFinite = null;
                int nonFiniteStage = -1;
                List<float[]> tied = new ArrayList<>();
                for (Stage s : stages.values()) {
                    faults.beforeReduce(step, s, submesh.ops());
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
                result.complete(new Reduced(sums, nonFinite, nonFiniteStage, tied.toArray(new float[0][]), start, System.nanoTime()));
            } catch (Throwable t) {
                result.completeExceptionally(failure("rank " + rank + ", gradient reduction: ", t));
            }
        });
        return result;
    }

    /**
     * Steps every local optimizer with {@code lr} and clip factor {@code clip}; {@code skip}: drops the
     * gradients and changes nothing. {@code tiedGrad}: the summed gradient of an embedding tied across
     * stages, or null. Completes with the work's start and end.
     */
    CompletableFuture<long[]> applyOptimizer(double lr, double clip, boolean skip, float[] tiedGrad) {
        CompletableFuture<long[]> result = new CompletableFuture<>();
        onDevice(() -> {
            long start = System.nanoTime();
            try {
                for (Map.Entry<Integer, Stage> e : stages.entrySet()) {
                    if (!skip && tiedGrad != null && e.getValue().tiedAcrossStages() != null) {
                        e.getValue().tiedAcrossStages().replaceFullGrad(tiedGrad);   // both halves: the same sum, the same update
                    }
                    if (skip) e.getValue().endStep();         // no weight, no moment, no step count changes
                    else optimizers.get(e.getKey()).step(e.getValue(), lr, clip);
                }
                submesh.synchronize();
                result.complete(new long[]{start, System.nanoTime()});
            } catch (Throwable t) {
                result.completeExceptionally(failure("rank " + rank + ", optimizer step: ", t));
            }
        });
        return result;
    }

    /** Rebuilds the stages and optimizers as at the job's start (the seed's weights, no optimizer state). */
    CompletableFuture<Integer> reinitialize() {
        CompletableFuture<Integer> result = new CompletableFuture<>();
        onDevice(() -> {
            try {
                for (StageSlice s : slices) {
                    Stage old = stages.put(s.index(), new Stage(plan.model(), s, submesh, plan.parallelism(), plan.seed()));
                    if (old != null) old.close();
                    optimizers.put(s.index(), new Optimizer(plan.optimizer()));
                }
                result.complete(rank);
            } catch (Throwable t) {
                result.completeExceptionally(failure("rank " + rank + ": rebuilding its stages failed: ", t));
            }
        });
        return result;
    }

    /**
     * Copies every stage's parameters and optimizer moments to host memory on the device queue;
     * completes (with the rank) when the copy is taken. A background writer then writes them into
     * {@code dir}; {@link #awaitSaved} says when that is done.
     */
    CompletableFuture<Integer> save(int step, Path dir) {
        CompletableFuture<StageActor.SavedFiles> written = new CompletableFuture<>();
        saved.put(step, written);
        CompletableFuture<Integer> copied = new CompletableFuture<>();
        onDevice(() -> {
            long t0 = System.nanoTime();
            List<Snapshot> snapshots = new ArrayList<>();
            try {
                for (Map.Entry<Integer, Stage> e : stages.entrySet()) {
                    snapshots.add(StageState.snapshot(e.getValue(), optimizers.get(e.getKey())));
                }
            } catch (Throwable t) {
                copied.completeExceptionally(failure("rank " + rank + ": copying its state to the host failed: ", t));
                written.completeExceptionally(t);
                return;
            }
            double copySeconds = (System.nanoTime() - t0) / 1e9;
            synchronized (snapshotsInMemory) {
                snapshotsInMemory.put(step, snapshots);
                while (snapshotsInMemory.size() > SNAPSHOTS_KEPT) snapshotsInMemory.pollFirstEntry();
            }
            copied.complete(rank);
            writer().execute(() -> {
                try {
                    StageState.Written w = StageState.write(dir, snapshots);
                    written.complete(new StageActor.SavedFiles(rank, w.sha256(), w.bytes(), copySeconds, w.seconds()));
                } catch (Throwable t) {
                    written.completeExceptionally(t);
                }
            });
        });
        return copied;
    }

    /** When step {@code step}'s {@link #save} is on the disk; null when no such save was started (or it was awaited). */
    CompletableFuture<StageActor.SavedFiles> awaitSaved(int step) {
        CompletableFuture<StageActor.SavedFiles> f = saved.remove(step);
        if (f == null) return null;
        return f.handle((files, err) -> {
            if (err != null) throw failure("rank " + rank + ": writing the checkpoint failed: ", err);
            return files;
        });
    }

    /**
     * Loads the state of step {@code step}: from memory when a snapshot of it is kept (completes with
     * 1), else from the checkpoint in {@code dir}, whatever split wrote it (completes with 0). Every
     * optimizer is set to {@code optimizerSteps}.
     */
    CompletableFuture<Integer> load(Path dir, int step, int optimizerSteps) {
        CompletableFuture<Integer> result = new CompletableFuture<>();
        onDevice(() -> {
            List<Snapshot> kept;
            synchronized (snapshotsInMemory) {
                kept = snapshotsInMemory.get(step);
            }
            if (kept != null && kept.size() == stages.size()) {
                try {
                    for (Snapshot s : kept) StageState.restore(s, stages.get(s.stage()));
                    for (Optimizer o : optimizers.values()) o.restoreSteps(optimizerSteps);
                    result.complete(1);
                } catch (Throwable t) {
                    result.completeExceptionally(failure("rank " + rank + ": restoring its snapshot of step " + step + " failed: ", t));
                }
                return;
            }
            try {
                StageState.load(dir, plan.model(), List.copyOf(stages.values()));
                for (Optimizer o : optimizers.values()) o.restoreSteps(optimizerSteps);
                result.complete(0);
            } catch (Throwable t) {
                // The loader's own exception: a user's bad checkpoint keeps its type (and exit code).
                result.completeExceptionally(t instanceof RuntimeException ? t : new IllegalStateException(Coordinator.describe(t), t));
            }
        });
        return result;
    }

    /** Every local parameter's value on the host, by name. */
    CompletableFuture<Map<String, float[]>> weights() {
        CompletableFuture<Map<String, float[]>> result = new CompletableFuture<>();
        onDevice(() -> {
            Map<String, float[]> out = new LinkedHashMap<>();
            for (Stage s : stages.values()) {
                for (Param p : s.parameters()) out.put(p.name(), p.value().toHost());
            }
            result.complete(out);
        });
        return result;
    }

    /** Runs {@code work} on the device queue with this rank's stages. */
    CompletableFuture<Object> run(Function<List<Stage>, Object> work) {
        CompletableFuture<Object> result = new CompletableFuture<>();
        onDevice(() -> {
            try {
                result.complete(work.apply(List.copyOf(stages.values())));
            } catch (Throwable t) {
                result.completeExceptionally(t);
            }
        });
        return result;
    }

    /** The checkpoint writer: one background thread, so host copies are written while the device trains on. */
    private synchronized ExecutorService writer() {
        if (writer == null) {
            writer = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "ttpipe-rank" + rank + "-writer");
                t.setDaemon(true);
                return t;
            });
        }
        return writer;
    }

    private static Failure failure(String what, Throwable t) {
        return new Failure(what + Coordinator.describe(t), t);
    }

    /** Closes the stages on the device queue and stops it (waiting up to 30 s for the running kernel). */
    @Override
    public void close() {
        onDevice(() -> {
            stages.values().forEach(Stage::close);
            stages.clear();
        });
        device.shutdown();
        synchronized (this) {
            if (writer != null) writer.shutdown();
        }
        try {
            if (!device.awaitTermination(30, TimeUnit.SECONDS)) device.shutdownNow();
        } catch (InterruptedException e) {
            device.shutdownNow();
            Thread.currentThread().interrupt();
        }
    }
}

package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.device.DType;
import dev.ttpipe.stages.Inputs;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.Optimizer;
import dev.ttpipe.stages.Param;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.StageSlice;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

/**
 * Each device's memory, planned before a job starts. For every rank it builds the rank's stages on
 * a {@code sim} mesh of the rank's shape (the same tensors, layouts and per-device accounting as the
 * real backends, with no math and no modeled time) and replays the rank's row of the schedule for two
 * steps: F, B, I and W in the row's order with inputs and output gradients of the right shape and
 * layout, then the gradient reduction and the optimizer step. The second step's peak is the steady
 * state: parameters, optimizer moments, gradients, the activations the schedule keeps in flight and
 * the largest transient of one kernel; with {@code dtype: bf16} the stages' activations are BF16 tensors,
 * so they count 2 bytes an element as they do on the device, and the bf16 copies of the matmul weights (made once per
 * optimizer step) count with the optimizer state. Received tensors waiting for their action are counted as one
 * activation per direction in flight (the transport assembles a frame on the device).
 *
 * <pre>
 * MemoryPlan m = MemoryPlan.of(plan);
 * m.check();      // throws a one-line error naming the rank that would overflow, and what would fit
 * </pre>
 */
public final class MemoryPlan {

    /** One rank's plan (bytes on its fullest device). */
    public record Rank(int rank, long parameters, long optimizerAndGradients, long activations, long received, long peak,
                       int inFlight) {
    }

    private final JobPlan plan;
    private final List<Rank> ranks;
    private final double seconds;

    private MemoryPlan(JobPlan plan, List<Rank> ranks, double seconds) {
        this.plan = plan;
        this.ranks = ranks;
        this.seconds = seconds;
    }

    public List<Rank> ranks() {
        return ranks;
    }

    /** Bytes each device has. */
    public long capacity() {
        return plan.meshOptions().memoryPerDevice();
    }

    public Rank largest() {
        Rank max = ranks.get(0);
        for (Rank r : ranks) if (r.peak() > max.peak()) max = r;
        return max;
    }

    /**
     * The most actions the planner replays to reach a rank's peak: each runs as an op of the sim backend (about
     * 0.25 ms), so this keeps a plan to seconds. Only a schedule that keeps thousands of microbatches in flight
     * (GPipe) comes near it.
     */
    public static final int MAX_REPLAYED = 1 << 15;

    static final String MICROBATCHES = "multihost_config.pipeline_parallel_config.num_microbatches";

    /** Plans every rank of {@code plan}. */
    public static MemoryPlan of(JobPlan plan) {
        return of(plan, MICROBATCHES);
    }

    /**
     * {@link #of(JobPlan)}, naming {@code microbatchesKey} (a config's {@code file:line: key}) when a rank's peak lies
     * more than {@link #MAX_REPLAYED} actions into its row.
     *
     * @throws ConfigException one line naming the rank, the schedule, the microbatches in flight and the limit
     */
    public static MemoryPlan of(JobPlan plan, String microbatchesKey) {
        long t0 = System.nanoTime();
        List<Rank> out = new ArrayList<>();
        for (int r = 0; r < plan.ranks(); r++) out.add(planRank(plan, r, microbatchesKey));
        return new MemoryPlan(plan, out, (System.nanoTime() - t0) / 1e9);
    }

    /** Plans rank {@code rank} of {@code plan} alone. */
    public static Rank ofRank(JobPlan plan, int rank) {
        return planRank(plan, rank, MICROBATCHES);
    }

    /** No modeled time (nothing waits), no capacity limit (the plan is compared with it afterwards). */
    private static final SimCosts NO_TIME = new SimCosts(1e9, 1e9, 0, 1e9, 1e-9);

    private static Rank planRank(JobPlan plan, int rank, String microbatchesKey) {
        List<Action> full = plan.schedule().row(rank);
        List<Action> toPeak = toPeak(full);
        if (toPeak.size() > MAX_REPLAYED) {
            long forwards = toPeak.stream().filter(a -> a.kind() == ActionKind.F).count();
            throw new ConfigException(microbatchesKey + ": " + plan.microbatches() + " given: with schedule " + plan.schedule().name()
                    + " rank " + rank + "'s memory peak comes after " + forwards + " forwards, " + toPeak.size() + " actions into its row,"
                    + " and the memory planner replays at most " + MAX_REPLAYED + "; expected fewer microbatches, or a schedule that"
                    + " keeps fewer in flight (1f1b, zb-h1, interleaved)");
        }
        try (MeshDevice mesh = Backends.open("sim", plan.rankMesh(),
                plan.meshOptions().withMemoryPerDevice(Long.MAX_VALUE / 4).withSimCosts(NO_TIME))) {
            Submesh sub = mesh.asSubmesh();
            Ops ops = sub.ops();
            Map<Integer, Stage> stages = new LinkedHashMap<>();
            Map<Integer, Optimizer> optimizers = new LinkedHashMap<>();
            try {
                for (StageSlice s : plan.slicesOfRank(rank)) {
                    stages.put(s.index(), new Stage(plan.model(), s, sub, plan.parallelism(), plan.seed()));
                    optimizers.put(s.index(), new Optimizer(plan.optimizer()));
                }
                long parameters = sub.maxInUse();
                int b = plan.microbatchSize(), t = plan.seqLen();
                int[] ids = new int[b * t];
                // Step 0 only brings the optimizer state and gradient buffers into being: one microbatch is enough.
                List<Action> warm = full.stream().filter(a -> a.microbatch() == 0).toList();
                long before = 0;
                for (int step = 0; step < 2; step++) {
                    if (step == 1) {
                        before = sub.maxInUse();
                        sub.devices().forEach(d -> d.resetPeak());
                    }
                    for (Action a : step == 0 ? warm : toPeak) {
                        Stage s = stages.get(a.stage());
                        int mb = a.microbatch();
                        switch (a.kind()) {
                            case F -> {
                                Tensor x = s.isFirst() ? Inputs.ids(ops, plan.parallelism(), ids, b, t) : activation(plan, ops);
                                if (s.isLast()) s.setTargets(mb, Inputs.ids(ops, plan.parallelism(), ids, b, t), 1f);
                                Tensor y = s.forward(step, mb, x);
                                if (y != null) y.close();
                            }
                            case B -> close(s.backward(step, mb, s.isLast() ? null : activation(plan, ops)));
                            case I -> close(s.backwardInput(step, mb, s.isLast() ? null : activation(plan, ops)));
                            case W -> s.backwardWeight(step, mb);
                            default -> {
                            }
                        }
                    }
                    for (Map.Entry<Integer, Stage> e : stages.entrySet()) {
                        e.getValue().reduceGradients();
                        e.getValue().gradSumSquares();
                        optimizers.get(e.getKey()).step(e.getValue(), 1e-3, 1.0);
                        // bf16 weight copies are held from one step to the next: counted with the optimizer state
                        if (step == 0) e.getValue().parameters().forEach(Param::roundForMatmuls);
                    }
                }
                long received = 2 * activationBytes(plan, sub);     // one inbound activation and one gradient in flight
                long peak = sub.maxPeak() + received;
                int inFlight = 0;
                int[] limits = JobPlan.inFlightLimits(plan.schedule().row(rank), new int[plan.stages()]);
                for (StageSlice s : plan.slicesOfRank(rank)) inFlight = Math.max(inFlight, limits[s.index()]);
                return new Rank(rank, parameters, before - parameters, sub.maxPeak() - before, received, peak, inFlight);
            } finally {
                stages.values().forEach(Stage::close);
            }
        }
    }

    /**
     * The row's prefix that reaches its memory peak: every microbatch stashes the same bytes, so the
     * peak comes the first time each stage's count of microbatches in flight is at its most (counted
     * as a vector over the rank's stages, keeping only the vectors no other one exceeds), with the
     * backward that follows (its transient on top). The rest of the row repeats states already seen.
     * Linear in the row (GPipe's row of a million microbatches has a million distinct states): the states
     * are compared in order of their total, each only with the maximal ones found before it.
     */
    static List<Action> toPeak(List<Action> row) {
        Map<Integer, Integer> live = new TreeMap<>();
        Map<List<Integer>, Integer> index = new HashMap<>();      // each distinct state, numbered in order of appearance
        List<List<Integer>> distinct = new ArrayList<>();
        List<Integer> firstAt = new ArrayList<>();                  // where each distinct state first appears in the row
        for (int i = 0; i < row.size(); i++) {
            Action a = row.get(i);
            boolean changed = live.putIfAbsent(a.stage(), 0) == null;
            if (a.kind() == ActionKind.F) live.merge(a.stage(), 1, Integer::sum);
            else if (a.kind() == ActionKind.B || a.kind() == ActionKind.W) {
                live.merge(a.stage(), -1, Integer::sum);
            } else if (!changed) {
                continue;                                            // a SEND, RECV or I: the state as it was
            }
            List<Integer> v = List.copyOf(live.values());
            if (index.putIfAbsent(v, distinct.size()) == null) {
                distinct.add(v);
                firstAt.add(i);
            }
        }
        // A state that dominates another has a larger total, or the same total over more stages: in that order every
        // state comes after the maximal ones that could dominate it, so it is checked against those alone.
        long[] total = new long[distinct.size()];
        for (int d = 0; d < total.length; d++) for (int x : distinct.get(d)) total[d] += x;
        List<Integer> order = new ArrayList<>();
        for (int d = 0; d < total.length; d++) order.add(d);
        order.sort(Comparator.<Integer>comparingLong(d -> -total[d]).thenComparing(d -> -distinct.get(d).size()));
        List<Integer> maximal = new ArrayList<>();
        for (int d : order) {
            boolean dominated = false;
            for (int m : maximal) {
                if (dominates(distinct.get(m), distinct.get(d))) {
                    dominated = true;
                    break;
                }
            }
            if (!dominated) maximal.add(d);
        }
        int end = -1;
        for (int m : maximal) {
            int k = firstAt.get(m) + 1;
            while (k < row.size() && row.get(k).kind() != ActionKind.B
                    && row.get(k).kind() != ActionKind.I) k++;
            end = Math.max(end, Math.min(k, row.size() - 1));
        }
        return row.subList(0, end + 1);
    }

    /** Whether {@code a} (a later state may have more stages) holds more in flight than {@code b} somewhere and less nowhere. */
    private static boolean dominates(List<Integer> a, List<Integer> b) {
        boolean more = a.size() > b.size();
        for (int i = 0; i < b.size(); i++) {
            int x = i < a.size() ? a.get(i) : 0;
            if (x < b.get(i)) return false;
            if (x > b.get(i)) more = true;
        }
        return more;
    }

    private static Tensor activation(JobPlan plan, Ops ops) {
        return ops.zeros(Shape.of(plan.microbatchSize(), plan.seqLen(), plan.model().embeddingDim()),
                plan.parallelism().activations(), plan.model().dtype());
    }

    /** Bytes of one activation [b, T, D] on the fullest device of {@code sub}. */
    private static long activationBytes(JobPlan plan, Submesh sub) {
        try (Tensor a = activation(plan, sub.ops())) {
            return a.bytesPerDevice();
        }
    }

    private static void close(Tensor t) {
        if (t != null) t.close();
    }

    /**
     * @throws dev.ttpipe.actors.config.ConfigException one line naming the rank whose device would overflow, the plan and the
     *                         capacity, and what would fit (when a re-plan shows it)
     */
    public void check() {
        check("device_config.memory_per_device");
    }

    /** {@link #check()}, naming the capacity's key as {@code where} (a config file's {@code file:line: key}). */
    public void check(String where) {
        Rank worst = largest();
        long cap = capacity();
        if (worst.peak() <= cap) return;
        throw new ConfigException(where + ": rank " + worst.rank() + " would need about "
                + Sizes.format(worst.peak()) + " per device, its devices have " + Sizes.format(cap) + " (" + breakdown(worst)
                + "); " + suggestion(worst));
    }

    /** One line per rank, for the start of a run and for {@code --verbose}. */
    public String summary() {
        Rank w = largest();
        return String.format(Locale.ROOT, "memory plan: at most %s of %s per device (rank %d: %s; planned in %.2f s)",
                Sizes.format(w.peak()), Sizes.format(capacity()), w.rank(), breakdown(w), seconds);
    }

    private String breakdown(Rank r) {
        return "parameters " + Sizes.format(r.parameters()) + ", gradients and optimizer state"
                + (plan.model().dtype() == DType.BF16 ? " (with bf16 weight copies) " : " ") + Sizes.format(r.optimizerAndGradients())
                + ", activations of up to " + r.inFlight() + " microbatch" + (r.inFlight() == 1 ? "" : "es") + " in flight "
                + Sizes.format(r.activations()) + ", received tensors " + Sizes.format(r.received());
    }

    /** What would fit, tried for real: recomputation, then a smaller stash. */
    private String suggestion(Rank worst) {
        long cap = capacity();
        List<String> tries = new ArrayList<>();
        ModelSpec m = plan.model();
        if (!m.recompute()) {
            ModelSpec recompute = m.withRecompute(true);
            Rank rc = planRank(withModel(plan, recompute), worst.rank(), MICROBATCHES);
            tries.add("runner_type: memory_efficient (recompute in backward) needs about " + Sizes.format(rc.peak())
                    + (rc.peak() <= cap ? ", which fits" : ", still too much"));
        }
        long fixed = worst.parameters() + worst.optimizerAndGradients();
        if (fixed >= cap) {
            tries.add("the parameters and optimizer state alone need " + Sizes.format(fixed)
                    + ": spread the blocks over more ranks (blocks_per_rank) or shard them with enable_tp");
        } else {
            tries.add("fewer microbatches in flight (1f1b keeps at most P - r; fewer, larger microbatches; or more ranks) would"
                    + " shrink the activations");
        }
        return String.join("; ", tries);
    }

    private static JobPlan withModel(JobPlan p, ModelSpec model) {
        return new JobPlan(p.name(), p.seed(), p.jobId(), model, p.parallelism(), p.rankMesh(), p.slices(), p.schedule(),
                p.readyFirst(), p.microbatches(), p.microbatchSize(), p.seqLen(), p.accumulation(), p.optimizer(), p.lr(),
                p.clipMaxNorm(), p.backend(), p.meshOptions(), p.transport());
    }
}

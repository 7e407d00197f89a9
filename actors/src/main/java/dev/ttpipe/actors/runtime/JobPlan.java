package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.actors.config.PipelineMode;
import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Placement;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.schedules.Lowering;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.schedules.Schedules;
import dev.ttpipe.stages.LrSchedule;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.Partitioner;
import dev.ttpipe.stages.StageSlice;

import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Everything a pipeline job needs, resolved from the config: the model, the split into stages and
 * ranks, the (lowered) schedule each rank executes, batch geometry, optimizer, devices and transport.
 * Immutable; the same plan is given to every rank. There is one way to make one: {@link #from} for
 * a config, {@link #builder} in code; both end in {@link Builder#build()}.
 *
 * @param jobId         random per job: stamped on every frame, so two jobs never take each other's tensors
 * @param rankMesh      the mesh each rank owns (its submesh), as device_config.mesh_shape
 * @param readyFirst    run whatever is ready within the schedule's in-flight limit instead of the row's order
 * @param accumulation  forward passes (pipeline flushes) per optimizer step
 */
public record JobPlan(String name, long seed, long jobId, ModelSpec model, Parallelism parallelism, MeshShape rankMesh,
                      List<StageSlice> slices, Schedule schedule, boolean readyFirst, int microbatches,
                      int microbatchSize, int seqLen, int accumulation, OptimizerSpec optimizer, LrSchedule lr,
                      double clipMaxNorm, Backend backend, MeshOptions meshOptions, SocketType transport) {

    /** Starts a plan in code, without YAML: the model, then the pipeline and training settings. */
    public static Builder builder(ModelSpec model) {
        return new Builder(model);
    }

    /**
     * The plan of a validated config. {@code dataVocabSize} is the data's vocabulary, used when the
     * config gives no {@code vocab_size}.
     */
    public static JobPlan from(TtpipeConfig cfg, int dataVocabSize) {
        ModelSpec model = model(cfg, dataVocabSize);
        TtpipeConfig.PipelineConfig pc = cfg.pipeline();
        long embeddingBytes = 4L * model.vocabSize() * model.embeddingDim();
        if (model.weightTying() && pc.ranks() * pc.effectiveVirtualStages() > 1 && cfg.multihost.enabled
                && embeddingBytes > (48L << 20)) {
            throw new ConfigException(cfg.origins.where("transformer_config.weight_tying")
                    + ": true given for a multi-process pipeline whose token embedding is " + (embeddingBytes >> 20) + " MiB: not"
                    + " supported yet (the tied gradient travels in one cluster message, at most 48 MiB), expected weight_tying:"
                    + " false or one process");
        }
        TtpipeConfig.TrainingConfig t = cfg.training;
        Builder b = builder(model)
                .name(t.projectName)
                .seed(t.seed)
                .ranks(pc.ranks())
                .schedule(pc.schedule)
                .virtualStages(pc.effectiveVirtualStages())
                .readyFirst(pc.mode == PipelineMode.READY_FIRST)
                .microbatches(pc.numMicrobatches)
                .microbatchSize(t.batchSize / pc.numMicrobatches)
                .seqLen(cfg.transformer.effectiveSequenceLength())
                .accumulation(t.gradientAccumulationSteps)
                .optimizer(optimizer(t))
                .lr(lrSchedule(t))
                .clipMaxNorm(t.useClipGradNorm ? t.clipGradNormMaxNorm : 0.0)
                .backend(cfg.device.backend)
                .meshOptions(meshOptions(cfg, pc.ranks()))
                .transport(cfg.multihost.socketType)
                .rankMesh(new MeshShape(cfg.device.meshRows(), cfg.device.meshCols()), cfg.device.enableDdp, cfg.device.enableTp);
        if (!pc.autoSplit) b.blocksPerRank(pc.blocksPerRank.toArray(new Integer[0]));
        return b.build();
    }

    /** The model a config describes ({@code dataVocabSize} when it gives no vocab_size). */
    public static ModelSpec model(TtpipeConfig cfg, int dataVocabSize) {
        TtpipeConfig.TransformerConfig tc = cfg.transformer;
        boolean llama = tc.llamaFamily();
        int vocab = tc.vocabSize > 0 ? tc.vocabSize : dataVocabSize;
        if (tc.vocabSize > 0 && tc.vocabSize < dataVocabSize) {
            throw new ConfigException(cfg.origins.where("transformer_config.vocab_size") + ": "
                    + tc.vocabSize + " given, but the data has " + dataVocabSize + " distinct characters; expected >= "
                    + dataVocabSize + " (or leave it out to take the data's)");
        }
        int kv = tc.numGroups > 0 ? tc.numGroups : tc.numHeads;
        int ff = tc.intermediateDim > 0 ? tc.intermediateDim
                : llama ? ModelSpec.llamaIntermediate(tc.embeddingDim) : 4 * tc.embeddingDim;
        ModelSpec.ModelType type = ModelSpec.ModelType.valueOf(tc.modelType.toUpperCase(Locale.ROOT));
        return new ModelSpec(type, vocab, tc.embeddingDim, tc.numHeads, kv, tc.numBlocks, ff, tc.maxSequenceLength,
                (float) tc.dropoutProb, tc.weightTying, (float) tc.theta, "memory_efficient".equals(tc.runnerType),
                "bf16".equals(cfg.device.dtype) ? DType.BF16 : DType.FP32, llama ? tc.ropeScaling : null,
                llama ? tc.headDim : 0, (float) tc.normEps);
    }

    private static OptimizerSpec optimizer(TtpipeConfig.TrainingConfig t) {
        if (t.useNoOp) return OptimizerSpec.noop();
        OptimizerSpec.Kind kind = "sgd".equals(t.optimizer) ? OptimizerSpec.Kind.SGD : OptimizerSpec.Kind.ADAMW;
        return new OptimizerSpec(kind, t.learningRate, t.weightDecay, t.beta1, t.beta2, t.epsilon, t.momentum, t.dampening,
                t.nesterov);
    }

    private static LrSchedule lrSchedule(TtpipeConfig.TrainingConfig t) {
        LrSchedule.Kind kind = LrSchedule.Kind.valueOf(t.schedulerType.toUpperCase(Locale.ROOT));
        return new LrSchedule(kind, t.learningRate, t.warmupSteps, t.maxSteps, t.minLearningRate);
    }

    private static MeshOptions meshOptions(TtpipeConfig cfg, int ranks) {
        TtpipeConfig.SimCostConfig s = cfg.device.sim;
        // Auto: the pipeline's ranks already keep the cores busy; kernels split further only when cores are left over.
        int threads = cfg.device.threads > 0 ? cfg.device.threads
                : Math.max(1, Runtime.getRuntime().availableProcessors() / Math.max(1, ranks));
        return new MeshOptions(cfg.device.memoryPerDevice, threads,
                new SimCosts(s.gflops, s.memoryGbps, s.opLatencyUs, s.linkGbps, 1.0), cfg.device.bridgeLibrary, cfg.environment());
    }

    /** The same plan carrying {@code id} as its job id (a worker adopts rank 0's). */
    public JobPlan withJobId(long id) {
        return new JobPlan(name, seed, id, model, parallelism, rankMesh, slices, schedule, readyFirst, microbatches,
                microbatchSize, seqLen, accumulation, optimizer, lr, clipMaxNorm, backend, meshOptions, transport);
    }

    public int ranks() {
        return schedule.ranks();
    }

    public int stages() {
        return schedule.stages();
    }

    /** An inference plan ({@link Builder#forwardOnly}): no rank runs a backward, no step updates a weight. */
    public boolean forwardOnly() {
        for (List<Action> row : schedule.rows()) if (!forwardOnly(row)) return false;
        return true;
    }

    /**
     * The lowered schedule of an evaluation pass on this plan's ranks: the plan's own when it is forward-only,
     * else {@link Schedules#forwardOnly(Schedule, int)} over its stages, each on its rank, with a step's
     * microbatch count. Every rank derives the same one from the plan.
     */
    public Schedule evalSchedule() {
        return forwardOnly() ? schedule : Lowering.lower(Schedules.forwardOnly(schedule, microbatches));
    }

    /** Whether {@code row} holds no backward action (B, I or W). */
    static boolean forwardOnly(List<Action> row) {
        for (Action a : row) if (a.kind() == ActionKind.B || a.kind() == ActionKind.I || a.kind() == ActionKind.W) return false;
        return true;
    }

    public int batchSize() {
        return microbatches * microbatchSize;
    }

    public StageSlice slice(int stage) {
        return slices.get(stage);
    }

    public List<StageSlice> slicesOfRank(int rank) {
        List<StageSlice> out = new ArrayList<>();
        for (StageSlice s : slices) if (s.rank() == rank) out.add(s);
        return out;
    }

    /**
     * Bytes one activation frame carries from rank to rank: a microbatch's hidden state [b, T, D], every device's
     * piece (the axes that replicate it count once each).
     */
    public long activationFrameBytes() {
        long bytes = (long) microbatchSize * seqLen * model.embeddingDim() * model.dtype().bytes();
        Layout l = parallelism.activations();
        if (l.on(0) instanceof Placement.Replicate) bytes *= rankMesh.rows();
        if (l.on(1) instanceof Placement.Replicate) bytes *= rankMesh.cols();
        return bytes;
    }

    public int firstStageRank() {
        return schedule.rankOfStage(0);
    }

    public int lastStageRank() {
        return schedule.rankOfStage(stages() - 1);
    }

    /**
     * What must agree between the processes of one job for their ranks to fit together: the model,
     * the split, the schedule, the batch geometry and the optimizer. Two workers started with
     * different configs (or different flags) have different fingerprints.
     */
    public String fingerprint() {
        return String.join("|", model.toString(), parallelism.toString(), rankMesh.toString(), slices.toString(),
                schedule.name(), Integer.toString(schedule.virtualStages()), Boolean.toString(readyFirst),
                Integer.toString(microbatches), Integer.toString(microbatchSize), Integer.toString(seqLen),
                Integer.toString(accumulation), optimizer.toString(), lr.toString(), Double.toString(clipMaxNorm),
                backend.id(), Long.toString(seed));
    }

    /**
     * Per stage, the most microbatches the static schedule ever has in flight (forward done, weight
     * gradient not yet): the limit ready-first mode keeps to (1F1B's is min(P - r, M)).
     */
    public int[] inFlightLimits() {
        int[] limit = new int[stages()];
        for (List<Action> row : schedule.rows()) inFlightLimits(row, limit);
        return limit;
    }

    /**
     * The in-flight limits of the stages whose actions are in {@code row} (a rank's row holds all of
     * its stages' actions), into {@code limit}; other stages' entries are left alone. One row's walk
     * instead of the whole schedule's, for a rank.
     */
    static int[] inFlightLimits(List<Action> row, int[] limit) {
        int[] live = new int[limit.length];
        for (Action a : row) {
            int s = a.stage();
            if (a.kind() == ActionKind.F) {
                live[s]++;
                limit[s] = Math.max(limit[s], live[s]);
            } else if (a.kind() == ActionKind.B || a.kind() == ActionKind.W) {
                live[s]--;
            }
        }
        return limit;
    }

    /**
     * Builds a plan from code (what {@link #from} does for a config). Defaults: 2 ranks, 1F1B,
     * 4 microbatches of 4 sequences, the model's max sequence length, AdamW at 3e-3, cpu backend,
     * a [1, 1] mesh per rank, a cost-balanced split of the blocks, in-process transport.
     */
    public static final class Builder {
        private static final SecureRandom IDS = new SecureRandom();

        private final ModelSpec model;
        private String name = "ttpipe";
        private long seed = 5489;
        private int ranks = 2, virtualStages = 0, microbatches = 4, microbatchSize = 4, seqLen, accumulation = 1;
        private String schedule = "1f1b";
        private boolean readyFirst, forwardOnly;
        private List<Integer> blocksPerRank;
        private OptimizerSpec optimizer = OptimizerSpec.adamw(3e-3, 0.01);
        private LrSchedule lr;
        private double clipMaxNorm = 1.0;
        private Backend backend = Backend.CPU;
        private MeshShape rankMesh = new MeshShape(1, 1);
        private boolean ddp, tp;
        private MeshOptions meshOptions = MeshOptions.defaults().withThreads(1);
        private SocketType transport = SocketType.LOCAL;

        private Builder(ModelSpec model) {
            this.model = model;
            this.seqLen = model.maxSequenceLength();
        }

        public Builder name(String n) { this.name = n; return this; }
        public Builder seed(long s) { this.seed = s; return this; }
        public Builder ranks(int p) { this.ranks = p; return this; }
        public Builder schedule(String s) { this.schedule = s; return this; }
        public Builder virtualStages(int v) { this.virtualStages = v; return this; }
        public Builder readyFirst(boolean r) { this.readyFirst = r; return this; }
        /**
         * An inference plan (eval, generate): the forward-only schedule ({@link Schedules#forwardOnly}) over one
         * stage per rank, instead of a training schedule; the optimizer is never stepped.
         */
        public Builder forwardOnly() { this.forwardOnly = true; return this; }
        public Builder microbatches(int m) { this.microbatches = m; return this; }
        public Builder microbatchSize(int b) { this.microbatchSize = b; return this; }
        public Builder seqLen(int t) { this.seqLen = t; return this; }
        public Builder accumulation(int k) { this.accumulation = k; return this; }
        /** TTML's blocks_per_rank (rank -> blocks); unset: a cost-balanced split. */
        public Builder blocksPerRank(Integer... counts) { this.blocksPerRank = List.of(counts); return this; }
        public Builder optimizer(OptimizerSpec o) { this.optimizer = o; return this; }
        public Builder lr(LrSchedule l) { this.lr = l; return this; }
        public Builder clipMaxNorm(double c) { this.clipMaxNorm = c; return this; }
        public Builder backend(Backend b) { this.backend = b; return this; }
        public Builder meshOptions(MeshOptions o) { this.meshOptions = o; return this; }
        /** local, aeron (IPC within the process) or fabric (device sockets). */
        public Builder transport(SocketType t) { this.transport = t; return this; }
        /** The mesh each rank owns and the strategies inside it (TTML's device_config). */
        public Builder rankMesh(MeshShape shape, boolean enableDdp, boolean enableTp) {
            this.rankMesh = shape;
            this.ddp = enableDdp;
            this.tp = enableTp;
            return this;
        }

        public JobPlan build() {
            int v = virtualStages > 0 ? virtualStages : Schedules.defaultVirtualStages(schedule);
            Schedule s = Lowering.lower(forwardOnly ? Schedules.forwardOnly(ranks, microbatches)
                    : Schedules.generate(schedule, ranks, microbatches, v, null));
            List<StageSlice> slices = blocksPerRank == null
                    ? Partitioner.balanced(model, ranks, s.virtualStages(), seqLen)
                    : Partitioner.fromBlocksPerRank(blocksPerRank, model.numBlocks(), s.virtualStages());
            return new JobPlan(name, seed, IDS.nextLong(), model, Parallelism.of(rankMesh, ddp, tp), rankMesh,
                    onRanks(slices, s), s, readyFirst, microbatches, microbatchSize, seqLen, accumulation, optimizer,
                    lr != null ? lr : LrSchedule.constant(optimizer.learningRate()), clipMaxNorm, backend, meshOptions,
                    transport);
        }

        /** Puts each stage on the rank the schedule runs it on (interleaved: s mod P; V-shaped schedules differ). */
        private static List<StageSlice> onRanks(List<StageSlice> slices, Schedule schedule) {
            List<StageSlice> out = new ArrayList<>();
            for (StageSlice s : slices) {
                out.add(new StageSlice(s.index(), schedule.rankOfStage(s.index()), s.firstBlock(), s.endBlock(),
                        s.embedding(), s.head()));
            }
            return out;
        }
    }
}

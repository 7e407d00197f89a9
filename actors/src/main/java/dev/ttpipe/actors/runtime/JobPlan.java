package dev.ttpipe.actors.runtime;

import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.stages.LrSchedule;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.StageSlice;

import java.util.ArrayList;
import java.util.List;

/**
 * Everything a pipeline job needs, resolved from the config: the model, the split into stages and
 * ranks, the (lowered) schedule each rank executes, batch geometry, optimizer, devices and transport.
 * Immutable; the same plan is given to every rank.
 *
 * @param rankMesh      the mesh each rank owns (its submesh), as device_config.mesh_shape
 * @param readyFirst    run whatever is ready within the schedule's in-flight limit instead of the row's order
 * @param accumulation  forward passes (pipeline flushes) per optimizer step
 */
public record JobPlan(String name, long seed, ModelSpec model, Parallelism parallelism, MeshShape rankMesh,
                      List<StageSlice> slices, Schedule schedule, boolean readyFirst, int microbatches,
                      int microbatchSize, int seqLen, int accumulation, OptimizerSpec optimizer, LrSchedule lr,
                      double clipMaxNorm, String backend, MeshOptions meshOptions, String transport) {

    /** Starts a plan in code, without YAML: the model, then the pipeline and training settings. */
    public static Builder builder(ModelSpec model) {
        return new Builder(model);
    }

    public int ranks() {
        return schedule.ranks();
    }

    public int stages() {
        return schedule.stages();
    }

    public int batchSize() {
        return microbatches * microbatchSize;
    }

    public long tokensPerStep() {
        return (long) batchSize() * seqLen * accumulation;
    }

    public StageSlice slice(int stage) {
        return slices.get(stage);
    }

    public List<StageSlice> slicesOfRank(int rank) {
        List<StageSlice> out = new ArrayList<>();
        for (StageSlice s : slices) if (s.rank() == rank) out.add(s);
        return out;
    }

    public int firstStageRank() {
        return schedule.rankOfStage(0);
    }

    public int lastStageRank() {
        return schedule.rankOfStage(stages() - 1);
    }

    /**
     * Per stage, the most microbatches the static schedule ever has in flight (forward done, weight
     * gradient not yet): the limit ready-first mode keeps to (1F1B's is min(P - r, M)).
     */
    public int[] inFlightLimits() {
        int[] limit = new int[stages()];
        int[] live = new int[stages()];
        for (List<Action> row : schedule.rows()) {
            for (Action a : row) {
                int s = a.stage();
                if (a.kind() == ActionKind.F) {
                    live[s]++;
                    limit[s] = Math.max(limit[s], live[s]);
                } else if (a.kind() == ActionKind.B || a.kind() == ActionKind.W) {
                    live[s]--;
                }
            }
        }
        return limit;
    }

    /**
     * Builds a plan from code (what the YAML config does for the CLI). Defaults: 2 ranks, 1F1B,
     * 4 microbatches of 4 sequences, the model's max sequence length, AdamW at 3e-3, cpu backend,
     * a [1, 1] mesh per rank, even split of the blocks, in-process transport.
     */
    public static final class Builder {
        private final ModelSpec model;
        private String name = "ttpipe";
        private long seed = 5489;
        private int ranks = 2, virtualStages = 0, microbatches = 4, microbatchSize = 4, seqLen, accumulation = 1;
        private String schedule = "1f1b";
        private boolean readyFirst;
        private List<Integer> blocksPerRank;
        private OptimizerSpec optimizer = OptimizerSpec.adamw(3e-3, 0.01);
        private LrSchedule lr;
        private double clipMaxNorm = 1.0;
        private String backend = "cpu";
        private MeshShape rankMesh = new MeshShape(1, 1);
        private boolean ddp, tp;
        private MeshOptions meshOptions = MeshOptions.defaults().withThreads(1);
        private String transport = "local";

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
        public Builder microbatches(int m) { this.microbatches = m; return this; }
        public Builder microbatchSize(int b) { this.microbatchSize = b; return this; }
        public Builder seqLen(int t) { this.seqLen = t; return this; }
        public Builder accumulation(int k) { this.accumulation = k; return this; }
        /** TTML's blocks_per_rank (rank -> blocks); unset: a cost-balanced split. */
        public Builder blocksPerRank(Integer... counts) { this.blocksPerRank = List.of(counts); return this; }
        public Builder optimizer(OptimizerSpec o) { this.optimizer = o; return this; }
        public Builder lr(LrSchedule l) { this.lr = l; return this; }
        public Builder clipMaxNorm(double c) { this.clipMaxNorm = c; return this; }
        public Builder backend(String b) { this.backend = b; return this; }
        public Builder meshOptions(MeshOptions o) { this.meshOptions = o; return this; }
        /** local, aeron (IPC within the process) or fabric (device sockets). */
        public Builder transport(String t) { this.transport = t; return this; }
        /** The mesh each rank owns and the strategies inside it (TTML's device_config). */
        public Builder rankMesh(MeshShape shape, boolean enableDdp, boolean enableTp) {
            this.rankMesh = shape;
            this.ddp = enableDdp;
            this.tp = enableTp;
            return this;
        }

        public JobPlan build() {
            int v = virtualStages > 0 ? virtualStages : dev.ttpipe.schedules.Schedules.defaultVirtualStages(schedule);
            Schedule s = dev.ttpipe.schedules.Lowering.lower(
                    dev.ttpipe.schedules.Schedules.generate(schedule, ranks, microbatches, v, null));
            List<StageSlice> slices = blocksPerRank == null
                    ? dev.ttpipe.stages.Partitioner.balanced(model, ranks, s.virtualStages(), seqLen)
                    : dev.ttpipe.stages.Partitioner.fromBlocksPerRank(blocksPerRank, model.numBlocks(), s.virtualStages());
            return new JobPlan(name, seed, model, Parallelism.of(rankMesh, ddp, tp), rankMesh, PlanBuilder.onRanks(slices, s),
                    s, readyFirst, microbatches, microbatchSize, seqLen, accumulation, optimizer,
                    lr != null ? lr : LrSchedule.constant(optimizer.learningRate()), clipMaxNorm, backend, meshOptions, transport);
        }
    }
}

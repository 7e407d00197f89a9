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
}

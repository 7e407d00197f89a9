package dev.ttpipe.actors.runtime;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.sim.SimMeshDevice;
import dev.ttpipe.schedules.CostModel;
import dev.ttpipe.schedules.Simulator;
import dev.ttpipe.stages.Inputs;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.data.Batch;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * On the sim backend every op takes the time its cost model gives, so each stage's F and B take a
 * known time. With 16 stages and 64 microbatches the runtime's measured pass time must be within 5%
 * of the simulator's makespan for those costs; the difference is the runtime's own overhead, which
 * is printed per action.
 */
class SimPipelineTimingTest {
    static final int RANKS = 16, MICROBATCHES = 64, SEQ = 32, MB = 2;

    @Test
    void measuredStepTimeIsWithinFivePercentOfTheSimulatorsMakespan() {
        ModelSpec model = ModelSpec.gpt2(64, 256, 4, RANKS, SEQ);
        // Slow modeled devices so an action takes milliseconds and thread wake-ups stay small beside it.
        MeshOptions opts = MeshOptions.defaults().withThreads(1).withSimCosts(new SimCosts(20.0, 20.0, 5.0, 25.0, 1.0));
        JobPlan plan = JobPlan.builder(model).ranks(RANKS).microbatches(MICROBATCHES).microbatchSize(MB).seqLen(SEQ)
                .backend("sim").meshOptions(opts).build();
        CostModel known = knownCosts(plan, opts);
        double predicted = Simulator.simulate(plan.schedule(), known).makespan();
        int[] in = new int[plan.batchSize() * SEQ];
        Batch batch = new Batch(plan.batchSize(), SEQ, in, in.clone());
        try (PipelineRuntime runtime = PipelineRuntime.start(plan)) {
            runtime.step(0, List.of(batch));                              // warm-up
            double best = Double.MAX_VALUE;
            dev.ttpipe.actors.telemetry.StepAnalysis analysis = null;
            for (int step = 1; step <= 2; step++) {
                Coordinator.StepReport r = runtime.step(step, List.of(batch));
                double pass = (r.passEndNs()[0] - r.passStartNs()[0]) / 1e9;
                if (pass < best) {
                    best = pass;
                    analysis = new dev.ttpipe.actors.telemetry.StepAnalysis(plan.schedule(), r.events(), r.passEndNs()[0] - r.passStartNs()[0]);
                }
            }
            int actionsPerRank = plan.schedule().row(0).size();
            System.out.printf("16 stages x 64 microbatches on sim: measured %.3f s, simulator %.3f s (%+.2f%%), "
                            + "%.1f us per action on the critical path; runtime dispatch between back-to-back actions: median %.1f us%n",
                    best, predicted, 100 * (best / predicted - 1),
                    (best - predicted) / (2.0 * (MICROBATCHES + RANKS - 1)) * 1e6, analysis.dispatchMedianUs());
            assertTrue(Math.abs(best / predicted - 1) < 0.05, "measured " + best + " s vs simulated " + predicted + " s");
            assertTrue(actionsPerRank > 0);
        }
    }

    /** Each stage's F and B time as the sim backend's cost model charges it (its modeled clock, one stage at a time). */
    static CostModel knownCosts(JobPlan plan, MeshOptions opts) {
        double[] f = new double[plan.stages()], b = new double[plan.stages()];
        try (MeshDevice mesh = Backends.open("sim", new MeshShape(1, 1), opts)) {
            Submesh sub = mesh.asSubmesh();
            for (StageSlice s : plan.slices()) {
                try (Stage stage = new Stage(plan.model(), s, sub, plan.parallelism(), plan.seed())) {
                    int[] ids = new int[plan.microbatchSize() * plan.seqLen()];
                    Tensor x = stage.isFirst() ? Inputs.ids(sub.ops(), plan.parallelism(), ids, plan.microbatchSize(), plan.seqLen())
                            : sub.ops().zeros(dev.ttpipe.device.Shape.of(plan.microbatchSize(), plan.seqLen(),
                            plan.model().embeddingDim()), dev.ttpipe.device.Layout.REPLICATED, dev.ttpipe.device.DType.FP32);
                    if (stage.isLast()) {
                        stage.setTargets(0, Inputs.ids(sub.ops(), plan.parallelism(), ids, plan.microbatchSize(), plan.seqLen()), 1f);
                    }
                    double t0 = SimMeshDevice.modeledSeconds(sub);
                    Tensor y = stage.forward(0, 0, x);
                    double t1 = SimMeshDevice.modeledSeconds(sub);
                    Tensor dy = stage.isLast() ? null : sub.ops().zeros(y.shape(), y.layout(), y.dtype());
                    if (y != null) y.close();
                    double t2 = SimMeshDevice.modeledSeconds(sub);
                    Tensor dx = stage.backward(0, 0, dy);
                    double t3 = SimMeshDevice.modeledSeconds(sub);
                    if (dx != null) dx.close();
                    f[s.index()] = t1 - t0;
                    b[s.index()] = t3 - t2;
                }
            }
        }
        return CostModel.builder().forward(f).backward(b).backwardInput(half(b)).backwardWeight(half(b))
                .comm(new double[plan.stages()]).build();
    }

    static double[] half(double[] x) {
        double[] out = new double[x.length];
        for (int i = 0; i < x.length; i++) out[i] = x[i] / 2;
        return out;
    }
}

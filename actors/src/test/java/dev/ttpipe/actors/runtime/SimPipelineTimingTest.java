package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.telemetry.StepAnalysis;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.sim.SimMeshDevice;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.CostModel;
import dev.ttpipe.schedules.Simulator;
import dev.ttpipe.stages.Inputs;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.data.Batch;
import org.junit.jupiter.api.Test;

import java.util.Comparator;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * On the sim backend every op takes the time its cost model gives. With 16 stages and 64
 * microbatches every rank runs every action of its row once per pass, its compute actions in the
 * row's order, and the telemetry accounts for each of them. How close the measured pass comes to
 * the simulator's makespan is a figure, not a test: it is printed here and reported by
 * {@code ttpipe train configs/sim-pp16.yaml} (the README quotes it).
 */
class SimPipelineTimingTest {
    static final int RANKS = 16, MICROBATCHES = 64, SEQ = 32, MB = 2;

    @Test
    void everyRankRunsItsWholeRowInOrderAtSixteenStages() {
        ModelSpec model = ModelSpec.gpt2(64, 256, 4, RANKS, SEQ);
        // Slow modeled devices so an action takes milliseconds and thread wake-ups stay small beside it.
        MeshOptions opts = MeshOptions.defaults().withThreads(1).withSimCosts(new SimCosts(20.0, 20.0, 5.0, 25.0, 1.0));
        JobPlan plan = JobPlan.builder(model).ranks(RANKS).microbatches(MICROBATCHES).microbatchSize(MB).seqLen(SEQ)
                .backend(Backend.SIM).meshOptions(opts).build();
        CostModel known = knownCosts(plan, opts);
        double predicted = Simulator.simulate(plan.schedule(), known).makespan();
        int[] in = new int[plan.batchSize() * SEQ];
        Batch batch = new Batch(plan.batchSize(), SEQ, in, in.clone());
        try (PipelineRuntime runtime = PipelineRuntime.start(plan)) {
            runtime.step(0, List.of(batch));                              // warm-up
            Coordinator.StepReport r = runtime.step(1, List.of(batch));
            for (int rank = 0; rank < RANKS; rank++) {
                List<Action> row = plan.schedule().row(rank).stream()
                        .filter(a -> a.kind().isCompute()).toList();
                int rk = rank;
                List<Action> ran = r.events().stream()
                        .filter(e -> e.rank() == rk && e.pass() >= 0 && e.kind().isCompute())
                        .sorted(Comparator.comparingLong(ActionEvent::startNs))
                        .map(ActionEvent::action).toList();
                assertEquals(row, ran, "rank " + rank + " ran its compute actions out of the row's order");
                long recvs = r.events().stream().filter(e -> e.rank() == rk && e.kind().name().startsWith("RECV")).count();
                long rowRecvs = plan.schedule().row(rank).stream().filter(a -> a.kind().name().startsWith("RECV")).count();
                assertEquals(rowRecvs, recvs, "rank " + rank + ": one RECV event per RECV of the row");
            }
            double pass = (r.passEndNs()[0] - r.passStartNs()[0]) / 1e9;
            var analysis = StepAnalysis.of(plan.schedule(), r);
            System.out.printf("16 stages x 64 microbatches on sim: measured %.3f s, simulator %.3f s (%+.2f%%); %s%n",
                    pass, predicted, 100 * (pass / predicted - 1), analysis.overhead().describe());
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
                            : sub.ops().zeros(Shape.of(plan.microbatchSize(), plan.seqLen(),
                            plan.model().embeddingDim()), Layout.REPLICATED, DType.FP32);
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

package dev.ttpipe.stages;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.stages.fp64.Fp64MeshDevice;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The fp64 mesh the gradient checks run on computes what the cpu backend computes: a whole 2-block
 * model (default initialisation, dropout on) gives the same loss and gradients on both, to fp32
 * rounding. So what the fp64 checks prove about the stages' formulas holds for the real backend.
 */
class Fp64PathMatchesCpuTest {
    @ParameterizedTest
    @EnumSource(ModelSpec.ModelType.class)
    void wholeModelLossAndGradientsAgreeWithTheCpuBackend(ModelSpec.ModelType type) {
        ModelSpec spec = GradientCheck.model(type, 0.1f);
        Random rng = new Random(5);
        int[] ids = GradientCheck.ints(rng, 2 * 8, spec.vocabSize());
        int[] targets = GradientCheck.ints(rng, 2 * 8, spec.vocabSize());
        try (MeshDevice cpu = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults().withThreads(1));
             MeshDevice fp64 = Fp64MeshDevice.open()) {
            List<float[]> a = new ArrayList<>(), b = new ArrayList<>();
            double lossCpu = run(spec, cpu.asSubmesh(), ids, targets, a);
            double lossFp64 = run(spec, fp64.asSubmesh(), ids, targets, b);
            assertTrue(Math.abs(lossCpu - lossFp64) <= 1e-5 * Math.abs(lossFp64), lossCpu + " vs " + lossFp64);
            double worst = 0;
            for (int p = 0; p < a.size(); p++) {
                double diff = 0, norm = 0;
                for (int i = 0; i < a.get(p).length; i++) {
                    diff += Math.pow(a.get(p)[i] - b.get(p)[i], 2);
                    norm += Math.pow(b.get(p)[i], 2);
                }
                worst = Math.max(worst, Math.sqrt(diff / norm));
            }
            System.out.printf(Locale.ROOT, "fp64 vs cpu, %s: loss %.8f vs %.8f, worst norm-wise gradient difference %.2e%n",
                    type, lossCpu, lossFp64, worst);
            assertTrue(worst < 1e-4, "gradients differ by " + worst + " norm-wise");
        }
    }

    /** Loss and every parameter's gradient (as fp32) of one forward and backward on {@code sub}. */
    private static double run(ModelSpec spec, Submesh sub, int[] ids, int[] targets, List<float[]> grads) {
        try (Stage stage = new Stage(spec, GradientCheck.WHOLE, sub, Parallelism.NONE, 3)) {
            stage.setTargets(0, sub.ops().fromHostInts(targets, Shape.of(2, 8), Layout.REPLICATED), 1f / 16);
            Tensor in = sub.ops().fromHostInts(ids, Shape.of(2, 8), Layout.REPLICATED);
            stage.forward(0, 0, in);
            double loss = stage.loss(0).mean();
            stage.backward(0, 0, null);
            stage.reduceGradients();
            for (Param p : stage.parameters()) grads.add(p.fullGrad().toHost());
            return loss;
        }
    }
}

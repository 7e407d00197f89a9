package dev.ttpipe.actors.runtime;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.cpu.CpuKernels;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.ReferenceTrainer;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What docs/determinism.md promises on one machine, exactly (raw bits, no tolerance), on a model large enough
 * that the matmuls are cut into several OpenBLAS tiles and the gradients' sums of squares into several chunks,
 * with gradient clipping active (so the norm's bits reach the weights):
 * <ul>
 *   <li>two runs of the same pipeline give the same losses and weights;</li>
 *   <li>the pipeline (1F1B and ZB-H1 over 2 ranks) gives the reference trainer's losses, norms and weights;</li>
 *   <li>neither depends on the thread count: ranks with 1 or 2 threads, a reference with 1 or 3.</li>
 * </ul>
 * The build runs it once more for each x86-64 level this CPU runs, with the cpu kernels built for that level
 * alone (see actors/pom.xml).
 */
class BitIdentityTest {
    static final String TEXT = "now is the winter of our discontent made glorious summer by this sun of york. ".repeat(120);
    static final int STEPS = 3, T = 64, B = 12, RANKS = 2;
    static final double CLIP = 0.05;

    static TextDataset data;
    static ModelSpec model;
    /** Losses, norms and weights of the reference trainer on one thread. */
    static Run reference;

    record Run(double[] losses, double[] norms, Map<String, float[]> weights) {
    }

    @BeforeAll
    static void referenceOnOneThread() {
        String level = System.getProperty("ttpipe.test.cpu.level", "");
        if (!level.isEmpty()) {                           // a run with the cpu kernels built for one x86-64 level alone
            String kernels = CpuKernels.elementwise();
            Assumptions.assumeTrue(kernels.equals("native " + level + " (libttpipe_cpu.so)"),
                    "skipped: the " + level + " kernels do not run here: " + kernels);
        }
        setUp();
        reference = reference(1);
    }

    static void setUp() {
        data = TextDataset.of(TEXT, 0.1);
        // d 128, 4 heads, 2 blocks, MLP 1024: [B T = 768, 128] @ [128, 1024] is 2 tiles, the MLP weight 8 sum chunks
        model = new ModelSpec(ModelSpec.ModelType.GPT2, data.tokenizer().vocabSize(), 128, 4, 4, 2, 1024, T, 0.1f, false,
                10000f, false);
    }

    static JobPlan plan(String schedule, int threads) {
        return JobPlan.builder(model).ranks(RANKS).schedule(schedule).microbatches(2).microbatchSize(B).seqLen(T)
                .blocksPerRank(1, 1).optimizer(OptimizerSpec.adamw(3e-3, 0.1)).clipMaxNorm(CLIP).seed(5)
                .meshOptions(MeshOptions.defaults().withThreads(threads)).build();
    }

    static List<Batch> batch(int step) {
        return List.of(data.trainBatch(5, step, 2 * B, T));
    }

    static Run reference(int threads) {
        JobPlan plan = plan("1f1b", threads);
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults().withThreads(threads));
             ReferenceTrainer ref = new ReferenceTrainer(model, mesh.asSubmesh(), Parallelism.NONE, 5, plan.optimizer(),
                     plan.lr(), plan.clipMaxNorm(), plan.microbatches())) {
            double[] losses = new double[STEPS], norms = new double[STEPS];
            for (int s = 0; s < STEPS; s++) {
                ReferenceTrainer.StepResult r = ref.step(s, batch(s));
                losses[s] = r.loss();
                norms[s] = r.gradNorm();
            }
            return new Run(losses, norms, ref.weights());
        }
    }

    static Run pipeline(String schedule, int threads) {
        try (PipelineRuntime runtime = PipelineRuntime.start(plan(schedule, threads))) {
            double[] losses = new double[STEPS], norms = new double[STEPS];
            for (int s = 0; s < STEPS; s++) {
                Coordinator.StepReport r = runtime.step(s, batch(s));
                losses[s] = r.loss();
                norms[s] = r.gradNorm();
                assertTrue(r.clip() < 1.0, "clipping is active at step " + s + ": norm " + r.gradNorm());
            }
            return new Run(losses, norms, runtime.weights());
        }
    }

    static void assertSameBits(Run expected, Run actual, String what) {
        for (int s = 0; s < STEPS; s++) {
            assertEquals(Double.doubleToRawLongBits(expected.losses[s]), Double.doubleToRawLongBits(actual.losses[s]),
                    what + ": loss of step " + s + ", " + actual.losses[s] + " against " + expected.losses[s]);
            assertEquals(Double.doubleToRawLongBits(expected.norms[s]), Double.doubleToRawLongBits(actual.norms[s]),
                    what + ": gradient norm of step " + s + ", " + actual.norms[s] + " against " + expected.norms[s]);
        }
        assertEquals(expected.weights.keySet(), actual.weights.keySet(), what + ": parameters");
        for (Map.Entry<String, float[]> e : expected.weights.entrySet()) {
            float[] a = actual.weights.get(e.getKey()), x = e.getValue();
            assertEquals(x.length, a.length, what + ": " + e.getKey() + " size");
            for (int i = 0; i < x.length; i++) {
                if (Float.floatToRawIntBits(a[i]) != Float.floatToRawIntBits(x[i])) {
                    throw new AssertionError(what + ": " + e.getKey() + "[" + i + "] is " + a[i] + ", expected " + x[i]);
                }
            }
        }
    }

    @Test
    void theReferenceHasTheSameBitsOnThreeThreads() {
        assertSameBits(reference, reference(3), "reference on 3 threads against 1");
    }

    @Test
    void thePipelineHasTheReferencesBitsAndSoHasASecondRun() {
        Run first = pipeline("1f1b", 1);
        assertSameBits(reference, first, "1f1b pipeline against the reference");
        assertSameBits(first, pipeline("1f1b", 1), "a second 1f1b run against the first");
    }

    @Test
    void thePipelineOnTwoThreadsPerRankHasTheReferencesBits() {
        assertSameBits(reference, pipeline("zb-h1", 2), "zb-h1 pipeline, 2 threads per rank, against the reference on 1");
    }

    /** The reference's parameters in the pipeline's order: what makes the norms' sums the same sequence. */
    @Test
    void theModelIsLargeEnoughToCutMatmulsAndSums() {
        List<String> big = new ArrayList<>();
        reference.weights.forEach((k, v) -> {
            if (v.length > 4 * (1 << 14)) big.add(k);
        });
        assertTrue(big.size() >= 2, "parameters of several sum chunks: " + big);
    }
}

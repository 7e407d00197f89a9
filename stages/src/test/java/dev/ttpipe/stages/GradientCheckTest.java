package dev.ttpipe.stages;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Every module's backward against central finite differences of its forward: a GPT-2 block, a
 * Llama block (RoPE, grouped-query attention, SwiGLU), the embeddings, the head with its loss, and
 * whole 2-block models. The forward is fp32, so differences use a large step and a tolerance to
 * match; a wrong formula is off by far more (tests of this test flip a sign and see it fail).
 */
class GradientCheckTest {
    static MeshDevice mesh;
    static Submesh sub;
    static Ops ops;

    static final int B = 2, T = 5;

    @BeforeAll
    static void open() {
        mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults());
        sub = mesh.asSubmesh();
        ops = sub.ops();
    }

    @AfterAll
    static void close() {
        mesh.close();
    }

    static ModelSpec gpt() {
        return new ModelSpec(ModelSpec.ModelType.GPT2, 11, 16, 2, 2, 2, 24, 8, 0f, false, 10000f, false);
    }

    static ModelSpec llama() {
        return new ModelSpec(ModelSpec.ModelType.LLAMA, 11, 16, 4, 2, 2, 24, 8, 0f, false, 10000f, false);
    }

    @Test
    void gpt2BlockInputAndWeightGradientsMatchFiniteDifferences() {
        checkMiddleStage(gpt(), 0, 1);
    }

    @Test
    void llamaBlockInputAndWeightGradientsMatchFiniteDifferences() {
        checkMiddleStage(llama(), 1, 2);
    }

    @Test
    void gpt2EmbeddingsGradientsMatchFiniteDifferences() {
        checkModel(gpt(), new StageSlice(0, 0, 0, 0, true, true));
    }

    @Test
    void headAndLossGradientsMatchFiniteDifferences() {
        checkLastStage(gpt(), new StageSlice(1, 0, 2, 2, false, true));
        checkLastStage(llama(), new StageSlice(1, 0, 2, 2, false, true));
    }

    @Test
    void twoBlockGpt2GradientsMatchFiniteDifferencesEndToEnd() {
        checkModel(gpt(), new StageSlice(0, 0, 0, 2, true, true));
    }

    @Test
    void twoBlockLlamaGradientsMatchFiniteDifferencesEndToEnd() {
        checkModel(llama(), new StageSlice(0, 0, 0, 2, true, true));
    }

    @Test
    void tiedGpt2GradientsMatchFiniteDifferences() {
        checkModel(new ModelSpec(ModelSpec.ModelType.GPT2, 11, 16, 2, 2, 2, 24, 8, 0f, true, 10000f, false), new StageSlice(0, 0, 0, 1, true, true));
    }

    // ---- the checks ------------------------------------------------------------------------------

    /** A stage of blocks only: L = sum(y * R); checks dL/dx and dL/dtheta. */
    private void checkMiddleStage(ModelSpec spec, int first, int end) {
        Random rng = new Random(7);
        int d = spec.embeddingDim();
        float[] x = randn(rng, B * T * d, 1.0);
        float[] r = randn(rng, B * T * d, 1.0);
        try (Stage stage = new Stage(spec, new StageSlice(1, 0, first, end, false, false), sub, Parallelism.NONE, 3)) {
            Tensor y = stage.forward(0, 0, act(x, d));
            y.close();
            float[] dx;
            try (Tensor dxT = stage.backwardInput(0, 0, act(r, d))) {
                dx = dxT.toHost();
            }
            stage.backwardWeight(0, 0);
            stage.reduceGradients();
            java.util.function.DoubleSupplier loss = () -> {
                try (Tensor out = stage.infer(act(x, d))) {
                    return dot(out.toHost(), r);
                }
            };
            checkInput(x, dx, loss, "dx");
            checkParams(stage, loss, rng);
        }
    }

    /** The last stage: L = sum of token losses; checks dL/dx and dL/dtheta. */
    private void checkLastStage(ModelSpec spec, StageSlice slice) {
        Random rng = new Random(11);
        int d = spec.embeddingDim();
        float[] x = randn(rng, B * T * d, 1.0);
        int[] targets = ints(rng, B * T, spec.vocabSize());
        targets[3] = Head.IGNORE_INDEX;
        try (Stage stage = new Stage(spec, slice, sub, Parallelism.NONE, 5)) {
            stage.setTargets(0, ids(targets), 1f);
            stage.forward(0, 0, act(x, d));
            float[] dx;
            try (Tensor dxT = stage.backwardInput(0, 0, null)) {
                dx = dxT.toHost();
            }
            stage.backwardWeight(0, 0);
            stage.reduceGradients();
            java.util.function.DoubleSupplier loss = () -> lossOf(stage, act(x, d), targets);
            checkInput(x, dx, loss, "dx");
            checkParams(stage, loss, rng);
        }
    }

    /** A whole model (first and last stage in one): L = sum of token losses over the batch. */
    private void checkModel(ModelSpec spec, StageSlice slice) {
        Random rng = new Random(13);
        int[] in = ints(rng, B * T, spec.vocabSize());
        int[] targets = ints(rng, B * T, spec.vocabSize());
        try (Stage stage = new Stage(spec, slice, sub, Parallelism.NONE, 9)) {
            stage.setTargets(0, ids(targets), 1f);
            stage.forward(0, 0, ids(in));
            assertTrue(stage.backwardInput(0, 0, null) == null, "the first stage passes no gradient on");
            stage.backwardWeight(0, 0);
            stage.reduceGradients();
            checkParams(stage, () -> lossOf(stage, ids(in), targets), rng);
        }
    }

    private static double lossOf(Stage stage, Tensor input, int[] targets) {
        stage.setTargets(1, ids(targets), 1f);
        stage.forward(0, 1, input);
        double loss = stage.loss(1).sum();
        stage.dropStash();
        return loss;
    }

    /** Samples a few elements of every parameter and compares its gradient with central differences. */
    private static void checkParams(Stage stage, java.util.function.DoubleSupplier loss, Random rng) {
        for (Param p : stage.parameters()) {
            float[] grad = p.fullGrad().toHost();
            float[] value = p.value().toHost();
            for (int k = 0; k < 4; k++) {
                int i = rng.nextInt(value.length);
                double fd = central(value, i, v -> set(p, v), loss);
                assertClose(grad[i], fd, p.name() + "[" + i + "]");
            }
            set(p, value);
        }
    }

    private static void checkInput(float[] x, float[] dx, java.util.function.DoubleSupplier loss, String what) {
        Random rng = new Random(3);
        for (int k = 0; k < 6; k++) {
            int i = rng.nextInt(x.length);
            double fd = central(x, i, v -> { }, loss);
            assertClose(dx[i], fd, what + "[" + i + "]");
        }
    }

    private static double central(float[] values, int i, java.util.function.Consumer<float[]> apply,
                                  java.util.function.DoubleSupplier loss) {
        float orig = values[i];
        double h = 2e-3 * Math.max(1.0, Math.abs(orig));   // small enough for the curvature, large enough for fp32
        values[i] = (float) (orig + h);
        apply.accept(values);
        double plus = loss.getAsDouble();
        values[i] = (float) (orig - h);
        apply.accept(values);
        double minus = loss.getAsDouble();
        values[i] = orig;
        apply.accept(values);
        return (plus - minus) / (((double) (float) (orig + h)) - ((double) (float) (orig - h)));
    }

    static void assertClose(double analytic, double numeric, String what) {
        double tol = 2e-2 * Math.max(Math.abs(analytic), Math.abs(numeric)) + 2e-3;
        if (Math.abs(analytic - numeric) > tol) {
            fail(what + ": backward gives " + analytic + ", finite differences " + numeric);
        }
    }

    private static void set(Param p, float[] v) {
        try (Tensor t = ops.fromHost(v, p.shape(), p.value().layout(), DType.FP32)) {
            ops.copyInto(p.value(), t);
        }
    }

    static Tensor act(float[] x, int d) {
        return ops.fromHost(x, Shape.of(B, T, d), Layout.REPLICATED, DType.FP32);
    }

    static Tensor ids(int[] v) {
        return ops.fromHostInts(v, Shape.of(B, T), Layout.REPLICATED);
    }

    static float[] randn(Random rng, int n, double std) {
        float[] out = new float[n];
        for (int i = 0; i < n; i++) out[i] = (float) (rng.nextGaussian() * std);
        return out;
    }

    static int[] ints(Random rng, int n, int bound) {
        int[] out = new int[n];
        for (int i = 0; i < n; i++) out[i] = rng.nextInt(bound);
        return out;
    }

    static double dot(float[] a, float[] b) {
        double s = 0;
        for (int i = 0; i < a.length; i++) s += (double) a[i] * b[i];
        return s;
    }
}

package dev.ttpipe.stages;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.stages.fp64.Fp64MeshDevice;
import dev.ttpipe.stages.fp64.Fp64Ops;

import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.function.Predicate;

/**
 * A model-level gradient check in fp64: one stage (any slice of a model) on the fp64 mesh, its
 * weights rescaled so that every parameter's gradient is O(1), a fixed batch, and a scalar L: the
 * sum of the token losses on a last stage, {@code sum(y * R)} for a fixed random R otherwise. The
 * stage's backward (I then W) gives dL/dw for every parameter and dL/dx for an activation input;
 * every element is compared with a fourth-order central difference of L (step 1e-3, error about
 * 1e-11 here) and must agree within {@link #RTOL} relative (plus {@link #ATOL} for elements that
 * are zero). Dropout masks are those of pass 0, microbatch 0 in both.
 */
final class GradientCheck {
    static final double RTOL = 1e-7;
    static final double ATOL = 1e-10;
    static final double STEP = 1e-3;
    static final int B = 2, T = 5;
    /** The fp64 mesh every check runs on (plain Java arrays: nothing to close). */
    static final Submesh FP64 = Fp64MeshDevice.open().asSubmesh();

    /** What one check found: elements compared, the worst relative error (elements with |g| > 1e-6), the smallest gradient RMS. */
    record Report(String name, long elements, double maxRelative, double maxAbsolute, String worst, double minRms,
                  String minRmsParam) {
        @Override
        public String toString() {
            return String.format(Locale.ROOT, "%-34s %6d elements  max rel err %.2e (%s)  max abs err %.1e  smallest grad RMS %.3f (%s)",
                    name, elements, maxRelative, worst, maxAbsolute, minRms, minRmsParam);
        }
    }

    private final String name;
    private final Stage stage;
    private final Fp64Ops ops;
    private final int dim;
    private final int[] tokens;
    private final int[] targets;
    private final double[] x;
    private final double[] r;

    GradientCheck(String name, ModelSpec spec, StageSlice slice, Submesh fp64) {
        this.name = name;
        this.ops = (Fp64Ops) fp64.ops();
        this.stage = new Stage(spec, slice, fp64, Parallelism.NONE, 17);
        this.dim = spec.embeddingDim();
        Random rng = new Random(23);
        rescale(stage, rng);
        tokens = ints(rng, B * T, spec.vocabSize());
        targets = ints(rng, B * T, spec.vocabSize());
        targets[3] = Head.IGNORE_INDEX;
        x = slice.embedding() ? null : gaussian(rng, B * T * dim, 1.0);
        r = slice.head() ? null : gaussian(rng, B * T * dim, 1.0);
    }

    /**
     * Weights with O(1) gradients: matrices N(0, 1/fan_in) (so attention scores are O(1) and the
     * softmax is far from uniform), embeddings N(0, 1), gains 1 + N(0, 0.2^2), biases N(0, 0.2^2).
     */
    static void rescale(Stage stage, Random rng) {
        for (Param p : stage.parameters()) {
            double[] w = Fp64Ops.data(p.value());
            String n = p.name();
            for (int i = 0; i < w.length; i++) {
                double g = rng.nextGaussian();
                if (n.endsWith(".gamma")) w[i] = 1 + 0.2 * g;
                else if (n.endsWith(".beta") || n.endsWith(".bias")) w[i] = 0.2 * g;
                else if (n.startsWith("embed.")) w[i] = g;
                else w[i] = g / Math.sqrt(p.shape().dim(1));
            }
        }
    }

    Stage stage() {
        return stage;
    }

    /** L at the current weights and input: one training forward of pass 0, microbatch 0. */
    double loss() {
        Tensor in = input();
        if (stage.isLast()) {
            stage.setTargets(0, ids(targets), 1f);
            stage.forward(0, 0, in);
            double l = stage.loss(0).sum();
            stage.dropStash();
            return l;
        }
        try (Tensor y = stage.forward(0, 0, in)) {
            stage.dropStash();
            return dot(Fp64Ops.data(y), r);
        }
    }

    /** The stage's backward: every parameter's gradient by name, and "input" for an activation input. */
    Map<String, double[]> analytic() {
        Map<String, double[]> out = new LinkedHashMap<>();
        if (stage.isLast()) stage.setTargets(0, ids(targets), 1f);
        Tensor y = stage.forward(0, 0, input());
        if (y != null) y.close();
        try (Tensor dx = stage.backwardInput(0, 0, stage.isLast() ? null : ops.fromDoubles(r, Shape.of(B, T, dim)))) {
            if (dx != null) out.put("input", Fp64Ops.data(dx).clone());
        }
        stage.backwardWeight(0, 0);
        stage.reduceGradients();
        for (Param p : stage.parameters()) out.put(p.name(), Fp64Ops.data(p.fullGrad()).clone());
        stage.endStep();
        return out;
    }

    /** Compares every element; throws an AssertionError naming the first element beyond tolerance. */
    Report run() {
        return run(tensor -> true);
    }

    /** {@link #run()} over the tensors named ("input" or a parameter's name) that {@code which} accepts. */
    Report run(Predicate<String> which) {
        Map<String, double[]> grads = analytic();
        Map<String, double[]> values = new LinkedHashMap<>();
        if (x != null) values.put("input", x);
        for (Param p : stage.parameters()) values.put(p.name(), Fp64Ops.data(p.value()));
        values.keySet().removeIf(which.negate());
        if (values.isEmpty()) throw new IllegalArgumentException(name + ": no tensor selected");
        long elements = 0;
        double maxRel = 0, maxAbs = 0, minRms = Double.POSITIVE_INFINITY;
        String worst = "-", minRmsParam = "-";
        for (Map.Entry<String, double[]> e : values.entrySet()) {
            double[] w = e.getValue(), g = grads.get(e.getKey());
            double rms = Math.sqrt(dot(g, g) / g.length);
            if (rms < minRms) {
                minRms = rms;
                minRmsParam = e.getKey();
            }
            for (int i = 0; i < w.length; i++) {
                double fd = central(w, i);
                double err = Math.abs(g[i] - fd), size = Math.max(Math.abs(g[i]), Math.abs(fd));
                if (!(err <= RTOL * size + ATOL)) {
                    throw new AssertionError(String.format(Locale.ROOT, "%s: d L / d %s[%d]: backward gives %.12g, "
                            + "finite differences %.12g (relative error %.2e, tolerance %.0e)", name, e.getKey(), i, g[i], fd,
                            err / size, RTOL));
                }
                maxAbs = Math.max(maxAbs, err);
                if (size > 1e-6 && err / size > maxRel) {
                    maxRel = err / size;
                    worst = e.getKey() + "[" + i + "]";
                }
                elements++;
            }
        }
        return new Report(name, elements, maxRel, maxAbs, worst, minRms, minRmsParam);
    }

    /** Fourth-order central difference of L in element i of {@code w} (restored afterwards). */
    private double central(double[] w, int i) {
        double w0 = w[i];
        double[] l = new double[4];
        double[] at = {w0 + STEP, w0 - STEP, w0 + 2 * STEP, w0 - 2 * STEP};
        try {
            for (int k = 0; k < 4; k++) {
                w[i] = at[k];
                l[k] = loss();
            }
        } finally {
            w[i] = w0;
        }
        return (8 * (l[0] - l[1]) - (l[2] - l[3])) / (12 * STEP);
    }

    private Tensor input() {
        return stage.isFirst() ? ids(tokens) : ops.fromDoubles(x, Shape.of(B, T, dim));
    }

    private Tensor ids(int[] v) {
        return ops.fromHostInts(v, Shape.of(B, T), Layout.REPLICATED);
    }

    void close() {
        stage.close();
    }

    /** Runs one check on a fresh stage and closes it. */
    static Report check(String name, ModelSpec spec, StageSlice slice, Submesh fp64) {
        return check(name, spec, slice, fp64, tensor -> true);
    }

    /** {@link #check} of the tensors {@code which} accepts. */
    static Report check(String name, ModelSpec spec, StageSlice slice, Submesh fp64, Predicate<String> which) {
        GradientCheck c = new GradientCheck(name, spec, slice, fp64);
        try {
            return c.run(which);
        } finally {
            c.close();
        }
    }

    // ---- the models and slices the checks use ----------------------------------------------------------

    /** 4 heads of dim 4 (1/sqrt(hd) exact in fp32, the precision the stages pass the scale in). */
    static ModelSpec gpt2(float dropout) {
        return new ModelSpec(ModelSpec.ModelType.GPT2, 11, 16, 4, 4, 2, 24, 8, dropout, false, 10000f, false);
    }

    /** 4 query heads sharing 2 key/value heads (GQA), head dim 4, RoPE. */
    static ModelSpec llama(float dropout) {
        return new ModelSpec(ModelSpec.ModelType.LLAMA, 11, 16, 4, 2, 2, 24, 8, dropout, false, 10000f, false);
    }

    /**
     * A Qwen3: per-head q/k RMSNorms, 4 query heads sharing 2 key/value heads of size 4 while D / H is 6 (q is 16
     * wide, the output projection [24, 16]), an untied head and Qwen3's norm epsilon 1e-6.
     */
    static ModelSpec qwen3(float dropout) {
        return new ModelSpec(ModelSpec.ModelType.QWEN3, 11, 24, 4, 2, 2, 24, 8, dropout, false, 10000f, false, DType.FP32, null, 4, 0f);
    }

    /**
     * {@link #llama} with Llama 3.1's rope scaling (factor 4, low_freq_factor 1, high_freq_factor 4, 16 original
     * positions): of head size 4's two wavelengths, 2 pi (between 16 / 4 and 16) is blended and 200 pi divided by 4.
     */
    static ModelSpec llama31(float dropout) {
        return llama(dropout).withRopeScaling(new RopeFrequencies.Llama3Scaling(4, 1, 4, 16));
    }

    /** The check's model of each type: {@link #gpt2}, {@link #llama} or {@link #qwen3}. */
    static ModelSpec model(ModelSpec.ModelType type, float dropout) {
        return switch (type) {
            case GPT2 -> gpt2(dropout);
            case LLAMA -> llama(dropout);
            case QWEN3 -> qwen3(dropout);
        };
    }

    static StageSlice block(int index) {
        return new StageSlice(1, 0, index, index + 1, false, false);
    }

    static final StageSlice EMBEDDINGS = new StageSlice(0, 0, 0, 0, true, false);
    static final StageSlice HEAD = new StageSlice(1, 0, 2, 2, false, true);
    static final StageSlice WHOLE = new StageSlice(0, 0, 0, 2, true, true);

    static double[] gaussian(Random rng, int n, double std) {
        double[] out = new double[n];
        for (int i = 0; i < n; i++) out[i] = rng.nextGaussian() * std;
        return out;
    }

    static int[] ints(Random rng, int n, int bound) {
        int[] out = new int[n];
        for (int i = 0; i < n; i++) out[i] = rng.nextInt(bound);
        return out;
    }

    static double dot(double[] a, double[] b) {
        double s = 0;
        for (int i = 0; i < a.length; i++) s += a[i] * b[i];
        return s;
    }
}

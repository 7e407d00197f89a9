package dev.ttpipe.stages;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.stages.data.Batch;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.IntConsumer;

/**
 * Validation loss and text generation through a chain of stages (one stage for a whole model, or a
 * pipeline's stages in order, moving activations between submeshes with {@link Ops#adopt}).
 */
public final class Evaluation {
    private Evaluation() {
    }

    /**
     * Mean cross-entropy (nats per token) of {@code batches}, no training: each batch's {@link #score}, the
     * sums added in batch order (what a pipeline's last stage scores per microbatch adds up to the same bits).
     */
    public static double meanLoss(List<Stage> stages, List<Batch> batches) {
        double sum = 0;
        long count = 0;
        for (Batch b : batches) {
            float[] logits;
            try (Tensor out = run(stages, b.inputs(), b.size(), b.seqLen())) {
                logits = out.toHost();
            }
            LossOutput l = score(logits, b.targets());
            sum += l.sum();
            count += l.count();
        }
        return count == 0 ? Double.NaN : sum / count;
    }

    /**
     * The cross-entropy of one batch's logits ([b * T, V] on the host) against its targets ([b * T]): the
     * sum over the targets that are not {@link Head#IGNORE_INDEX}, in order, in double precision, and their count.
     */
    public static LossOutput score(float[] logits, int[] targets) {
        int v = logits.length / targets.length;
        double sum = 0;
        long count = 0;
        for (int i = 0; i < targets.length; i++) {
            int target = targets[i];
            if (target == Head.IGNORE_INDEX) continue;
            double max = Double.NEGATIVE_INFINITY;
            for (int j = 0; j < v; j++) max = Math.max(max, logits[i * v + j]);
            double z = 0;
            for (int j = 0; j < v; j++) z += Math.exp(logits[i * v + j] - max);
            sum += Math.log(z) + max - logits[i * v + target];
            count++;
        }
        return new LossOutput(sum, count);
    }

    /**
     * Continues {@code prompt} by {@code n} tokens: greedy when {@code temperature} is 0, otherwise
     * sampling from softmax(logits / temperature) (restricted to the {@code topK} most likely when > 0)
     * with a generator seeded by {@code seed}. Only ids below {@code sampledIds} are ever chosen: a model's
     * vocabulary may be padded beyond its tokenizer's (TTML rounds vocab_size up to tiles of 32), and those
     * padding ids stand for no text.
     */
    public static int[] generate(List<Stage> stages, int[] prompt, int n, double temperature, int topK, long seed,
                                 int sampledIds) {
        int maxSeq = stages.get(0).spec().maxSequenceLength();
        int[] out = Arrays.copyOf(prompt, prompt.length + n);
        Sampler sampler = new Sampler(temperature, topK, seed, sampledIds);
        for (int i = prompt.length; i < out.length; i++) {
            int start = Math.max(0, i - maxSeq);
            int[] ctx = Arrays.copyOfRange(out, start, i);
            float[] logits;
            try (Tensor t = run(stages, ctx, 1, ctx.length)) {
                logits = t.toHost();
            }
            int v = logits.length / ctx.length;
            int base = (ctx.length - 1) * v;
            out[i] = sampler.next(logits, base, v);
        }
        return out;
    }

    /**
     * {@link #generate} with a key/value cache: each token runs through the model once (the prompt one
     * token at a time, then each new one) and attends to the cached keys and values of those before it,
     * instead of the whole context being run again per token. {@code onToken} sees each new id as it comes.
     * The context is the model's maximum sequence at most (prompt plus new tokens).
     */
    public static int[] generateCached(List<Stage> stages, int[] prompt, int n, double temperature, int topK, long seed,
                                       int sampledIds, IntConsumer onToken) {
        checkContext(stages.get(0).spec(), prompt.length, n);
        List<KvCache> caches = new ArrayList<>();
        for (Stage s : stages) caches.add(s.newKvCache(prompt.length + n));
        int[] out = Arrays.copyOf(prompt, prompt.length + n);
        Sampler sampler = new Sampler(temperature, topK, seed, sampledIds);
        for (int pos = 0; pos < out.length - 1; pos++) {
            Stage first = stages.get(0);
            Tensor x = first.submesh().ops().fromHostInts(new int[]{out[pos]}, Shape.of(1, 1),
                    Layout.REPLICATED);
            for (int i = 0; i < stages.size(); i++) {
                Stage s = stages.get(i);
                if (x.submesh() != s.submesh()) x = s.submesh().ops().adopt(x);
                x = s.decode(x, pos, caches.get(i));
            }
            if (pos + 1 < prompt.length) {
                x.close();                                           // the prompt: only its keys and values are wanted
                continue;
            }
            float[] logits;
            try (Tensor t = x) {
                logits = t.toHost();
            }
            out[pos + 1] = sampler.next(logits);
            if (onToken != null) onToken.accept(out[pos + 1]);
        }
        return out;
    }

    /**
     * Checks that {@code promptTokens} plus {@code n} new ones fit {@code spec}'s context, as generation with a
     * key/value cache needs.
     *
     * @throws StagesException saying how many new tokens would fit, or that the prompt is empty
     */
    public static void checkContext(ModelSpec spec, int promptTokens, int n) {
        int maxSeq = spec.maxSequenceLength();
        if (promptTokens + n > maxSeq) {
            throw new StagesException("generation: " + promptTokens + " prompt tokens + " + n + " new ones exceed the model's context"
                    + " of " + maxSeq + " tokens, expected at most " + (maxSeq - promptTokens) + " new tokens");
        }
        if (promptTokens == 0) throw new StagesException("generation: an empty prompt, expected at least one token");
    }

    /** Runs ids [b, T] through the stages; returns the last stage's logits (the caller closes them). */
    static Tensor run(List<Stage> stages, int[] ids, int batch, int seqLen) {
        Stage first = stages.get(0);
        Parallelism par = first.parallelism();
        Tensor x = par.ddp() && batch % par.ddpSize() != 0
                ? first.submesh().ops().fromHostInts(ids, Shape.of(batch, seqLen), Layout.REPLICATED)
                : Inputs.ids(first.submesh().ops(), par, ids, batch, seqLen);
        for (Stage s : stages) {
            if (x.submesh() != s.submesh()) x = s.submesh().ops().adopt(x);
            x = s.infer(x);
        }
        return x;
    }

    static DType idsType() {
        return DType.INT32;
    }
}

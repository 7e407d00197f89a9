package dev.ttpipe.actors.tune;

import dev.ttpipe.stages.StageSlice;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * What each piece of a model costs, fitted from measured runs or from a device cost model: per
 * transformer block, the embedding and the head, the time of F, I and W (B = I + W) for one
 * microbatch as a function of the microbatch size, the activation bytes a microbatch keeps, the
 * parameter bytes with their gradients and optimizer state, the transport's hop costs, and the
 * per-step costs outside the pipelined passes (gradient reduction, optimizer step, coordination).
 * Times in seconds. Immutable; the arrays are not copied (the tuner owns them).
 *
 * @param blockF                 per block: forward time as a function of the microbatch size
 * @param embed                  the embedding's F, I, W
 * @param head                   the final norm, LM head and loss's F, I, W
 * @param activationBytesPerBlock bytes one sample keeps per block from F to its W (no recompute)
 * @param inputBytesPerSample    bytes of one sample's hidden state: what a block keeps with recompute,
 *                               and what crosses a pipeline hop
 * @param headBytesPerSample     activation bytes of the head per sample (logits and their gradient)
 * @param stateBytesPerParam     bytes per parameter held for training: weights, gradients, optimizer state
 * @param hop                    the time one hop between ranks takes
 * @param sharedProcessors       ranks share this many processors (cpu backend: cores / threads per rank, times the
 *                               share of them the ranks got during calibration), 0: own devices
 * @param coreShare              that share (other processes took the rest), NaN when not measured
 * @param optimizerSecondsPerParam gradient reduction and optimizer step, per parameter on a rank
 * @param stepOverhead           the rest of a step by the number of microbatches (the runtime's own dispatch,
 *                               messages and coordination, which the simulator does not see): measured step
 *                               minus simulated, as a function of the microbatch count
 */
public record LayerCosts(Curve[] blockF, Curve[] blockI, Curve[] blockW, Curve[] embed, Curve[] head,
                         double activationBytesPerBlock, double inputBytesPerSample, double headBytesPerSample,
                         long[] blockParams, long embedParams, long headParams, double stateBytesPerParam,
                         Hop hop, double sharedProcessors, double coreShare, double optimizerSecondsPerParam, Curve stepOverhead,
                         List<String> notes) {

    /**
     * A cost as a function of the microbatch size: straight lines between the sizes measured (or
     * modelled), the end segments extended beyond them, never below zero. No shape is assumed
     * between the points: small microbatches may cost more per sample, or less.
     */
    public record Curve(int[] sizes, double[] values) {
        public double at(int microbatchSize) {
            if (sizes.length == 1) return Math.max(0, values[0] * microbatchSize / sizes[0]);
            return Math.max(0, between(microbatchSize));
        }

        /** The straight line through the two points around {@code x} (the end segment beyond them), unclamped. */
        double between(int x) {
            int n = sizes.length;
            if (n == 1) return values[0];
            int k = 1;
            while (k < n - 1 && sizes[k] < x) k++;
            double x0 = sizes[k - 1], x1 = sizes[k], y0 = values[k - 1], y1 = values[k];
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
        }

        /** {@code fixed + perSample x size}, as two points. */
        public static Curve constant(double value) {
            return new Curve(new int[]{1, 2}, new double[]{value, value});
        }

        public static Curve affine(double fixed, double perSample) {
            return new Curve(new int[]{1, 2}, new double[]{fixed + perSample, fixed + 2 * perSample});
        }

        /** The curve's value per sample at each size, for the notes. */
        @Override
        public String toString() {
            StringBuilder b = new StringBuilder();
            for (int k = 0; k < sizes.length; k++) {
                b.append(k == 0 ? "" : ", ").append(String.format(Locale.ROOT, "%d: %.3f", sizes[k], values[k] * 1e3));
            }
            return b.append(" ms").toString();
        }
    }

    /**
     * The time of a hop from stage boundary to stage boundary: a latency plus bytes over a bandwidth
     * that may depend on which ranks the hop joins (a Galaxy's chip links, the link between hosts, the
     * links a multi-process run measured before its step 1).
     */
    public interface Hop {
        /** Seconds for {@code bytes} from pipeline rank {@code from} to rank {@code to}, which holds the next stage. */
        double seconds(int from, int to, double bytes);

        static Hop latency(double seconds) {
            return (from, to, bytes) -> seconds;
        }
    }

    /**
     * The same costs on a host whose ranks get {@code share} of the cores that calibration counted on
     * ({@link #sharedProcessors()} x share / {@link #coreShare()}): the host's load at another time.
     */
    public LayerCosts atCoreShare(double share) {
        if (sharedProcessors <= 0 || Double.isNaN(share) || Double.isNaN(coreShare) || coreShare <= 0) return this;
        double full = sharedProcessors / Math.min(1, coreShare);
        return new LayerCosts(blockF, blockI, blockW, embed, head, activationBytesPerBlock, inputBytesPerSample, headBytesPerSample,
                blockParams, embedParams, headParams, stateBytesPerParam, hop, full * Math.min(1, share), share, optimizerSecondsPerParam,
                stepOverhead, notes);
    }

    /** The cost of one kind (0 F, 1 I, 2 W) for a stage holding {@code slice}, microbatch size {@code mbs}. */
    double stageCost(int kind, StageSlice slice, int mbs, boolean recompute) {
        Curve[] perBlock = kind == 0 ? blockF : kind == 1 ? blockI : blockW;
        double t = 0;
        for (int b = slice.firstBlock(); b < slice.endBlock(); b++) {
            t += perBlock[b].at(mbs);
            if (recompute && kind == 1) t += blockF[b].at(mbs);   // the forward runs again before the input gradient
        }
        if (slice.embedding()) t += embed[kind].at(mbs);
        if (slice.head()) t += head[kind].at(mbs);
        return t;
    }

    /** Activation bytes a microbatch keeps on a stage holding {@code slice}. */
    long stageActivationBytes(StageSlice slice, int mbs, boolean recompute) {
        double perBlock = recompute ? inputBytesPerSample : activationBytesPerBlock;
        double bytes = slice.blocks() * perBlock * mbs;
        if (slice.embedding()) bytes += inputBytesPerSample * mbs;
        if (slice.head()) bytes += headBytesPerSample * mbs;
        return (long) bytes;
    }

    /** Parameters held by a stage. */
    long stageParams(StageSlice slice) {
        long p = 0;
        for (int b = slice.firstBlock(); b < slice.endBlock(); b++) p += blockParams[b];
        if (slice.embedding()) p += embedParams;
        if (slice.head()) p += headParams;
        return p;
    }

    /**
     * Seconds of the step outside the passes for ranks holding {@code paramsPerRank}: the optimizer's
     * work per rank (shared among the processors when ranks share them) plus the fixed overhead.
     */
    double stepTail(long[] paramsPerRank, int microbatches) {
        double[] work = new double[paramsPerRank.length];
        for (int r = 0; r < work.length; r++) work[r] = paramsPerRank[r] * optimizerSecondsPerParam;
        return stepOverhead.between(microbatches) + sharedMakespan(work, sharedProcessors);
    }

    /** When independent jobs started together on {@code processors} shared processors all end (0: one each). */
    static double sharedMakespan(double[] work, double processors) {
        double[] w = work.clone();
        Arrays.sort(w);
        if (processors <= 0) return w.length == 0 ? 0 : w[w.length - 1];
        double t = 0, done = 0;
        for (int k = 0; k < w.length; k++) {
            int left = w.length - k;
            double rate = Math.min(1.0, processors / left);
            t += (w[k] - done) / rate;
            done = w[k];
        }
        return t;
    }

    /** Total blocks. */
    int blocks() {
        return blockF.length;
    }
}

package dev.ttpipe.stages;

import dev.ttpipe.device.LossOutput;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.stages.data.Batch;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The non-pipelined trainer every pipelined run must match: all blocks on one submesh, the whole
 * batch at once (or as {@code microbatches} equal slices accumulated in order), then the DDP
 * all-reduce, global-norm clipping and the optimizer step. Same modules, same seeds, same data.
 */
public final class ReferenceTrainer implements AutoCloseable {
    private final Stage stage;
    private final Optimizer optimizer;
    private final LrSchedule lr;
    private final double clipMaxNorm;
    private final int microbatches;

    /** Result of one optimizer step; {@code applied} false when a non-finite loss or gradient kept it from the weights. */
    public record StepResult(int step, double loss, double gradNorm, double lr, long tokens, double seconds, boolean applied) {
    }

    /**
     * @param clipMaxNorm  global-norm clip (<= 0: no clipping)
     * @param microbatches how many equal slices each batch is run in (1: the whole batch at once)
     */
    public ReferenceTrainer(ModelSpec spec, Submesh submesh, Parallelism par, long seed, OptimizerSpec opt,
                            LrSchedule lr, double clipMaxNorm, int microbatches) {
        this.stage = new Stage(spec, new StageSlice(0, 0, 0, spec.numBlocks(), true, true), submesh, par, seed);
        this.optimizer = new Optimizer(opt);
        this.lr = lr;
        this.clipMaxNorm = clipMaxNorm;
        this.microbatches = microbatches;
    }

    public Stage stage() {
        return stage;
    }

    /**
     * One optimizer step over {@code batches} (gradient accumulation: one batch per accumulation
     * step). The loss is the mean over every counted target of every batch.
     */
    public StepResult step(int step, List<Batch> batches) {
        long t0 = System.nanoTime();
        Ops ops = stage.submesh().ops();
        long counted = 0;
        for (Batch b : batches) counted += b.countedTargets(Head.IGNORE_INDEX);
        float scale = (float) (1.0 / Math.max(1, counted));
        double lossSum = 0;
        long tokens = 0;
        for (int a = 0; a < batches.size(); a++) {
            int pass = step * batches.size() + a;
            Batch batch = batches.get(a);
            int mbSize = batch.size() / microbatches;
            for (int m = 0; m < microbatches; m++) {
                Batch mb = microbatches == 1 ? batch : batch.slice(m * mbSize, mbSize);
                Tensor ids = Inputs.ids(ops, stage.parallelism(), mb.inputs(), mb.size(), mb.seqLen());
                Tensor targets = Inputs.ids(ops, stage.parallelism(), mb.targets(), mb.size(), mb.seqLen());
                stage.setTargets(m, targets, scale);
                stage.forward(pass, m, ids);
                LossOutput loss = stage.loss(m);
                lossSum += loss.sum();
                stage.backward(pass, m, null);
                tokens += (long) mb.size() * mb.seqLen();
            }
        }
        stage.reduceGradients();
        double sumSq = stage.gradSumSquares();
        double clip = clipMaxNorm > 0 ? Optimizer.clipFactor(sumSq, clipMaxNorm) : 1.0;
        double rate = lr.at(step);
        boolean applied = Double.isFinite(lossSum) && Double.isFinite(sumSq);
        if (applied) optimizer.step(stage, rate, clip);
        else stage.endStep();               // a non-finite step changes no weight and no optimizer state
        stage.submesh().synchronize();
        return new StepResult(step, lossSum / Math.max(1, counted), Math.sqrt(sumSq), rate, tokens,
                (System.nanoTime() - t0) / 1e9, applied);
    }

    /** Mean loss over {@code batches} without training (validation). */
    public double evaluate(List<Batch> batches) {
        return Evaluation.meanLoss(List.of(stage), batches);
    }

    /** Every parameter's logical value on the host, by name. */
    public Map<String, float[]> weights() {
        Map<String, float[]> out = new LinkedHashMap<>();
        for (Param p : stage.parameters()) out.put(p.name(), p.value().toHost());
        return out;
    }

    @Override
    public void close() {
        stage.close();
    }
}

package dev.ttpipe.actors.inference;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.ModelSource;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.data.Batch;

import java.util.List;
import java.util.function.IntConsumer;

/**
 * A trained model run the way a training job runs it, for {@code ttpipe eval} and {@code ttpipe generate}
 * on P stages: a StageActor per rank on its own submesh, activations between ranks over the transport, the
 * Coordinator driving forward-only passes ({@link JobPlan.Builder#forwardOnly}). The weights are those
 * {@link ModelSource#load} gives the one-process path, split the same way ({@link ModelSource#split}), so
 * both give the same losses and tokens bit for bit. Closing it stops the actors and frees the devices.
 * Not thread-safe: one evaluation or generation at a time.
 */
public final class PipelinedModel implements AutoCloseable {
    private final PipelineRuntime runtime;

    private PipelinedModel(PipelineRuntime runtime) {
        this.runtime = runtime;
    }

    /** For {@link #eval}: batches of {@code batchSize} x {@code seqLen} tokens, up to {@code batchesPerPass} pipelined per pass. */
    public static PipelinedModel forEval(ModelSource src, int stages, Backend backend, SocketType transport, int batchesPerPass,
                                         int batchSize, int seqLen) {
        return start(src, stages, backend, transport, batchesPerPass, batchSize, seqLen);
    }

    /** For {@link #generate}: one-token microbatches, a prompt of up to {@code promptTokens} pipelined in one pass. */
    public static PipelinedModel forGeneration(ModelSource src, int stages, Backend backend, SocketType transport, int promptTokens) {
        return start(src, stages, backend, transport, promptTokens, 1, 1);
    }

    private static PipelinedModel start(ModelSource src, int stages, Backend backend, SocketType transport, int microbatches,
                                        int microbatchSize, int seqLen) {
        List<StageSlice> slices = src.split(stages);
        Integer[] blocks = new Integer[slices.size()];
        for (int i = 0; i < blocks.length; i++) blocks[i] = slices.get(i).blocks();
        // The pipeline's ranks share the cores, as a training job's do.
        int threads = Math.max(1, Runtime.getRuntime().availableProcessors() / stages);
        JobPlan plan = JobPlan.builder(src.spec())
                .name("inference")
                .ranks(stages)
                .forwardOnly()
                .blocksPerRank(blocks)
                .microbatches(microbatches)
                .microbatchSize(microbatchSize)
                .seqLen(seqLen)
                .optimizer(OptimizerSpec.noop())
                .clipMaxNorm(0)
                .backend(backend)
                .meshOptions(MeshOptions.defaults().withThreads(threads))
                .transport(transport)
                .build();
        PipelineRuntime runtime = PipelineRuntime.start(plan);
        try {
            runtime.loadState(src.dir(), 0);
            return new PipelinedModel(runtime);
        } catch (RuntimeException e) {
            runtime.close();
            throw e;
        }
    }

    /** The losses of {@code batches} (each of this model's batch size and sequence length), batch after batch through the ranks. */
    public Coordinator.EvalReport eval(List<Batch> batches) {
        return runtime.eval(batches);
    }

    /**
     * {@code prompt} continued by {@code n} tokens, as {@link dev.ttpipe.stages.Evaluation#generateCached}
     * continues it in one process (only ids below {@code sampledIds} chosen); {@code onToken} sees each new id as it
     * comes (on the Coordinator's thread).
     */
    public Coordinator.GenerateReport generate(int[] prompt, int n, double temperature, int topK, long seed, int sampledIds,
                                               IntConsumer onToken) {
        return runtime.generate(prompt, n, temperature, topK, seed, sampledIds, onToken);
    }

    /** The transport between the ranks ({@code local}, {@code aeron}, {@code fabric}). */
    public String transport() {
        return runtime.transport().name();
    }

    @Override
    public void close() {
        runtime.close();
    }
}

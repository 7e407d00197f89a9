package dev.ttpipe.examples;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.data.TextDataset;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Locale;

/**
 * A 2-stage pipeline built and trained through the public Java API, no YAML: a small GPT split over
 * two ranks (each a Pekko actor with its own emulated device), 1F1B with 4 microbatches, on a
 * sentence repeated into a corpus. Run it with
 * <pre>
 *   mvn -q -pl examples -am package -Dmaven.test.skip=true
 *   java --add-exports java.base/jdk.internal.misc=ALL-UNNAMED \
 *        -cp "examples/target/examples.jar:actors/target/ttpipe.jar:actors/target/lib/*" dev.ttpipe.examples.TwoStagePipeline
 * </pre>
 */
public final class TwoStagePipeline {
    public static void main(String[] args) {
        double[] losses = train(30);
        System.out.printf(Locale.ROOT, "loss %.4f -> %.4f%n", losses[0], losses[losses.length - 1]);
    }

    /** Trains for {@code steps} steps and returns the loss of every step. */
    public static double[] train(int steps) {
        double[] losses;
        String text = "the pipeline keeps every stage busy; the bubble is what remains. ".repeat(200);
        TextDataset data = TextDataset.of(text, 0.1);

        ModelSpec model = ModelSpec.gpt2(data.tokenizer().vocabSize(), 64, 4, 4, 32); // vocab, dim, heads, blocks, max seq
        JobPlan plan = JobPlan.builder(model)
                .ranks(2)                       // two pipeline stages
                .blocksPerRank(2, 2)            // TTML's blocks_per_rank {0: 2, 1: 2}
                .schedule("1f1b")
                .microbatches(4).microbatchSize(4).seqLen(32)
                .optimizer(OptimizerSpec.adamw(3e-3, 0.01))
                .backend(Backend.CPU)
                .build();

        // The training loop of `ttpipe train`: batches, progress, the per-rank table, validation and samples.
        TrainingJob job = TrainingJob.of(plan, data, steps);
        try (PipelineRuntime pipeline = PipelineRuntime.start(plan)) {
            losses = job.run(pipeline, null, System.out).losses();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return losses;
    }
}

package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.ConfigValidator;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.ReferenceTrainer;
import dev.ttpipe.stages.WeightDiff;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A TTML-style config that chooses the model with {@code training_config.model_type: llama} and
 * scales its RoPE with {@code transformer_config.rope_scaling} (TTML's key names) trains a Llama with
 * the scaled frequencies through the pipeline (Pekko actors, two ranks, 1F1B) to the reference
 * trainer's losses and weights, bit for bit; the same config without the scaling trains to weights more than 100
 * times the tolerance away, so a pipeline or reference that dropped the scaling would fail.
 */
class LlamaRopeScalingMatchesReferenceTest {
    static final String TEXT = "to be, or not to be, that is the question: whether 'tis nobler in the mind. ".repeat(30);
    static final int STEPS = 4;

    static final String CONFIG = String.join("\n",
            "training_config:",
            "  model_type: llama",
            "  seed: 11",
            "  batch_size: 8",
            "  learning_rate: 0.01",
            "  transformer_config:",
            "    num_heads: 2",
            "    num_groups: 1",
            "    embedding_dim: 32",
            "    num_blocks: 4",
            "    max_sequence_length: 16",
            "    rope_scaling: {scaling_factor: 32.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_context_length: 16}",
            "device_config: {threads: 1}",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: {0: 1, 1: 3}, num_microbatches: 4, schedule: 1f1b}",
            "");

    /** The pipelined run's losses and final weights. */
    record Run(double[] losses, Map<String, float[]> weights) {
    }

    /**
     * The pipeline's losses and weights against the reference trainer's, step by step, bit for bit (the correctness
     * contract's bit-identity: one thread each; the reference on a mesh of the rank's shape with the same DDP/TP).
     */
    static Run trainAndCompare(TtpipeConfig cfg, TextDataset data) {
        JobPlan plan = JobPlan.from(cfg, data.tokenizer().vocabSize());
        double[] losses = new double[STEPS];
        try (PipelineRuntime runtime = PipelineRuntime.start(plan);
             MeshDevice refMesh = Backends.open("cpu", plan.rankMesh(), MeshOptions.defaults().withThreads(1));
             ReferenceTrainer ref = new ReferenceTrainer(plan.model(), refMesh.asSubmesh(), plan.parallelism(), plan.seed(),
                     plan.optimizer(), plan.lr(), plan.clipMaxNorm(), plan.microbatches())) {
            for (int step = 0; step < STEPS; step++) {
                List<Batch> b = List.of(data.trainBatch(plan.seed(), step, plan.batchSize(), plan.seqLen()));
                double pipelined = runtime.step(step, b).loss();
                double reference = ref.step(step, b).loss();
                assertEquals(Double.doubleToRawLongBits(reference), Double.doubleToRawLongBits(pipelined),
                        "loss of step " + step + ": pipeline " + pipelined + ", reference " + reference);
                losses[step] = pipelined;
            }
            Map<String, float[]> weights = runtime.weights(), expected = ref.weights();
            assertEquals(expected.keySet(), weights.keySet());
            for (Map.Entry<String, float[]> e : expected.entrySet()) {
                float[] got = weights.get(e.getKey());
                for (int i = 0; i < got.length; i++) {
                    assertEquals(Float.floatToRawIntBits(e.getValue()[i]), Float.floatToRawIntBits(got[i]), e.getKey() + "[" + i
                            + "]: pipeline " + got[i] + ", reference " + e.getValue()[i]);
                }
            }
            return new Run(losses, weights);
        }
    }

    @Test
    void scaledLlamaTrainsThroughThePipelineToTheReferenceTrainersLossesAndWeights() {
        TextDataset data = TextDataset.of(TEXT, 0.1);
        TtpipeConfig scaled = ConfigLoader.read(CONFIG, "llama.yaml", null);
        ConfigValidator.validate(scaled);
        ModelSpec model = JobPlan.model(scaled, data.tokenizer().vocabSize());
        assertEquals(ModelSpec.ModelType.LLAMA, model.type(), "training_config.model_type: llama builds a Llama");
        assertEquals(new RopeFrequencies.Llama3Scaling(32, 1, 4, 16), model.ropeScaling());

        Run withScaling = trainAndCompare(scaled, data);

        TtpipeConfig plain = ConfigLoader.read(CONFIG.replaceAll("(?m)^ *rope_scaling:.*\n", ""), "plain.yaml", null);
        ConfigValidator.validate(plain);
        assertEquals(null, JobPlan.model(plain, data.tokenizer().vocabSize()).ropeScaling());
        Run without = trainAndCompare(plain, data);
        WeightDiff apart = WeightDiff.compare(withScaling.weights(), without.weights());
        System.out.println("losses with rope_scaling " + Arrays.toString(withScaling.losses()) + ", without "
                + Arrays.toString(without.losses()) + "; weights apart by " + apart.maxRelative());
        assertTrue(apart.maxRelative() > 100 * 1e-5, "the scaled frequencies move the weights far beyond the tolerance: "
                + apart.maxRelative() + " in " + apart.worstParam());
    }
}

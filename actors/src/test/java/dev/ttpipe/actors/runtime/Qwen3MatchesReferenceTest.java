package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.ConfigValidator;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A Qwen3 chosen by {@code model_type: qwen3} in the YAML (per-head q/k norms, heads of 16 where
 * embedding_dim / num_heads is 8, grouped-query attention, an untied head) trains through the pipeline
 * (Pekko actors, two ranks, 1F1B) to the reference trainer's losses and weights bit for bit, as a Llama
 * does; and so it does with tensor parallelism over two devices per rank (each device normalising its
 * own heads, the q/k norm gains' gradients summed over them), against the reference trainer on a mesh
 * of the same shape. That TP and one device agree to float tolerance is ParallelEquivalenceTest's.
 */
class Qwen3MatchesReferenceTest {
    static final String CONFIG = String.join("\n",
            "training_config:",
            "  model_type: qwen3",
            "  seed: 5",
            "  batch_size: 8",
            "  learning_rate: 0.01",
            "  transformer_config:",
            "    num_heads: 4",
            "    num_groups: 2",
            "    head_dim: 16",
            "    embedding_dim: 32",
            "    num_blocks: 4",
            "    max_sequence_length: 16",
            "device_config: {threads: 1}",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: {0: 1, 1: 3}, num_microbatches: 4, schedule: 1f1b}",
            "");

    static TtpipeConfig load(String yaml) {
        TtpipeConfig cfg = ConfigLoader.read(yaml, "qwen3.yaml", null);
        ConfigValidator.validate(cfg);
        return cfg;
    }

    @Test
    void qwen3TrainsThroughThePipelineToTheReferenceTrainersBits() {
        TextDataset data = TextDataset.of(LlamaRopeScalingMatchesReferenceTest.TEXT, 0.1);
        TtpipeConfig cfg = load(CONFIG);
        ModelSpec model = JobPlan.model(cfg, data.tokenizer().vocabSize());
        assertEquals(ModelSpec.ModelType.QWEN3, model.type());
        assertTrue(model.qkNorm() && model.headDim() == 16 && model.attentionDim() == 64 && !model.weightTying(), model.toString());
        LlamaRopeScalingMatchesReferenceTest.Run run = LlamaRopeScalingMatchesReferenceTest.trainAndCompare(cfg, data);
        assertTrue(run.losses()[LlamaRopeScalingMatchesReferenceTest.STEPS - 1] < run.losses()[0], "the loss falls");
        assertFalse(run.weights().get("blocks.3.attn.q_norm.gamma")[0] == 1f, "the q norm's gain trains");
    }

    @Test
    void qwen3WithTensorParallelHeadsTrainsThroughThePipelineToTheReferenceTrainersBitsOnTheSameMesh() {
        TextDataset data = TextDataset.of(LlamaRopeScalingMatchesReferenceTest.TEXT, 0.1);
        TtpipeConfig cfg = load(CONFIG.replace("device_config: {threads: 1}",
                "device_config: {threads: 1, enable_tp: true, mesh_shape: [1, 2]}"));
        assertTrue(JobPlan.from(cfg, data.tokenizer().vocabSize()).parallelism().tp());
        LlamaRopeScalingMatchesReferenceTest.trainAndCompare(cfg, data);
    }
}

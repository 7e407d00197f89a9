package dev.ttpipe.actors.cli;

import dev.ttpipe.stages.checkpoint.SafeTensors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;

import static dev.ttpipe.actors.cli.CliTest.config;
import static dev.ttpipe.actors.cli.CliTest.run;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * weight_tying across pipeline stages (Megatron: the last stage keeps a copy of the token embedding and
 * the two gradients are summed every step) against the reference trainer, whose single stage shares one
 * matrix: P=1 and P=4, from ttpipe's own initialisation and from a tied Hugging Face export.
 */
class TiedPipelineTest {
    static String job(Path runs, int ranks, String extra) {
        String split = ranks == 1 ? "{0: 4}" : "{0: 1, 1: 1, 2: 1, 3: 1}";
        return "training_config: {batch_size: 4, max_steps: 3, learning_rate: 0.01, runs_dir: " + runs + extra + "}\n"
                + "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 4, max_sequence_length: 16, weight_tying: true}\n"
                + "multihost_config:\n  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: " + split
                + ", num_microbatches: 2, schedule: 1f1b}\n";
    }

    @Test
    void tiedEmbeddingsAcrossFourStagesMatchTheReferenceAndStayEqual(@TempDir Path dir) throws Exception {
        Path runs = dir.resolve("runs");
        for (int p : new int[]{1, 4}) {
            CliTest.Result v = run("verify", config(dir, job(runs, p, "")).toString(), "--steps", "3");
            assertEquals(0, v.code(), "P=" + p + "\n" + v.out() + v.err());
        }
        CliTest.Result t = run("train", config(dir, job(runs, 4, "")).toString());
        assertEquals(0, t.code(), t.err());
        Path ckpt;
        try (var s = Files.list(runs)) {
            ckpt = s.findFirst().orElseThrow().resolve("checkpoints/step-000003");
        }
        try (SafeTensors.Reader first = new SafeTensors.Reader(ckpt.resolve("stage-00.safetensors"));
             SafeTensors.Reader last = new SafeTensors.Reader(ckpt.resolve("stage-03.safetensors"))) {
            assertTrue(!last.tensors().containsKey("lm_head.weight"), "a tied head writes no lm_head");
            assertArrayEquals(first.read("wte.weight"), last.read("wte.weight"), "the two copies after 3 AdamW steps");
        }
        Path hf = dir.resolve("hf");
        assertEquals(0, run("export", ckpt.toString(), "--out", hf.toString()).code());
        assertTrue(Files.readString(hf.resolve("config.json")).contains("\"tie_word_embeddings\": true"));
        for (int p : new int[]{1, 4}) {
            String fromHf = job(runs, p, ", init_from: " + hf).replaceAll("transformer_config: \\{.*\\}\n", "");
            CliTest.Result v = run("verify", config(dir, fromHf).toString(), "--steps", "3");
            assertEquals(0, v.code(), "init_from, P=" + p + "\n" + v.out() + v.err());
            assertTrue(v.out().contains("both initialised from"), v.out());
        }
    }
}

package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static dev.ttpipe.actors.cli.CliTest.run;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * TTML's own config files as its users bring them: a training config whose {@code model_config} names a
 * separate model file, a char tokenizer with TTML's padded {@code vocab_size: 96}.
 */
class TtmlConfigTest {
    /** TTML's configs/model_configs/nanogpt.yaml, made small. */
    static final String MODEL = String.join("\n",
            "transformer_config:",
            "  runner_type: memory_efficient",
            "  num_heads: 2",
            "  embedding_dim: 16",
            "  dropout_prob: 0.2",
            "  num_blocks: 2",
            "  vocab_size: 96",
            "  max_sequence_length: 16",
            "  experimental:",
            "    use_composite_layernorm: false",
            "");

    /** TTML's configs/training_configs/training_shakespeare_nanogpt.yaml, made small. */
    static final String TRAINING = String.join("\n",
            "training_config:",
            "  project_name: \"tt_train_nano_gpt\"",
            "  model_type: \"gpt2\"",
            "  seed: 5489",
            "  model_save_interval: 2",
            "  batch_size: 4",
            "  num_epochs: 1",
            "  max_steps: 2",
            "  learning_rate: 0.0003",
            "  weight_decay: 0.01",
            "  use_moreh_adamw: true",
            "  use_clip_grad_norm: false",
            "  tokenizer_type: \"char\"",
            "  data_path: \"DATA\"",
            "  model_config: \"MODEL\"",
            "  runs_dir: \"RUNS\"",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 2, blocks_per_rank: {0: 1, 1: 1}, num_microbatches: 2}",
            "");

    /**
     * 96 ids for the corpus's few characters: training, the samples after it, and `generate` and `eval` on
     * the run (which find the characters in its trainer_state.json) never meet a padding id, and run.json
     * ends "finished".
     */
    @Test
    void aVocabularyPaddedBeyondTheCharactersTrainsSamplesGeneratesAndEvaluates(@TempDir Path dir) throws Exception {
        Path data = Files.writeString(dir.resolve("input.txt"), TokenDataCliTest.corpus());
        Path model = Files.writeString(Files.createDirectories(dir.resolve("configs/model_configs")).resolve("nanogpt.yaml"), MODEL);
        Path cfg = Files.writeString(Files.createDirectories(dir.resolve("configs/training_configs")).resolve("shakespeare.yaml"),
                TRAINING.replace("DATA", data.toString()).replace("MODEL", model.toString())
                        .replace("RUNS", dir.resolve("runs").toString()));
        Path runDir = dir.resolve("run");
        CliTest.Result r = run("train", cfg.toString(), "--run-dir", runDir.toString());
        assertEquals(0, r.code(), r.out() + r.err());
        assertTrue(r.out().contains("vocab 96") && r.out().contains("samples ("), r.out());
        assertTrue(CliTest.joined(r.err()).contains("use_moreh_adamw: true read as ttpipe's AdamW"), r.err());
        assertEquals(List.of(), EightyColumnsTest.wider(r.err()), "the note on use_moreh_adamw wraps at 80 columns");
        assertTrue(Files.readString(runDir.resolve("run.json")).contains("\"status\": \"finished\""));

        CliTest.Result g = run("generate", runDir.toString(), "--prompt", "The sum", "--max-new-tokens", "8", "--temperature", "1.5",
                "--top-k", "0");
        assertEquals(0, g.code(), g.out() + g.err());
        assertTrue(g.out().startsWith("The sum") && g.out().strip().length() > "The sum".length(), g.out());
        CliTest.Result e = run("eval", runDir.toString(), "--data", data.toString(), "--batches", "1");
        assertEquals(0, e.code(), e.out() + e.err());
        assertTrue(e.out().contains("loss "), e.out());
    }

    /**
     * Run from TTML's root, its config names {@code configs/model_configs/nanogpt.yaml} and {@code data/...} from
     * there: relative paths resolve against the working directory first, then the config file's folder; a path in
     * neither is one line naming the key, the value and both places looked.
     */
    @Test
    void relativePathsResolveFromTheWorkingDirectoryThenTheConfigsFolder() throws Exception {
        Path cwd = Path.of("").toAbsolutePath();
        Path root = Files.createTempDirectory(Files.createDirectories(cwd.resolve("target")), "ttml-root");
        try {
            Path models = Files.createDirectories(root.resolve("configs/model_configs"));
            Files.writeString(models.resolve("nanogpt.yaml"), MODEL);
            Path trainingDir = Files.createDirectories(root.resolve("configs/training_configs"));
            Files.writeString(Files.createDirectories(root.resolve("data")).resolve("input.txt"), TokenDataCliTest.corpus());
            Files.writeString(trainingDir.resolve("input.txt"), "beside the config");
            String fromRoot = cwd.relativize(root) + "/";                   // as TTML's root is to a user who runs from it
            Path cfg = Files.writeString(trainingDir.resolve("ttml.yaml"), TRAINING
                    .replace("MODEL", fromRoot + "configs/model_configs/nanogpt.yaml").replace("DATA", fromRoot + "data/input.txt")
                    .replace("RUNS", root.resolve("runs").toString()));
            TtpipeConfig c = ConfigLoader.load(cfg);
            assertEquals(96, c.transformer.vocabSize, "the model config, from the working directory");
            assertEquals(fromRoot + "data/input.txt", c.training.dataPath, "the working directory's file wins");

            Files.writeString(cfg, Files.readString(cfg).replace(fromRoot + "data/input.txt", "input.txt")
                    .replace(fromRoot + "configs/model_configs/", "../model_configs/"));
            c = ConfigLoader.load(cfg);
            assertEquals(96, c.transformer.vocabSize, "the model config, beside the config");
            assertEquals(trainingDir.resolve("input.txt").toString(), c.training.dataPath, "not in the working directory: beside the config");

            Files.writeString(cfg, Files.readString(cfg).replace("data_path: \"input.txt\"", "data_path: \"data/nope.txt\"")
                    .replace("../model_configs/", "configs/model_configs/"));
            CliTest.Result r = run("train", cfg.toString());
            CliTest.assertOneLineBadInput(r, cfg + ":15: training_config.model_config: 'configs/model_configs/nanogpt.yaml' given,"
                    + " expected a readable model config YAML; looked for " + cwd.resolve("configs/model_configs/nanogpt.yaml")
                    + " (from the working directory), then " + trainingDir.resolve("configs/model_configs/nanogpt.yaml") + " (beside the config)");
            Files.writeString(cfg, Files.readString(cfg).replace("configs/model_configs/", "../model_configs/"));
            r = run("train", cfg.toString());
            CliTest.assertOneLineBadInput(r, cfg + ":14: training_config.data_path: 'data/nope.txt' given, expected a UTF-8 text"
                    + " file or token files (.bin); looked for " + cwd.resolve("data/nope.txt") + " (from the working directory), then "
                    + trainingDir.resolve("data/nope.txt") + " (beside the config)");
        } finally {
            try (var walk = Files.walk(root)) {
                for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) Files.delete(p);
            }
        }
    }
}

package dev.ttpipe.actors.train;

import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.stages.data.ArithmeticCorpus;
import dev.ttpipe.stages.data.TextDataset;

import java.io.IOException;
import java.nio.file.Path;

/** The training text of a job: the file the config names, or the arithmetic corpus ttpipe generates itself. */
public record TrainingData(TextDataset dataset, String description, boolean arithmetic) {
    /**
     * Largest operand of the generated corpus: single digits, so that the one-minute default run learns
     * the sums (measured: all 8 samples right after 300 steps; with operands up to 19, 2 to 5 of 8).
     */
    public static final int ARITHMETIC_MAX = 9;

    public static TrainingData load(TtpipeConfig cfg) {
        TtpipeConfig.TrainingConfig t = cfg.training;
        int seq = cfg.transformer.effectiveSequenceLength();
        if (t.dataPath == null) {
            String text = ArithmeticCorpus.generate(t.seed, 30_000, ARITHMETIC_MAX);
            return new TrainingData(TextDataset.of(text, t.validationFraction), "generated arithmetic corpus (30000 lines such as 7+8=15)", true);
        }
        String text;
        try {
            text = TextDataset.readUtf8(Path.of(t.dataPath));
        } catch (IOException e) {
            throw new ConfigException(cfg.origins.where("training_config.data_path") + ": " + t.dataPath
                    + " cannot be read (" + e.getMessage() + "), expected a UTF-8 text file");
        }
        TextDataset data = TextDataset.of(text, t.validationFraction);
        int need = seq + 2;
        if (data.trainTokens() < need || (t.validationFraction > 0 && data.validationTokens() < need)) {
            throw new ConfigException(cfg.origins.where("training_config.data_path") + ": " + t.dataPath + " has "
                    + text.length() + " characters, too few for sequences of " + seq + " with validation_fraction "
                    + t.validationFraction + ", expected at least " + (int) Math.ceil(need / Math.max(0.01, Math.min(t.validationFraction, 1 - t.validationFraction)))
                    + " characters");
        }
        return new TrainingData(data, t.dataPath + " (" + text.length() + " characters, " + data.tokenizer().vocabSize()
                + " distinct)", false);
    }
}

package dev.ttpipe.actors.train;

import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.stages.data.ArithmeticCorpus;
import dev.ttpipe.stages.data.CharTokenizer;
import dev.ttpipe.stages.data.Gpt2Tokenizer;
import dev.ttpipe.stages.data.HfTokenizer;
import dev.ttpipe.stages.data.TextDataset;
import dev.ttpipe.stages.data.TokenFiles;
import dev.ttpipe.stages.data.TokenSource;
import dev.ttpipe.stages.data.Tokenizer;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * The training data of a job: a text file, token files (memory mapped), or the arithmetic corpus
 * ttpipe generates itself, with its tokenizer ({@code char} or GPT-2's {@code bpe}).
 */
public record TrainingData(TextDataset dataset, String description, boolean arithmetic) {
    /**
     * Largest operand of the generated corpus: single digits, so that the one-minute default run learns
     * the sums (measured: all 8 samples right after 300 steps; with operands up to 19, 2 to 5 of 8).
     */
    public static final int ARITHMETIC_MAX = 9;

    private static final String DATA = "training_config.data_path";

    public static TrainingData load(TtpipeConfig cfg) {
        TtpipeConfig.TrainingConfig t = cfg.training;
        int seq = cfg.transformer.effectiveSequenceLength();
        boolean bpe = "bpe".equals(t.tokenizerType);
        if (t.dataPath == null) {
            String text = ArithmeticCorpus.generate(t.seed, 30_000, ARITHMETIC_MAX);
            TextDataset data = bpe ? new TextDataset(text, bpe(cfg), t.validationFraction) : TextDataset.of(text, t.validationFraction);
            return new TrainingData(data, "generated arithmetic corpus (30000 lines such as 7+8=15)", true);
        }
        TrainingData data = TokenFiles.isTokenPath(t.dataPath) ? tokenFiles(cfg, bpe) : text(cfg, bpe);
        long need = seq + 2;
        if (data.dataset().trainTokens() < need || (t.validationFraction > 0 && data.dataset().validationTokens() < need)) {
            throw new ConfigException(cfg.origins.where(DATA) + ": " + t.dataPath + " gives " + data.dataset().trainTokens()
                    + " training and " + data.dataset().validationTokens() + " validation tokens, too few for sequences of " + seq
                    + ", expected at least " + need + " of each (more text, a smaller validation_fraction or sequence_length)");
        }
        return data;
    }

    private static TrainingData text(TtpipeConfig cfg, boolean bpe) {
        TtpipeConfig.TrainingConfig t = cfg.training;
        String text = readText(cfg, DATA, t.dataPath);
        String val = t.valDataPath == null ? null : readText(cfg, "training_config.val_data_path", t.valDataPath);
        Tokenizer tok = bpe ? bpe(cfg)
                : t.tokenizerPath != null ? vocabFile(cfg, Path.of(t.tokenizerPath), "training_config.tokenizer_path")
                : CharTokenizer.fromText(val == null ? text : text + val);
        encodable(cfg, tok, text, DATA, t.dataPath);
        TextDataset data;
        if (val == null) {
            data = new TextDataset(text, tok, t.validationFraction);
        } else {
            encodable(cfg, tok, val, "training_config.val_data_path", t.valDataPath);
            data = TextDataset.ofTokens(tok, TokenSource.of(tok.encode(text)), TokenSource.of(tok.encode(val)), 0);
        }
        return new TrainingData(data, t.dataPath + " (" + text.length() + " characters, " + tok.name() + " tokenizer, "
                + tok.vocabSize() + " ids)", false);
    }

    private static TrainingData tokenFiles(TtpipeConfig cfg, boolean bpe) {
        TtpipeConfig.TrainingConfig t = cfg.training;
        List<Path> files = TokenFiles.resolve(t.dataPath, false);
        if (files.isEmpty()) {
            notFound(cfg, DATA, t.dataPath, "token files (.bin)");
            throw new ConfigException(cfg.origins.where(DATA) + ": " + t.dataPath + " names no token files, expected .bin files"
                    + " (nanoGPT uint16 or llm.c; ttpipe prepare writes them)");
        }
        Tokenizer tok = bpe ? bpe(cfg) : charTokenizerOf(cfg, files.get(0));
        TokenFiles train = TokenFiles.open(files).checkVocabulary(tok.vocabSize());
        TokenFiles val = null;
        if (t.valDataPath != null) {
            List<Path> v = TokenFiles.resolve(t.valDataPath, Files.isDirectory(Path.of(t.valDataPath)));
            if (v.isEmpty()) {
                throw new ConfigException(cfg.origins.where("training_config.val_data_path") + ": " + t.valDataPath
                        + " names no token files, expected .bin files");
            }
            val = TokenFiles.open(v).checkVocabulary(tok.vocabSize());
        } else if (Files.isDirectory(Path.of(t.dataPath))) {
            List<Path> v = TokenFiles.resolve(t.dataPath, true);
            if (!v.isEmpty()) val = TokenFiles.open(v).checkVocabulary(tok.vocabSize());
        }
        TextDataset data = TextDataset.ofTokens(tok, train, val, t.validationFraction);
        String valWhere = val != null ? val.files().size() + " validation file(s)" : "held-out " + t.validationFraction;
        return new TrainingData(data, t.dataPath + " (" + files.size() + " token file(s), " + train.format() + ", "
                + TrainingJob.human(train.size()) + " tokens, " + valWhere + ", " + tok.name() + " tokenizer, " + tok.vocabSize()
                + " ids)", false);
    }

    /** tokenizer_type bpe: GPT-2's (bundled), or a Hugging Face tokenizer.json that tokenizer_path names (the file or its folder). */
    static Tokenizer bpe(TtpipeConfig cfg) {
        String p = cfg.training.tokenizerPath;
        if (p == null || TtpipeConfig.BUNDLED_TOKENIZERS.contains(p)) return Gpt2Tokenizer.get();
        notFound(cfg, "training_config.tokenizer_path", p, "a tokenizer.json, its folder, or gpt2");
        Path file = Files.isDirectory(Path.of(p)) ? Path.of(p).resolve("tokenizer.json") : Path.of(p);
        return Files.isRegularFile(file) ? HfTokenizer.load(file) : Gpt2Tokenizer.get();     // a prepare folder: gpt2
    }

    /** The char tokenizer of token files: tokenizer_path, else the vocab.txt beside them (ttpipe prepare writes it). */
    private static Tokenizer charTokenizerOf(TtpipeConfig cfg, Path firstFile) {
        TtpipeConfig.TrainingConfig t = cfg.training;
        if (t.tokenizerPath != null) return vocabFile(cfg, Path.of(t.tokenizerPath), "training_config.tokenizer_path");
        Path beside = firstFile.toAbsolutePath().getParent().resolve("vocab.txt");
        if (Files.isRegularFile(beside)) return vocabFile(cfg, beside, DATA);
        throw new ConfigException(cfg.origins.where(DATA) + ": " + t.dataPath + " holds token files with no vocab.txt beside"
                + " them, expected tokenizer_type: bpe (GPT-2 token ids), or tokenizer_path naming the char vocabulary");
    }

    private static Tokenizer vocabFile(TtpipeConfig cfg, Path file, String key) {
        notFound(cfg, key, file.toString(), "a char vocabulary (vocab.txt)");
        try {
            return CharTokenizer.load(file);
        } catch (IOException | RuntimeException e) {
            throw new ConfigException(cfg.origins.where(key) + ": " + file + " cannot be read as a char vocabulary ("
                    + e.getMessage() + "), expected one hex code point per line (vocab.txt)");
        }
    }

    private static String readText(TtpipeConfig cfg, String key, String path) {
        notFound(cfg, key, path, "a UTF-8 text file or token files (.bin)");
        try {
            return TextDataset.readUtf8(Path.of(path));
        } catch (IOException e) {
            throw new ConfigException(cfg.origins.where(key) + ": " + path + " cannot be read (" + e.getMessage()
                    + "), expected a UTF-8 text file or token files (.bin)");
        }
    }

    /** A relative path the config file named and that is in none of the places looked: one line naming them all. */
    private static void notFound(TtpipeConfig cfg, String key, String path, String expected) {
        String nowhere = cfg.origins.notFound(key, expected);
        if (nowhere != null && !Files.exists(Path.of(path))) throw new ConfigException(nowhere);
    }

    private static void encodable(TtpipeConfig cfg, Tokenizer tok, String text, String key, String path) {
        if (tok.canEncode(text)) return;
        try {
            tok.encode(text);
        } catch (IllegalArgumentException e) {
            throw new ConfigException(cfg.origins.where(key) + ": " + path + ": " + e.getMessage());
        }
    }
}

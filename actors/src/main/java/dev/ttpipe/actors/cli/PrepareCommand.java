package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.stages.data.CorpusPreparation;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;

/**
 * {@code ttpipe prepare TEXT --tokenizer char|gpt2|FILE|DIR --out DIR}: tokenises a text corpus into llm.c
 * token files (uint16, or uint32 for a vocabulary beyond 65,536 ids), streaming (a corpus larger than memory
 * works), with a progress line.
 */
@Command(name = "prepare",
        mixinStandardHelpOptions = true,
        description = {"Tokenize a UTF-8 text into train/val token files (llm.c .bin), streaming.",
                "The files have llm.c's 1024-byte header and uint16 tokens, or uint32 where the vocabulary has more than",
                "65,536 ids (Llama 3, Qwen3); the text is never held in memory whole. Train on them with data_path: DIR."},
        footer = {"", "Examples:",
                "  ttpipe prepare input.txt --tokenizer gpt2 --out data/shakespeare     # then tokenizer_type: bpe",
                "  ttpipe prepare input.txt --tokenizer char --out data/chars --val-fraction 0.05",
                "  ttpipe prepare input.txt --tokenizer models/llama3/tokenizer.json --out data/llama3    # uint32 ids",
                "  ttpipe prepare input.txt --out data/shakespeare --json     # progress on stderr, one JSON object on stdout"})
public final class PrepareCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "TEXT", description = "A UTF-8 text file.")
    Path text;

    @Option(names = "--tokenizer", paramLabel = "NAME", defaultValue = "gpt2",
            description = {"gpt2 (GPT-2's BPE, bundled), char (the text's characters; writes vocab.txt), or a Hugging Face",
                    "tokenizer.json or its folder (copied to DIR). Default ${DEFAULT-VALUE}."})
    String tokenizer;

    @Option(names = "--out", paramLabel = "DIR", required = true, description = "Where train_000000.bin, val_000000.bin go.")
    Path out;

    @Option(names = "--val-fraction", paramLabel = "F", defaultValue = "0.1",
            description = "The last fraction of the text that becomes val_*.bin (default ${DEFAULT-VALUE}).")
    double valFraction;

    @Option(names = "--json", description = "Print one JSON object (tokenizer, token counts, files) instead of text.")
    boolean json;

    @Override
    public Integer call() throws Exception {
        if (!List.of("gpt2", "char").contains(tokenizer) && !Files.isRegularFile(Path.of(tokenizer))
                && !Files.isRegularFile(Path.of(tokenizer).resolve("tokenizer.json"))) {
            throw new UserInputException("--tokenizer: '" + tokenizer + "' given, expected gpt2, char, a tokenizer.json or a folder"
                    + " holding one");
        }
        if (!Files.isRegularFile(text)) throw new UserInputException(text + ": no such file, expected a UTF-8 text file");
        if (!(valFraction >= 0 && valFraction < 1)) {
            throw new UserInputException("--val-fraction: " + valFraction + " given, expected 0 <= F < 1");
        }
        PrintStream err = System.err;
        // on a terminal a line redrawn in place; in a log (a file, a pipe) a line every 10 s and the last
        boolean tty = System.console() != null && !"dumb".equals(System.getenv("TERM"));
        long t0 = System.nanoTime();
        long[] last = {tty ? 0 : t0};
        CorpusPreparation.Result r = CorpusPreparation.prepare(text, tokenizer, out, valFraction, (done, total, tokens) -> {
            long now = System.nanoTime();
            if (now - last[0] < (tty ? 250_000_000L : 10_000_000_000L) && done < total) return;
            last[0] = now;
            double s = Math.max(1e-9, (now - t0) / 1e9);
            err.printf(Locale.ROOT, (tty ? "\r" : "") + "prepare: %3.0f%%  %s of %s  %s tokens  %.1f MB/s" + (tty ? "   " : "%n"),
                    100.0 * done / Math.max(1, total), mb(done), mb(total), human(tokens), done / 1e6 / s);
            err.flush();
        });
        if (tty) err.println();
        double s = (System.nanoTime() - t0) / 1e9;
        String width = r.tokenizer().vocabSize() <= 65536 ? "uint16" : "uint32";
        if (json) {
            System.out.println("{\"text\":" + Json.str(text.toString()) + ",\"bytes\":" + r.bytes() + ",\"tokenizer\":"
                    + Json.str(r.tokenizer().name()) + ",\"vocab_size\":" + r.tokenizer().vocabSize() + ",\"token_type\":"
                    + Json.str(width) + ",\"out\":"
                    + Json.str(out.toString()) + ",\"train_tokens\":" + r.trainTokens() + ",\"train_files\":" + paths(r.trainFiles())
                    + ",\"val_tokens\":" + r.valTokens() + ",\"val_files\":" + paths(r.valFiles()) + ",\"seconds\":" + Json.num(s) + "}");
            return Main.EXIT_OK;
        }
        System.out.printf(Locale.ROOT, "%s: %s, %s tokenizer (%d ids): %s training tokens in %d file(s), %s validation tokens"
                        + " in %d file(s) under %s (%s tokens, %.1f s)%n", text, mb(r.bytes()), r.tokenizer().name(), r.tokenizer().vocabSize(),
                human(r.trainTokens()), r.trainFiles().size(), human(r.valTokens()), r.valFiles().size(), out, width, s);
        String how = switch (r.tokenizer().name()) {
            case "gpt2" -> "  tokenizer_type: bpe";
            case "hf" -> "  tokenizer_type: bpe  tokenizer_path: " + out;
            default -> "";
        };
        System.out.println("train on them: data_path: " + out + how);
        return Main.EXIT_OK;
    }

    private static String paths(List<Path> files) {
        StringBuilder j = new StringBuilder("[");
        for (int i = 0; i < files.size(); i++) j.append(i == 0 ? "" : ",").append(Json.str(files.get(i).toString()));
        return j.append(']').toString();
    }

    private static String mb(long bytes) {
        return String.format(Locale.ROOT, "%.1f MB", bytes / 1e6);
    }

    private static String human(long n) {
        return TrainingJob.human(n);
    }
}

package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.train.ModelSource;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.Evaluation;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.data.Tokenizer;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;

/** {@code ttpipe generate MODEL --prompt TEXT}: continues a prompt, streaming tokens as they come, with a key/value cache. */
@Command(name = "generate",
        mixinStandardHelpOptions = true,
        description = {"Continue a prompt with a checkpoint or Hugging Face model, printing tokens as they come.",
                "A key/value cache keeps each token's keys and values, so the prefix is not run again per token."},
        footer = {"", "Examples:",
                "  ttpipe generate runs/a/checkpoints/step-000300 --prompt '3+4=' --max-new-tokens 8 --temperature 0",
                "  ttpipe generate exported/gpt2 --prompt 'ROMEO:' --top-k 50 --seed 7"})
public final class GenerateCommand implements Callable<Integer> {
    @Mixin
    ModelOptions model = new ModelOptions();

    @Option(names = "--prompt", paramLabel = "TEXT", required = true, description = "The text to continue.")
    String prompt;

    @Option(names = "--max-new-tokens", paramLabel = "N", defaultValue = "100", description = "Tokens to add (default ${DEFAULT-VALUE}).")
    int maxNewTokens;

    @Option(names = "--temperature", paramLabel = "T", defaultValue = "0.8", description = "0: greedy (default ${DEFAULT-VALUE}).")
    double temperature;

    @Option(names = "--top-k", paramLabel = "K", defaultValue = "200", description = "Sample among the K likeliest (0: all; default ${DEFAULT-VALUE}).")
    int topK;

    @Option(names = "--seed", paramLabel = "S", defaultValue = "1337", description = "Sampling seed (default ${DEFAULT-VALUE}).")
    long seed;

    @Option(names = "--no-kv-cache", description = "Run the whole context again for every token (the slow reference).")
    boolean noCache;

    @Override
    public Integer call() throws Exception {
        if (maxNewTokens < 1) throw new UserInputException("--max-new-tokens: " + maxNewTokens + " given, expected a positive integer");
        if (temperature < 0) throw new UserInputException("--temperature: " + temperature + " given, expected >= 0");
        ModelSource src = model.open();
        Tokenizer tok = src.tokenizer();
        if (tok == null) throw new UserInputException(src.description() + ": no tokenizer known, expected --tokenizer gpt2 or a char vocab.txt");
        int[] ids;
        try {
            ids = tok.encode(prompt);
        } catch (IllegalArgumentException e) {
            throw new UserInputException("--prompt: " + e.getMessage());
        }
        if (ids.length == 0) throw new UserInputException("--prompt: empty, expected some text");
        PrintStream out = System.out;
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults())) {
            List<Stage> loaded = src.load(mesh.asSubmesh(), model.stages);
            try {
                out.print(prompt);
                out.flush();
                long t0 = System.nanoTime();
                int[] all;
                if (noCache) {
                    all = Evaluation.generate(loaded, ids, maxNewTokens, temperature, topK, seed, tok.vocabSize());
                    out.print(tok.decode(Arrays.copyOfRange(all, ids.length, all.length)));
                } else {
                    Streamer s = new Streamer(tok, out);
                    all = Evaluation.generateCached(loaded, ids, maxNewTokens, temperature, topK, seed, tok.vocabSize(), s::accept);
                }
                double sec = (System.nanoTime() - t0) / 1e9;
                out.println();
                System.err.printf(Locale.ROOT, "generate: %d new tokens in %.2f s, %.1f tokens/s (%s, %s)%n", all.length - ids.length, sec,
                        (all.length - ids.length) / sec, noCache ? "no cache: the whole context per token" : "key/value cache",
                        src.description());
            } finally {
                loaded.forEach(Stage::close);
            }
        }
        return Main.EXIT_OK;
    }

    /** Prints each token's text as it comes; a BPE token that ends inside a character waits for the rest of it. */
    private static final class Streamer {
        private final Tokenizer tok;
        private final PrintStream out;
        private final ArrayList<Integer> ids = new ArrayList<>();
        private int printed;

        Streamer(Tokenizer tok, PrintStream out) {
            this.tok = tok;
            this.out = out;
        }

        void accept(int id) {
            ids.add(id);
            String text = tok.decode(ids.stream().mapToInt(Integer::intValue).toArray());
            if (text.endsWith("\uFFFD")) return;
            out.print(text.substring(Math.min(printed, text.length())));
            out.flush();
            printed = text.length();
        }
    }
}

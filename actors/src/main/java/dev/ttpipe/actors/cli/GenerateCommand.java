package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.inference.PipelinedModel;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.train.ModelSource;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.Evaluation;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.data.Tokenizer;
import dev.ttpipe.actors.telemetry.Terminal;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.io.PrintStream;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.function.IntConsumer;

/** {@code ttpipe generate MODEL --prompt TEXT}: continues a prompt, streaming tokens as they come, with a key/value cache. */
@Command(name = "generate",
        mixinStandardHelpOptions = true,
        description = {"Continue a prompt with a checkpoint or Hugging Face model, printing tokens as they come.",
                "A key/value cache keeps each token's keys and values, so the prefix is not run again per token.",
                "With --stages P > 1 the stages run as a training job runs them, one rank each, each keeping its own cache."},
        footer = {"", "Examples:",
                "  ttpipe generate runs/a/checkpoints/step-000300 --prompt '3+4=' --max-new-tokens 8 --temperature 0",
                "  ttpipe generate exported/gpt2 --prompt 'ROMEO:' --top-k 50 --seed 7",
                "  ttpipe generate exported/tinyllama --prompt 'Once upon a time' --stages 4 --json"})
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

    @Option(names = "--no-kv-cache", description = "Run the whole context again for every token, in one process (the slow reference).")
    boolean noCache;

    @Option(names = "--json", description = "Print one JSON object (the new ids and text, tokens/s) instead of streaming the text.")
    boolean json;

    @Override
    public Integer call() throws Exception {
        if (maxNewTokens < 1) throw new UserInputException("--max-new-tokens: " + maxNewTokens + " given, expected a positive integer");
        if (temperature < 0) throw new UserInputException("--temperature: " + temperature + " given, expected >= 0");
        ModelSource src = model.open();
        Tokenizer tok = src.tokenizer();
        if (tok == null) throw new UserInputException(src.description() + ": no tokenizer known, expected --tokenizer gpt2 or a char vocab.txt");
        int[] ids;
        try {
            ids = tok.encodeWithSpecialTokens(prompt);              // a BOS where the tokenizer's post-processor puts one
        } catch (IllegalArgumentException e) {
            throw new UserInputException("--prompt: " + e.getMessage());
        }
        if (ids.length == 0) throw new UserInputException("--prompt: empty, expected some text");
        if (!noCache) Evaluation.checkContext(src.spec(), ids.length, maxNewTokens);
        boolean pipelined = model.pipelined() && !noCache;
        PrintStream out = System.out;
        Streamer streamer = new Streamer(tok, ids, json ? null : out);
        if (!json) {
            out.print(prompt);
            out.flush();
        }
        Generated g = pipelined ? pipelined(src, ids, tok.vocabSize(), streamer) : oneProcess(src, ids, tok.vocabSize(), streamer);
        int[] all = g.ids();
        double sec = g.seconds();
        int made = all.length - ids.length;
        String how = noCache ? "no cache: the whole context per token, " + model.stages + " stage" + (model.stages == 1 ? "" : "s")
                + " in one process" : "key/value cache, " + model.how();
        if (json) {
            out.println("{\"model\":" + Json.str(src.description()) + ",\"prompt\":" + Json.str(prompt) + ",\"prompt_tokens\":" + ids.length
                    + ",\"new_tokens\":" + made + ",\"ids\":" + Arrays.toString(Arrays.copyOfRange(all, ids.length, all.length)).replace(" ", "")
                    + ",\"text\":" + Json.str(streamer.text(all)) + ",\"stages\":" + model.stages + ",\"pipelined\":" + pipelined
                    + ",\"transport\":" + (pipelined ? Json.str(model.transport().id()) : "null") + ",\"kv_cache\":" + !noCache
                    + ",\"temperature\":" + Json.num(temperature) + ",\"top_k\":" + topK + ",\"seed\":" + seed
                    + ",\"seconds\":" + Json.num(sec) + ",\"tokens_per_second\":" + Json.num(made / sec) + "}");
        } else {
            if (noCache) out.print(streamer.text(all));
            out.println();
            Terminal.printWrapped(System.err, String.format(Locale.ROOT, "generate: %d new tokens in %.2f s, %.1f tokens/s (%s, %s)",
                    made, sec, made / sec, how, src.description()));
        }
        return Main.EXIT_OK;
    }

    /** The prompt's and the new ids, and the seconds the generation took (the model's loading not counted). */
    private record Generated(int[] ids, double seconds) {
    }

    /** The stages one after another in this thread, on one device. */
    private Generated oneProcess(ModelSource src, int[] ids, int sampledIds, Streamer streamer) {
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults())) {
            List<Stage> loaded = src.load(mesh.asSubmesh(), model.stages);
            try {
                long t0 = System.nanoTime();
                int[] all = noCache ? Evaluation.generate(loaded, ids, maxNewTokens, temperature, topK, seed, sampledIds)
                        : Evaluation.generateCached(loaded, ids, maxNewTokens, temperature, topK, seed, sampledIds, streamer);
                return new Generated(all, (System.nanoTime() - t0) / 1e9);
            } finally {
                loaded.forEach(Stage::close);
            }
        }
    }

    /** The stages on their own ranks, each keeping its key/value caches; the Coordinator samples and feeds each token back. */
    private Generated pipelined(ModelSource src, int[] ids, int sampledIds, Streamer streamer) {
        try (PipelinedModel p = PipelinedModel.forGeneration(src, model.stages, Backend.CPU, model.transport(), ids.length)) {
            Coordinator.GenerateReport r = p.generate(ids, maxNewTokens, temperature, topK, seed, sampledIds, streamer);
            return new Generated(r.ids(), r.seconds());
        }
    }

    /**
     * Prints each new token's text as it comes: the prompt's ids and the new ones decoded together, less the
     * prompt's own text, so that a decoder that strips the start of a text (SentencePiece's leading space) does
     * not eat the first new word's space. A BPE token that ends inside a character waits for the rest of it.
     */
    static final class Streamer implements IntConsumer {
        private final Tokenizer tok;
        private final PrintStream out;
        private int[] ids;
        private int n;
        private final int promptTextLength;
        private int printed;

        /** {@code out} null: nothing is printed. */
        Streamer(Tokenizer tok, int[] prompt, PrintStream out) {
            this.tok = tok;
            this.out = out;
            this.ids = prompt.clone();
            this.n = prompt.length;
            this.promptTextLength = tok.decode(prompt).length();
            this.printed = promptTextLength;
        }

        @Override
        public void accept(int id) {
            if (n == ids.length) ids = Arrays.copyOf(ids, 2 * n + 8);
            ids[n++] = id;
            if (out == null) return;
            String text = tok.decode(Arrays.copyOf(ids, n));
            if (text.endsWith("\uFFFD")) return;
            out.print(text.substring(Math.min(printed, text.length())));
            out.flush();
            printed = text.length();
        }

        /** The new tokens' text: {@code all} (the prompt's ids, then the new ones) decoded, less the prompt's text. */
        String text(int[] all) {
            String text = tok.decode(all);
            return text.substring(Math.min(promptTextLength, text.length()));
        }
    }
}

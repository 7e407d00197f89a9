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
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;
import dev.ttpipe.stages.data.TokenFiles;
import dev.ttpipe.stages.data.TokenSource;
import dev.ttpipe.actors.telemetry.Terminal;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;

/** {@code ttpipe eval MODEL --data FILE}: loss, perplexity and tokens/s of a trained model on a text or token files. */
@Command(name = "eval",
        mixinStandardHelpOptions = true,
        description = {"Measure a checkpoint's or Hugging Face model's loss, perplexity and tokens/s on a text or token files.",
                "Consecutive windows from the start of the data, each token predicted from the ones before it in its window.",
                "With --stages P > 1 the stages run as a training job runs them: one rank each, the batches pipelined through them."},
        footer = {"", "Examples:",
                "  ttpipe eval runs/a/checkpoints/step-000040 --data input.txt",
                "  ttpipe eval exported/gpt2 --data data/shakespeare/val_000000.bin --batches 8 --stages 2",
                "  ttpipe eval exported/gpt2 --data data/shakespeare/val_000000.bin --batches 32 --stages 4 --transport aeron",
                "  ttpipe eval latest --data input.txt --json"})
public final class EvalCommand implements Callable<Integer> {
    @Mixin
    ModelOptions model = new ModelOptions();

    @Option(names = "--data", paramLabel = "FILE", required = true, description = "A UTF-8 text, or token files (.bin, a directory, a glob).")
    String data;

    @Option(names = "--batches", paramLabel = "N", defaultValue = "8", description = "Batches to evaluate (default ${DEFAULT-VALUE}).")
    int batches;

    @Option(names = "--batch-size", paramLabel = "B", defaultValue = "4", description = "Sequences per batch (default ${DEFAULT-VALUE}).")
    int batchSize;

    @Option(names = "--seq-len", paramLabel = "T", description = "Tokens per sequence (default: the model's maximum, at most 256).")
    Integer seqLen;

    @Option(names = "--backend", paramLabel = "NAME", defaultValue = "cpu", description = "cpu or ttnn (default ${DEFAULT-VALUE}).")
    String backend;

    @Option(names = "--json", description = "Print one JSON object instead of text.")
    boolean json;

    @Override
    public Integer call() throws Exception {
        for (int[] v : new int[][]{{batches, 0}, {batchSize, 1}}) {
            if (v[0] < 1) throw new UserInputException(new String[]{"--batches", "--batch-size"}[v[1]] + ": " + v[0]
                    + " given, expected a positive integer");
        }
        if (!backend.equals("cpu") && !backend.equals("ttnn")) {
            throw new UserInputException("--backend: '" + backend + "' given, expected cpu or ttnn");
        }
        ModelSource src = model.open();
        int t = seqLen != null ? seqLen : Math.min(src.spec().maxSequenceLength(), 256);
        if (t < 1 || t > src.spec().maxSequenceLength()) {
            throw new UserInputException("--seq-len: " + t + " given, expected 1.." + src.spec().maxSequenceLength() + " (the model's maximum)");
        }
        TokenSource tokens = tokens(src);
        long windows = (tokens.size() - 1) / t;
        int n = (int) Math.min(batches, windows / batchSize);
        if (n < 1) {
            throw new UserInputException("--data: " + data + " holds " + tokens.size() + " tokens, too few for one batch of "
                    + batchSize + " x " + t + " (+1)");
        }
        List<Batch> list = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            int[] in = new int[batchSize * t], tg = new int[batchSize * t];
            for (int r = 0; r < batchSize; r++) {
                long off = ((long) i * batchSize + r) * t;
                tokens.copy(off, in, r * t, t);
                tokens.copy(off + 1, tg, r * t, t);
            }
            list.add(new Batch(batchSize, t, in, tg));
        }
        Backend be = Backend.valueOf(backend.toUpperCase(Locale.ROOT));
        Score score = model.pipelined() ? pipelined(src, be, list) : oneProcess(src, be, list);
        double loss = score.loss(), s = score.seconds();
        long count = (long) n * batchSize * t;
        if (json) {
            System.out.println("{\"model\":" + Json.str(src.description()) + ",\"checkpoint\":" + Json.str(src.dir().toString())
                    + ",\"data\":" + Json.str(data) + ",\"batches\":" + n + ",\"batch_size\":" + batchSize + ",\"seq_len\":" + t
                    + ",\"tokens\":" + count + ",\"stages\":" + model.stages + ",\"pipelined\":" + model.pipelined()
                    + ",\"transport\":" + (model.pipelined() ? Json.str(model.transport().id()) : "null") + ",\"backend\":" + Json.str(backend)
                    + ",\"loss\":" + Json.num(loss) + ",\"perplexity\":" + Json.num(Math.exp(loss)) + ",\"seconds\":" + Json.num(s)
                    + ",\"tokens_per_second\":" + Json.num(count / s) + "}");
        } else {
            Terminal.printWrapped(System.out, String.format(Locale.ROOT, "eval: %s on %s: %d batches of %d x %d tokens (%s, %s)",
                    src.description(), data, n, batchSize, t, model.how(), backend));
            Terminal.printWrapped(System.out, String.format(Locale.ROOT, "loss %.4f nats/token, perplexity %.2f, %.0f tokens/s", loss,
                    Math.exp(loss), count / s));
        }
        return Main.EXIT_OK;
    }

    /** A mean loss and the seconds its batches took (the model's loading not counted). */
    private record Score(double loss, double seconds) {
    }

    /** The stages one after another in this thread, on one device. */
    private Score oneProcess(ModelSource src, Backend be, List<Batch> list) {
        try (MeshDevice mesh = Backends.open(be.id(), new MeshShape(1, 1), MeshOptions.defaults())) {
            List<Stage> loaded = src.load(mesh.asSubmesh(), model.stages);
            try {
                long t0 = System.nanoTime();
                double loss = Evaluation.meanLoss(loaded, list);
                return new Score(loss, (System.nanoTime() - t0) / 1e9);
            } finally {
                loaded.forEach(Stage::close);
            }
        }
    }

    /** The stages on their own ranks, the batches pipelined through them (up to 256 per pass). */
    private Score pipelined(ModelSource src, Backend be, List<Batch> list) {
        Batch first = list.get(0);
        try (PipelinedModel p = PipelinedModel.forEval(src, model.stages, be, model.transport(), Math.min(list.size(), 256), first.size(),
                first.seqLen())) {
            Coordinator.EvalReport r = p.eval(list);
            return new Score(r.loss(), r.seconds());
        }
    }

    private TokenSource tokens(ModelSource src) throws IOException {
        if (TokenFiles.isTokenPath(data)) {
            List<Path> files = TokenFiles.resolve(data, false);
            if (files.isEmpty()) files = TokenFiles.resolve(data, true);
            if (files.isEmpty()) throw new UserInputException("--data: " + data + " names no token files, expected .bin files");
            return TokenFiles.open(files).checkVocabulary(src.spec().vocabSize());
        }
        if (!Files.isRegularFile(Path.of(data))) throw new UserInputException("--data: " + data + ": no such file");
        if (src.tokenizer() == null) {
            throw new UserInputException(src.description() + ": no tokenizer known for a text, expected --tokenizer gpt2 or a char"
                    + " vocab.txt, or token files as --data");
        }
        String text = TextDataset.readUtf8(Path.of(data));
        try {
            return TokenSource.of(src.tokenizer().encode(text));
        } catch (IllegalArgumentException e) {
            throw new UserInputException("--data: " + data + ": " + e.getMessage());
        }
    }
}

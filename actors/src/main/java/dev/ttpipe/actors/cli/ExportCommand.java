package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.train.Checkpoints;
import dev.ttpipe.actors.train.ModelSource;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.checkpoint.HfExport;
import dev.ttpipe.stages.data.Gpt2Tokenizer;
import dev.ttpipe.actors.telemetry.Terminal;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;
import java.util.concurrent.Callable;

/** {@code ttpipe export CHECKPOINT --format hf --out DIR}: a checkpoint as a Hugging Face model directory. */
@Command(name = "export",
        mixinStandardHelpOptions = true,
        description = {"Write a checkpoint as a Hugging Face model directory that from_pretrained loads.",
                "config.json, model.safetensors (F32) and, when the run used tokenizer_type: bpe, GPT-2's tokenizer files."},
        footer = {"", "Examples:",
                "  ttpipe export runs/a/checkpoints/step-000040 --format hf --out exported/a",
                "  ttpipe export latest --format hf --out exported/latest"})
public final class ExportCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "CHECKPOINT",
            description = "A checkpoint directory, a run directory or checkpoint root (its latest), or 'latest'.")
    String checkpoint;

    @Option(names = "--format", paramLabel = "FORMAT", defaultValue = "hf", description = "hf (the only format).")
    String format;

    @Option(names = "--out", paramLabel = "DIR", required = true, description = "The directory to write.")
    Path out;

    @Option(names = "--runs-dir", paramLabel = "DIR", defaultValue = "runs", description = "Where 'latest' looks (default ${DEFAULT-VALUE}).")
    Path runsDir;

    @Override
    public Integer call() throws Exception {
        if (!format.equals("hf")) throw new UserInputException("--format: '" + format + "' given, expected hf");
        Checkpoints.Found found = Checkpoints.find(checkpoint, runsDir, System.err);
        TtpipeConfig cfg = ConfigLoader.read(found.config(), found.dir().resolve(Checkpoints.STATE) + " (its config)", null);
        ModelSpec spec = JobPlan.model(cfg, ModelSource.vocabOf(found.dir()));
        long t0 = System.nanoTime();
        HfExport.Written w = HfExport.export(found.dir(), spec, out);
        String tokenizer = "no tokenizer files (a char vocabulary has no Hugging Face form; the run's vocab.txt lists it)";
        String json = cfg.training.tokenizerPath;
        if (json != null && Files.isDirectory(Path.of(json))) json = Path.of(json).resolve("tokenizer.json").toString();
        if ("bpe".equals(cfg.training.tokenizerType) && json != null && json.endsWith(".json") && Files.isRegularFile(Path.of(json))) {
            Files.copy(Path.of(json), out.resolve("tokenizer.json"), StandardCopyOption.REPLACE_EXISTING);
            tokenizer = "the run's tokenizer.json";
        } else if ("bpe".equals(cfg.training.tokenizerType)) {
            Gpt2Tokenizer.get().writeHuggingFaceFiles(out);
            tokenizer = "GPT-2's tokenizer files (tokenizer.json, vocab.json, merges.txt, tokenizer_config.json)";
        }
        Terminal.printWrapped(System.out, String.format(Locale.ROOT, "%s: %s model, %d tensors (%.1f MB) -> %s, config.json, %s (%.1f s)",
                found.dir(), spec.type().name().toLowerCase(Locale.ROOT), w.tensors(), w.bytes() / 1e6, w.weights(), tokenizer,
                (System.nanoTime() - t0) / 1e9));
        return Main.EXIT_OK;
    }
}

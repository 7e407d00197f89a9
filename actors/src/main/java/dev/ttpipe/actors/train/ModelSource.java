package dev.ttpipe.actors.train;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.Partitioner;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.checkpoint.CheckpointException;
import dev.ttpipe.stages.checkpoint.HfModel;
import dev.ttpipe.stages.checkpoint.SafeTensors;
import dev.ttpipe.stages.checkpoint.StageState;
import dev.ttpipe.stages.data.CharTokenizer;
import dev.ttpipe.stages.data.DataException;
import dev.ttpipe.stages.data.Gpt2Tokenizer;
import dev.ttpipe.stages.data.HfTokenizer;
import dev.ttpipe.stages.data.Tokenizer;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * A trained model to use (eval, generate, export): a ttpipe checkpoint (its config gives the shape and
 * the tokenizer) or a Hugging Face model directory (config.json; GPT-2's BPE when the model has its
 * vocabulary), with what it was trained to read.
 *
 * @param tokenizer null when nothing says which (then only token files can be read)
 */
public record ModelSource(Path dir, ModelSpec spec, Tokenizer tokenizer, TtpipeConfig config, String description) {

    /**
     * {@code where}: a Hugging Face directory, or what {@code --resume} takes (a checkpoint, a run directory, latest:
     * {@code notes} is told which checkpoint that was).
     */
    public static ModelSource open(String where, Path runsDir, String tokenizerFlag, PrintStream notes) throws IOException {
        Path p = Path.of(where);
        if (HfModel.isHfDir(p)) {
            HfModel.Config c = HfModel.config(p);
            Tokenizer tok = tokenizer(tokenizerFlag, null);
            if (tok == null && Files.isRegularFile(p.resolve("tokenizer.json"))) tok = HfTokenizer.load(p.resolve("tokenizer.json"));
            if (tok == null && c.vocabSize() >= Gpt2Tokenizer.VOCAB
                    && (Files.isRegularFile(p.resolve("vocab.json")) || c.type() == ModelSpec.ModelType.GPT2)) {
                tok = Gpt2Tokenizer.get();
            }
            return new ModelSource(p, c.spec(), tok, null, p + " (Hugging Face " + c.type().name().toLowerCase() + ")");
        }
        Checkpoints.Found found = Checkpoints.find(where, runsDir, notes);
        TtpipeConfig cfg = ConfigLoader.read(found.config(), found.dir().resolve(Checkpoints.STATE) + " (its config)", null);
        ModelSpec spec = JobPlan.model(cfg, vocabOf(found.dir()));
        Tokenizer tok = tokenizer(tokenizerFlag, null);
        if (tok == null && "bpe".equals(cfg.training.tokenizerType)) tok = TrainingData.bpe(cfg);
        // the characters in id order; the model's vocab_size may pad beyond them (TTML's 96 for 65), never short of them
        if (tok == null && found.state().get("vocabulary") instanceof String v && v.codePointCount(0, v.length()) <= spec.vocabSize()) {
            tok = CharTokenizer.fromCodePoints(v.codePoints().toArray());
        }
        return new ModelSource(found.dir(), spec, tok, cfg, found.dir() + " (ttpipe checkpoint, step " + found.step() + ")");
    }

    private static Tokenizer tokenizer(String flag, Tokenizer dflt) {
        if (flag == null) return dflt;
        if (flag.equals("gpt2")) return Gpt2Tokenizer.get();
        if (flag.endsWith(".json") || Files.isRegularFile(Path.of(flag).resolve("tokenizer.json"))) return HfTokenizer.load(Path.of(flag));
        Path f = Path.of(flag);
        if (Files.isRegularFile(f)) {
            try {
                return CharTokenizer.load(f);
            } catch (IOException | RuntimeException e) {
                throw new DataException("--tokenizer: " + flag + " cannot be read as a char vocab.txt (" + e.getMessage() + ")");
            }
        }
        throw new DataException("--tokenizer: '" + flag + "' given, expected gpt2, a tokenizer.json (or its folder) or a char vocab.txt");
    }

    /** The vocabulary a checkpoint was trained with: its token embedding's rows. */
    public static int vocabOf(Path checkpointDir) throws IOException {
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(checkpointDir, "stage-*.safetensors")) {
            for (Path f : ds) {
                try (SafeTensors.Reader r = new SafeTensors.Reader(f)) {
                    for (String n : new String[]{"wte.weight", "model.embed_tokens.weight"}) {
                        if (r.tensors().containsKey(n)) return (int) r.tensors().get(n).shape()[0];
                    }
                }
            }
        }
        throw new CheckpointException(checkpointDir + ": no stage file holds the token embedding (wte.weight or model.embed_tokens.weight)");
    }

    /** The model split into {@code stages} stages (balanced) on {@code mesh}, its weights loaded; the caller closes them. */
    public List<Stage> load(Submesh mesh, int stages) {
        List<Stage> out = new ArrayList<>();
        try {
            for (StageSlice s : split(stages)) {
                out.add(new Stage(spec, s, mesh, Parallelism.NONE, 0));
            }
            StageState.load(dir, spec, out);
            return out;
        } catch (RuntimeException e) {
            out.forEach(Stage::close);
            throw e;
        }
    }

    /** The model's blocks split into {@code stages} stages, balanced by cost: how eval and generate split it, in one process or pipelined. */
    public List<StageSlice> split(int stages) {
        return Partitioner.balanced(spec, stages, 1, Math.min(spec.maxSequenceLength(), 256));
    }
}

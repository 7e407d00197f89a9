package dev.ttpipe.stages.checkpoint;

import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.Optimizer;
import dev.ttpipe.stages.Param;
import dev.ttpipe.stages.Stage;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.Function;

/**
 * One pipeline stage's part of a checkpoint: its parameters and optimizer moments, gathered from its
 * devices (TP shards assembled) into host memory, written as {@code stage-SS.safetensors} under
 * {@link CheckpointNames}, and loaded back into a stage of any split by tensor name.
 */
public final class StageState {
    private StageState() {
    }

    /** A stage's state in host memory, under ttpipe's names (moments with their suffixes). */
    public record Snapshot(int stage, int firstBlock, int endBlock, ModelSpec spec, Map<String, CheckpointNames.HostTensor> tensors,
                           int optimizerSteps) {
        public long bytes() {
            long b = 0;
            for (CheckpointNames.HostTensor t : tensors.values()) b += 4L * t.values().length;
            return b;
        }
    }

    /** What one writer wrote. */
    public record Written(Map<String, String> sha256, long bytes, double seconds) {
    }

    /** The file of stage {@code stage}. */
    public static String fileName(int stage) {
        return String.format(Locale.ROOT, "stage-%02d.safetensors", stage);
    }

    /** Copies a stage's parameters and moments to host memory (runs on its device queue). */
    public static Snapshot snapshot(Stage stage, Optimizer optimizer) {
        Map<String, CheckpointNames.HostTensor> t = new LinkedHashMap<>();
        for (Param p : stage.parameters()) {
            long[] shape = dims(p);
            t.put(p.name(), new CheckpointNames.HostTensor(shape, p.value().toHost()));
            float[] m = p.expAvgToHost(), v = p.expAvgSqToHost();
            if (m != null) t.put(p.name() + CheckpointNames.EXP_AVG, new CheckpointNames.HostTensor(shape, m));
            if (v != null) t.put(p.name() + CheckpointNames.EXP_AVG_SQ, new CheckpointNames.HostTensor(shape, v));
        }
        return new Snapshot(stage.index(), stage.slice().firstBlock(), stage.slice().endBlock(), stage.spec(), t,
                optimizer.steps());
    }

    /**
     * Puts a snapshot of this very stage (same split) back: parameters, moments. The snapshot's arrays
     * are copied, so it can be restored again.
     */
    public static void restore(Snapshot s, Stage stage) {
        for (Param p : stage.parameters()) {
            CheckpointNames.HostTensor v = s.tensors().get(p.name());
            if (v == null) throw new CheckpointException("the snapshot of stage " + s.stage() + " has no tensor for " + p.name());
            CheckpointNames.HostTensor m = s.tensors().get(p.name() + CheckpointNames.EXP_AVG);
            CheckpointNames.HostTensor q = s.tensors().get(p.name() + CheckpointNames.EXP_AVG_SQ);
            p.load(v.values(), m == null ? null : m.values(), q == null ? null : q.values(), true);
        }
    }

    /** Writes each snapshot into {@code dir} as its stage's file, flushed to the disk. */
    public static Written write(Path dir, List<Snapshot> snapshots) throws IOException {
        long t0 = System.nanoTime();
        Map<String, String> sha = new LinkedHashMap<>();
        long bytes = 0;
        for (Snapshot s : snapshots) {
            Map<String, SafeTensors.Entry> entries = new LinkedHashMap<>();
            for (Map.Entry<String, CheckpointNames.HostTensor> e : CheckpointNames.toFile(s.spec(), s.tensors()).entrySet()) {
                entries.put(e.getKey(), new SafeTensors.Entry(e.getValue().shape(), e.getValue().values()));
            }
            Map<String, String> meta = new LinkedHashMap<>();
            meta.put("format", "pt");
            meta.put("ttpipe_stage", Integer.toString(s.stage()));
            meta.put("ttpipe_blocks", s.firstBlock() + ".." + s.endBlock());
            meta.put("ttpipe_optimizer_steps", Integer.toString(s.optimizerSteps()));
            String name = fileName(s.stage());
            try {
                sha.put(name, SafeTensors.write(dir.resolve(name), entries, meta));
            } catch (IOException e) {
                throw new IOException(dir.resolve(name) + ": " + WriteFailure.describe(e), e);
            }
            bytes += Files.size(dir.resolve(name));
        }
        return new Written(sha, bytes, (System.nanoTime() - t0) / 1e9);
    }

    /**
     * Loads every parameter of {@code stages} (and its moments where the checkpoint has them) from the
     * stage files in {@code dir}, whichever split wrote them, or from a Hugging Face model directory
     * ({@link HfModel}: weights only, the optimizer starts fresh). Each tensor is read from its mapped
     * file when its stage needs it: a rank reads only its own.
     *
     * @throws CheckpointException naming the first tensor that is missing or whose shape differs
     */
    public static void load(Path dir, ModelSpec spec, List<Stage> stages) {
        if (HfModel.isHfDir(dir)) {
            try (HfModel hf = HfModel.open(dir, spec)) {
                load(hf.where().toString(), hf::read, spec, stages);
            }
            return;
        }
        List<SafeTensors.Reader> readers = new ArrayList<>();
        try {
            Map<String, SafeTensors.Reader> byTensor = new HashMap<>();
            try (DirectoryStream<Path> files = Files.newDirectoryStream(dir, "stage-*.safetensors")) {
                for (Path f : files) {
                    SafeTensors.Reader r = new SafeTensors.Reader(f);
                    readers.add(r);
                    for (String n : r.tensors().keySet()) byTensor.put(n, r);
                }
            } catch (IOException e) {
                throw new CheckpointException(dir + ": cannot list its stage files (" + e.getMessage() + ")");
            }
            if (readers.isEmpty()) {
                throw new CheckpointException(dir + ": no stage-*.safetensors files (nor a Hugging Face config.json with"
                        + " model.safetensors), expected a ttpipe checkpoint or a Hugging Face model directory");
            }
            load(dir.toString(), n -> {
                SafeTensors.Reader r = byTensor.get(n);
                return r == null ? null : new CheckpointNames.HostTensor(r.tensors().get(n).shape(), r.read(n));
            }, spec, stages);
        } finally {
            readers.forEach(SafeTensors.Reader::close);
        }
    }

    /** Loads from tensors by checkpoint name ({@code lookup} gives null for one it does not have). */
    private static void load(String where, Function<String, CheckpointNames.HostTensor> lookup, ModelSpec spec,
                             List<Stage> stages) {
        for (Stage stage : stages) {
            Map<String, CheckpointNames.HostTensor> fromFile = new LinkedHashMap<>();
            for (Param p : stage.parameters()) {
                String base = CheckpointNames.fileName(spec, p.name());
                for (String suffix : new String[]{"", CheckpointNames.EXP_AVG, CheckpointNames.EXP_AVG_SQ}) {
                    String n = base + suffix;
                    if (fromFile.containsKey(n)) continue;
                    CheckpointNames.HostTensor t = lookup.apply(n);
                    if (t == null) {
                        if (suffix.isEmpty()) throw new CheckpointException(where + ": no tensor " + n + " (parameter " + p.name() + ")");
                        continue;
                    }
                    fromFile.put(n, t);
                }
            }
            Map<String, CheckpointNames.HostTensor> mine = CheckpointNames.fromFile(spec, fromFile);
            for (Param p : stage.parameters()) {
                CheckpointNames.HostTensor v = mine.get(p.name());
                if (v == null) throw new CheckpointException(where + ": no tensor for parameter " + p.name());
                if (!Arrays.equals(v.shape(), dims(p))) {
                    throw new CheckpointException(where + ": tensor " + CheckpointNames.fileName(spec, p.name()) + " has shape "
                            + Arrays.toString(v.shape()) + " in the checkpoint, the model's " + p.name() + " is "
                            + Arrays.toString(dims(p)) + " (a checkpoint of another model shape)");
                }
                CheckpointNames.HostTensor m = mine.get(p.name() + CheckpointNames.EXP_AVG);
                CheckpointNames.HostTensor s = mine.get(p.name() + CheckpointNames.EXP_AVG_SQ);
                p.load(v.values(), m == null ? null : m.values(), s == null ? null : s.values(), true);
            }
        }
    }

    private static long[] dims(Param p) {
        return Arrays.stream(p.shape().toArray()).asLongStream().toArray();
    }
}

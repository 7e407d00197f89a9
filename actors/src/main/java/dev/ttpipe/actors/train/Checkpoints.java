package dev.ttpipe.actors.train;

import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.PipelineFailure;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.runtime.StageActor;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.checkpoint.CheckpointException;
import dev.ttpipe.stages.checkpoint.ListedFile;
import dev.ttpipe.stages.checkpoint.MiniJson;
import dev.ttpipe.stages.checkpoint.SafeTensors;
import dev.ttpipe.stages.checkpoint.WriteFailure;
import dev.ttpipe.actors.telemetry.Terminal;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;

/**
 * The checkpoints of a training job under {@code checkpoint_dir}:
 * <pre>
 *   checkpoints/
 *     step-000040/             one per saved step
 *       stage-00.safetensors   a stage's parameters and AdamW moments under Hugging Face's names
 *       stage-01.safetensors
 *       trainer_state.json     step, optimizer steps, data and RNG positions, config, vocabulary, checksums
 *     latest                   the name of the newest complete checkpoint, updated last
 * </pre>
 * A save takes every rank's host copy between steps (on the device queues), then background writers
 * write the stage files into {@code step-N.tmp/} while training goes on; once every file is on the
 * disk, {@code trainer_state.json} with their SHA-256s is written and flushed, the directory is
 * renamed to {@code step-N} and {@code latest} is replaced (write, flush, atomic rename). A crash at
 * any moment leaves the previous checkpoint loadable and nothing incomplete that looks complete.
 */
public final class Checkpoints implements AutoCloseable {
    public static final String STATE = "trainer_state.json";
    public static final String LATEST = "latest";
    static final int FORMAT = 1;

    private final Path root;
    private final int interval;
    private final int keep;
    private final TrainingJob job;
    private final ExecutorService finisher = Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, "ttpipe-checkpoint");
        t.setDaemon(true);
        return t;
    });
    private final List<Pending> pending = new ArrayList<>();
    private final List<Saved> done = new ArrayList<>();

    /** What one save cost: the host copy (which the pipeline waits for) and the write (which it does not). */
    public record Saved(int step, Path dir, long bytes, double copySeconds, double writeSeconds) {
    }

    /** A save being written in the background. */
    private record Pending(int step, Future<Saved> result) {
    }

    /** Room for what the file system spends beyond the files' bytes (directory entries, the last block of each file). */
    static final long SLACK = 64L << 10;

    /** The bytes of the last complete checkpoint, stage files and trainer state (0 before the first). */
    private volatile long lastBytes;

    Checkpoints(TrainingJob job, Path root, int interval, int keep) {
        this.job = job;
        this.root = root;
        this.interval = interval;
        this.keep = keep;
    }

    public Path root() {
        return root;
    }

    /** Whether the run saves after {@code stepsDone} steps: every {@code interval}, and always at the last. */
    boolean due(int stepsDone, int total) {
        return stepsDone == total || (interval > 0 && stepsDone % interval == 0);
    }

    /** Whether a complete checkpoint of step {@code stepsDone} is on the disk. */
    boolean has(int stepsDone) {
        return Files.isRegularFile(root.resolve(dirName(stepsDone)).resolve(STATE));
    }

    /** Saves the state after {@code stepsDone} steps; returns once the host copies are taken (milliseconds). */
    void save(PipelineRuntime runtime, int stepsDone) {
        save(runtime, stepsDone, stepsDone);
    }

    /**
     * Saves the state after {@code stepsDone} steps of which {@code optimizerSteps} were applied (a
     * step with a non-finite loss or gradient is not); returns once the host copies are taken.
     *
     * @throws PipelineFailure one line naming the step, the path and the cause, before anything is written, when the
     *                         directory cannot be made or the disk has less room than the checkpoint needs
     */
    void save(PipelineRuntime runtime, int stepsDone, int optimizerSteps) {
        Path tmp = root.resolve(dirName(stepsDone) + ".tmp");
        try {
            Files.createDirectories(root);
            long free = Files.getFileStore(root).getUsableSpace(), needed = expectedBytes();
            if (free < needed) {
                throw new PipelineFailure("step " + stepsDone + ": not saving the checkpoint to " + root.resolve(dirName(stepsDone))
                        + ": it needs about " + Sizes.format(needed) + " and the disk has " + Sizes.format(free) + " free"
                        + " (training_config.checkpoint_dir; fewer checkpoint_keep frees room)" + latestNote());
            }
            deleteTree(tmp);
            Files.createDirectories(tmp);
        } catch (IOException e) {
            throw new PipelineFailure("step " + stepsDone + ": not saving the checkpoint to " + root.resolve(dirName(stepsDone)) + ": "
                    + WriteFailure.describe(e) + " (training_config.checkpoint_dir)" + latestNote(), e);
        }
        long t0 = System.nanoTime();
        runtime.saveState(stepsDone, tmp);
        double copy = (System.nanoTime() - t0) / 1e9;
        pending.add(new Pending(stepsDone, finisher.submit(() -> finish(runtime, stepsDone, optimizerSteps, tmp, copy))));
    }

    /**
     * The bytes the next save needs: the last save's stage files, or before the first the model's parameters and the
     * optimizer's moments in fp32 and the config and the vocabulary for the trainer state; and {@link #SLACK}.
     */
    long expectedBytes() {
        if (lastBytes > 0) return lastBytes + SLACK;
        JobPlan plan = job.plan();
        int moments = switch (plan.optimizer().kind()) {
            case ADAMW -> 2;
            case SGD -> plan.optimizer().momentum() > 0 ? 1 : 0;
            case NOOP -> 0;
        };
        long state = job.configYaml().length() + job.data().dataset().tokenizer().vocabulary().length() + (4L << 10);
        return 4L * plan.model().parameters() * (1 + moments) + state + SLACK;
    }

    /** "; latest is still step-000004" (or that there is none yet), for the line that says a save failed. */
    private String latestNote() {
        try {
            Path latest = root.resolve(LATEST);
            return Files.isRegularFile(latest) ? "; " + latest + " is still " + Files.readString(latest, StandardCharsets.UTF_8).strip()
                    : "; " + root + " has no complete checkpoint";
        } catch (IOException e) {
            return "";
        }
    }

    /** Writes the files of a save whose host copies are taken; on failure removes its {@code .tmp} and says why. */
    private Saved finish(PipelineRuntime runtime, int stepsDone, int optimizerSteps, Path tmp, double copySeconds) {
        try {
            return write(runtime, stepsDone, optimizerSteps, tmp, copySeconds);
        } catch (IOException | RuntimeException e) {
            String cause = e instanceof IOException ? WriteFailure.describe(e) : e.getMessage();
            try {
                deleteTree(tmp);                         // every rank is done with it: awaitSaved waited for all of them
            } catch (IOException ignored) {
                // the failure is what gets reported; the next save of this step removes it
            }
            throw new PipelineFailure("step " + stepsDone + ": saving the checkpoint to " + root.resolve(dirName(stepsDone))
                    + " failed: " + cause + latestNote(), e);
        }
    }

    private Saved write(PipelineRuntime runtime, int stepsDone, int optimizerSteps, Path tmp, double copySeconds) throws IOException {
        List<StageActor.SavedFiles> files = runtime.awaitSaved(stepsDone);
        long bytes = 0;
        double write = 0;
        StringBuilder list = new StringBuilder("{");
        for (StageActor.SavedFiles f : files) {
            bytes += f.bytes();
            write = Math.max(write, f.writeSeconds());
            for (Map.Entry<String, String> e : f.sha256().entrySet()) {
                list.append(list.length() == 1 ? "" : ",").append(Json.str(e.getKey())).append(":{\"sha256\":")
                        .append(Json.str(e.getValue())).append(",\"bytes\":").append(Files.size(tmp.resolve(e.getKey())))
                        .append(",\"rank\":").append(f.rank()).append('}');
            }
        }
        writeDurably(tmp.resolve(STATE), trainerState(stepsDone, optimizerSteps, list.append('}').toString()));
        long total = bytes + Files.size(tmp.resolve(STATE));
        Path dir = root.resolve(dirName(stepsDone));
        deleteTree(dir);
        Files.move(tmp, dir, StandardCopyOption.ATOMIC_MOVE);
        fsyncDirectory(root);
        Path latestTmp = root.resolve(LATEST + ".tmp");
        writeDurably(latestTmp, dir.getFileName().toString() + "\n");
        Files.move(latestTmp, root.resolve(LATEST), StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        fsyncDirectory(root);
        prune();
        lastBytes = total;
        return new Saved(stepsDone, dir, bytes, copySeconds, write);
    }

    private String trainerState(int stepsDone, int optimizerSteps, String files) {
        JobPlan plan = job.plan();
        StringBuilder layout = new StringBuilder("[");
        for (StageSlice s : plan.slices()) {
            layout.append(layout.length() == 1 ? "" : ",").append("{\"stage\":").append(s.index()).append(",\"rank\":").append(s.rank())
                    .append(",\"blocks\":[").append(s.firstBlock()).append(',').append(s.endBlock()).append("]}");
        }
        String config = job.configYaml();
        String vocab = job.data().dataset().tokenizer().vocabulary();
        return "{\n  \"format\": " + FORMAT
                + ",\n  \"ttpipe_version\": " + Json.str(version())
                + ",\n  \"step\": " + stepsDone
                + ",\n  \"optimizer_steps\": " + optimizerSteps
                + ",\n  \"lr_schedule_step\": " + stepsDone
                + ",\n  \"data\": {\"seed\": " + plan.seed() + ", \"next_batch\": " + (long) stepsDone * plan.accumulation() + "}"
                + ",\n  \"rng\": {\"seed\": " + plan.seed() + ", \"next_pass\": " + (long) stepsDone * plan.accumulation()
                + ", \"note\": \"dropout masks are a function of (seed, pass, layer, position): the next pass is all they need\"}"
                + ",\n  \"model\": " + Json.str(plan.model().toString())
                + ",\n  \"layout\": " + layout.append(']')
                + ",\n  \"config_sha256\": " + Json.str(sha256(config))
                + ",\n  \"config\": " + Json.str(config)
                + ",\n  \"vocabulary\": " + Json.str(vocab)
                + ",\n  \"files\": " + files + "\n}\n";
    }

    static String version() {
        String v = Checkpoints.class.getPackage().getImplementationVersion();
        return v == null ? "dev" : v;
    }

    static String sha256(String text) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256")
                    .digest(text.getBytes(StandardCharsets.UTF_8)));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Keeps the newest {@code keep} complete checkpoints. */
    private void prune() throws IOException {
        List<Path> steps = complete(root);
        for (int i = 0; i < steps.size() - keep; i++) deleteTree(steps.get(i));
    }

    /**
     * The complete checkpoints under a checkpoint root, oldest step first: each {@code step-N} directory with its
     * trainer_state.json (renamed into place last, so a save cut short never counts). None when the root is not there.
     */
    public static List<Path> complete(Path root) throws IOException {
        if (!Files.isDirectory(root)) return List.of();
        try (Stream<Path> s = Files.list(root)) {
            return s.filter(p -> p.getFileName().toString().matches("step-\\d+") && Files.isRegularFile(p.resolve(STATE)))
                    .sorted(Comparator.comparingLong(Checkpoints::stepOf)).toList();
        }
    }

    /** The step of a {@code step-N} directory. */
    static long stepOf(Path stepDir) {
        return Long.parseLong(stepDir.getFileName().toString().substring("step-".length()));
    }

    /**
     * Waits for every save still being written; returns all saves of this run.
     *
     * @throws PipelineFailure the first save that failed, in one line (step, path, cause)
     */
    public List<Saved> awaitAll() {
        try {
            for (Pending p : pending) {
                try {
                    done.add(p.result().get());
                } catch (ExecutionException e) {
                    throw failure(p, e);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new PipelineFailure("interrupted while writing the checkpoint of step " + p.step());
                }
            }
        } finally {
            pending.removeIf(p -> p.result().isDone());
        }
        return List.copyOf(done);
    }

    /**
     * Without waiting: the first save that failed, in one line (step, path, cause), or null while none has. The
     * training loop asks at each step boundary and stops the job on a failure.
     */
    String failure() {
        for (Iterator<Pending> it = pending.iterator(); it.hasNext(); ) {
            Pending p = it.next();
            if (!p.result().isDone()) break;             // saves finish in order: the later ones are not done either
            it.remove();
            try {
                done.add(p.result().get());
            } catch (ExecutionException e) {
                return failure(p, e).getMessage();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return null;
            }
        }
        return null;
    }

    private static PipelineFailure failure(Pending p, ExecutionException e) {
        Throwable c = e.getCause();
        return c instanceof PipelineFailure f ? f
                : new PipelineFailure("step " + p.step() + ": saving the checkpoint failed: " + (c == null ? e : WriteFailure.describe(c)), c);
    }

    /**
     * After a failed step, before rolling back: waits briefly for the saves being written and gives up
     * on those that cannot finish (a rank that died never writes its files; such a checkpoint never
     * becomes complete, so {@code latest} keeps naming the one before). Returns the newest complete
     * checkpoint, or null when there is none yet.
     */
    Found abandonPending() {
        return abandonPending(2);
    }

    /** {@link #abandonPending()}, waiting at most {@code seconds} per save being written. */
    Found abandonPending(int seconds) {
        for (Pending p : pending) {
            Future<Saved> f = p.result();
            try {
                done.add(f.get(seconds, TimeUnit.SECONDS));
            } catch (TimeoutException | ExecutionException e) {
                f.cancel(true);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                f.cancel(true);
            }
        }
        pending.clear();
        return Files.isRegularFile(root.resolve(LATEST)) ? find(root.toString(), root) : null;
    }

    /** One line: how many saves, their size, and the write bandwidth. */
    public static String summary(List<Saved> saves) {
        if (saves.isEmpty()) return "no checkpoint saved";
        long bytes = 0;
        double copy = 0, write = 0;
        for (Saved s : saves) {
            bytes += s.bytes();
            copy += s.copySeconds();
            write += s.writeSeconds();
        }
        Saved last = saves.get(saves.size() - 1);
        return String.format(Locale.ROOT, "checkpoints: %d saved (%s each), the last %s; the pipeline waited %.1f ms per save for"
                        + " the host copy, the background writes ran at %.0f MB/s", saves.size(),
                Sizes.format(bytes / saves.size()), last.dir(), 1e3 * copy / saves.size(),
                write > 0 ? bytes / write / 1e6 : Double.NaN);
    }

    @Override
    public void close() {
        finisher.shutdown();
    }

    static String dirName(int step) {
        return String.format(Locale.ROOT, "step-%06d", step);
    }

    private static void writeDurably(Path file, String text) throws IOException {
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING,
                StandardOpenOption.WRITE)) {
            ch.write(ByteBuffer.wrap(text.getBytes(StandardCharsets.UTF_8)));
            ch.force(true);
        }
    }

    private static void fsyncDirectory(Path dir) {
        try (FileChannel ch = FileChannel.open(dir, StandardOpenOption.READ)) {
            ch.force(true);
        } catch (IOException ignored) {
            // not every file system lets a directory be opened; the rename is still atomic
        }
    }

    static void deleteTree(Path dir) throws IOException {
        if (!Files.exists(dir)) return;
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).toList()) Files.delete(p);
        }
    }

    // ---- resuming ------------------------------------------------------------------------------------

    /**
     * A checkpoint found and checked: its directory and its trainer state. {@code choice}: for {@code latest},
     * one line saying which checkpoint that was (every command that resolves it prints it); null otherwise.
     */
    public record Found(Path dir, int step, int optimizerSteps, String config, Map<String, Object> state, String choice) {
    }

    /**
     * The checkpoint {@code where} names: a checkpoint directory (with trainer_state.json), a
     * checkpoint root or run directory (its {@code latest}), or {@code latest} (the complete checkpoint
     * with the highest step under {@code runsDir}, which {@code notes} is told). Every file's checksum is verified.
     *
     * @throws CheckpointException one line naming the path or file and what is wrong
     */
    public static Found find(String where, Path runsDir, PrintStream notes) {
        Found found = find(where, runsDir);
        if (found.choice() != null) Terminal.printWrapped(notes, "ttpipe: " + found.choice());
        return found;
    }

    /** {@link #find(String, Path, PrintStream)}, saying nothing about which checkpoint {@code latest} chose. */
    public static Found find(String where, Path runsDir) {
        Latest latest = where.equals(LATEST) ? latest(runsDir) : null;
        Path dir = latest != null ? latest.dir() : locate(where);
        Path state = dir.resolve(STATE);
        if (!Files.isRegularFile(state)) {
            throw new CheckpointException(dir + ": no " + STATE + ", expected a checkpoint directory (step-NNNNNN), a checkpoint"
                    + " root or run directory with a 'latest' checkpoint, or 'latest'");
        }
        Map<String, Object> s;
        try {
            Object parsed = MiniJson.read(state);
            if (!(parsed instanceof Map<?, ?>)) throw new IllegalArgumentException("not a JSON object");
            @SuppressWarnings("unchecked") Map<String, Object> m = (Map<String, Object>) parsed;
            s = m;
        } catch (IOException | IllegalArgumentException e) {
            throw new CheckpointException(state + ": cannot be read (" + e.getMessage() + ")");
        }
        for (String key : List.of("format", "step", "optimizer_steps", "config", "files")) {
            if (!s.containsKey(key)) throw new CheckpointException(state + ": no '" + key + "', expected a ttpipe trainer state");
        }
        int step = count(state, s, "step"), optimizerSteps = count(state, s, "optimizer_steps");
        if (!(s.get("config") instanceof String config)) {
            throw new CheckpointException(state + ": 'config' is " + s.get("config") + ", expected the run's config as a string");
        }
        if (!(s.get("files") instanceof Map<?, ?> files) || files.isEmpty()) {
            throw new CheckpointException(state + ": 'files' lists no stage file");
        }
        for (Map.Entry<?, ?> e : files.entrySet()) {
            Path f = ListedFile.resolve(dir, (String) e.getKey(), state + ": 'files'");
            if (!(e.getValue() instanceof Map<?, ?> entry) || !(entry.get("sha256") instanceof String expected)) {
                throw new CheckpointException(state + ": 'files': " + e.getKey() + " has no sha256, expected {\"sha256\": \"...\"}");
            }
            if (!Files.isRegularFile(f)) throw new CheckpointException(f + ": missing (listed in " + STATE + ")");
            String actual;
            try {
                actual = SafeTensors.sha256(f);
            } catch (IOException ex) {
                throw new CheckpointException(f + ": cannot be read (" + ex.getMessage() + ")");
            }
            if (!actual.equals(expected)) {
                throw new CheckpointException(f + ": checksum " + actual.substring(0, 12) + "... does not match the "
                        + expected.substring(0, Math.min(12, expected.length())) + "... recorded in " + STATE
                        + " (the file is damaged or was changed)");
            }
        }
        return new Found(dir, step, optimizerSteps, config, s,
                latest == null ? null : "latest: " + dir + " (step " + step + ", the newest of " + latest.complete()
                        + " complete checkpoint" + (latest.complete() == 1 ? "" : "s") + " under " + runsDir + ")");
    }

    /** The newest complete checkpoint under a runs directory, and how many complete ones there are. */
    private record Latest(Path dir, int complete) {
    }

    /**
     * {@code latest}: the complete checkpoint (a {@code step-N} directory with its trainer_state.json, which is
     * renamed into place last) with the highest step of every run under {@code runsDir}, the one written last
     * among equal steps. Not the run whose name sorts last: a resume into another run directory, or a
     * {@code --run-dir} named by hand, would otherwise be passed over.
     */
    private static Latest latest(Path runsDir) {
        List<Path> complete = new ArrayList<>();
        if (Files.isDirectory(runsDir)) {
            try (Stream<Path> runs = Files.list(runsDir)) {
                for (Path run : runs.filter(Files::isDirectory).toList()) complete.addAll(complete(run.resolve("checkpoints")));
            } catch (IOException e) {
                throw new CheckpointException(runsDir + ": cannot be listed (" + e.getMessage() + ")");
            }
        }
        if (complete.isEmpty()) {
            throw new CheckpointException("latest: no run under " + runsDir + " has a complete checkpoint, expected"
                    + " RUN/checkpoints/step-NNNNNN with its " + STATE + " (or name a checkpoint or run directory)");
        }
        Comparator<Path> newest = Comparator.comparingLong(Checkpoints::stepOf).thenComparingLong(p -> writeTime(p.resolve(STATE)));
        return new Latest(complete.stream().max(newest).orElseThrow(), complete.size());
    }

    private static long writeTime(Path file) {
        try {
            return Files.getLastModifiedTime(file).toMillis();
        } catch (IOException e) {
            return Long.MIN_VALUE;
        }
    }

    private static Path locate(String where) {
        Path p = Path.of(where);
        if (!Files.isDirectory(p)) throw new CheckpointException(p + ": not a directory, expected a checkpoint, run directory or 'latest'");
        if (Files.isRegularFile(p.resolve(STATE))) return p;
        if (Files.isRegularFile(p.resolve(LATEST))) return follow(p);
        if (Files.isRegularFile(p.resolve("checkpoints").resolve(LATEST))) return follow(p.resolve("checkpoints"));
        return p;    // reported by find: no trainer_state.json
    }

    /** A count in the trainer state ({@code step}, {@code optimizer_steps}): an integer 0..2^31-1. */
    private static int count(Path state, Map<String, Object> s, String key) {
        if (!(s.get(key) instanceof Long n) || n < 0 || n > Integer.MAX_VALUE) {
            Object v = s.get(key);
            throw new CheckpointException(state + ": '" + key + "' is " + (v instanceof String text ? MiniJson.str(text) : v)
                    + ", expected an integer 0.." + Integer.MAX_VALUE);
        }
        return n.intValue();
    }

    private static Path follow(Path root) {
        try {
            String name = Files.readString(root.resolve(LATEST), StandardCharsets.UTF_8).strip();
            if (!name.matches("step-\\d+")) throw new CheckpointException(root.resolve(LATEST) + ": '" + name + "', expected step-NNNNNN");
            return root.resolve(name);
        } catch (IOException e) {
            throw new CheckpointException(root.resolve(LATEST) + ": cannot be read (" + e.getMessage() + ")");
        }
    }
}

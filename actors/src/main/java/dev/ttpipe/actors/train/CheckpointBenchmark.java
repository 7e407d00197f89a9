package dev.ttpipe.actors.train;

import dev.ttpipe.actors.runtime.PipelineRuntime;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.List;

/**
 * What checkpointing costs a training job: the step time without saving and with a save after every
 * step (the pipeline waits only for the host copy; the files are written in the background), the
 * background writers' bandwidth, and this disk's own sequential write bandwidth (a file of the same
 * size written and flushed) to compare it with.
 */
public final class CheckpointBenchmark {
    private CheckpointBenchmark() {
    }

    /**
     * @param plainStepMs median step time without saving
     * @param savingStepMs median step time with a save after every step (the save included)
     * @param copyMs median time the pipeline waited for the host copies of one save
     * @param checkpointBytes bytes of one checkpoint
     * @param writeMBps the background writers' bandwidth (bytes written / time writing)
     * @param diskMBps this disk's sequential write bandwidth, fsync included
     */
    public record Result(int steps, double plainStepMs, double savingStepMs, double copyMs, long checkpointBytes,
                         double writeMBps, double diskMBps) {
    }

    public static Result run(TrainingJob job, Path dir, int steps) throws IOException {
        Files.createDirectories(dir);
        double[] plain = new double[steps], saving = new double[steps];
        List<Checkpoints.Saved> saves;
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan());
             Checkpoints checkpoints = new Checkpoints(job, dir.resolve("checkpoints"), 1, 2)) {
            runtime.step(0, job.batches(0));                                          // warm-up
            for (int s = 0; s < steps; s++) {
                long t0 = System.nanoTime();
                runtime.step(1 + s, job.batches(1 + s));
                plain[s] = (System.nanoTime() - t0) / 1e6;
            }
            for (int s = 0; s < steps; s++) {
                int step = 1 + steps + s;
                long t0 = System.nanoTime();
                runtime.step(step, job.batches(step));
                checkpoints.save(runtime, step + 1);
                saving[s] = (System.nanoTime() - t0) / 1e6;
            }
            saves = checkpoints.awaitAll();
        }
        long bytes = saves.get(saves.size() - 1).bytes();
        double[] copy = saves.stream().mapToDouble(s -> s.copySeconds() * 1e3).toArray();
        double writeSeconds = saves.stream().mapToDouble(Checkpoints.Saved::writeSeconds).sum();
        long written = saves.stream().mapToLong(Checkpoints.Saved::bytes).sum();
        return new Result(steps, median(plain), median(saving), median(copy), bytes, written / writeSeconds / 1e6,
                diskBandwidth(dir, Math.max(bytes, 64L << 20)));
    }

    /** Writes {@code bytes} to a new file in {@code dir}, flushes it to the disk, deletes it: MB/s. */
    static double diskBandwidth(Path dir, long bytes) throws IOException {
        Path f = dir.resolve("disk-bandwidth.tmp");
        ByteBuffer buf = ByteBuffer.allocateDirect(1 << 20);
        long t0 = System.nanoTime();
        try (FileChannel ch = FileChannel.open(f, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING,
                StandardOpenOption.WRITE)) {
            for (long done = 0; done < bytes; done += buf.capacity()) {
                buf.clear();
                while (buf.hasRemaining()) ch.write(buf);
            }
            ch.force(true);
        } finally {
            Files.deleteIfExists(f);
        }
        return bytes / ((System.nanoTime() - t0) / 1e9) / 1e6;
    }

    static double median(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }
}

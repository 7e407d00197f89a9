package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.ConfigValidator;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.TrainingJob;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import javax.management.JMException;
import javax.management.ObjectName;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.RandomAccessFile;
import java.io.UncheckedIOException;
import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.ToLongFunction;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What {@code ./ttpipe train} runs with no config (the embedded default: a small GPT over 4 stages,
 * 1F1B, cpu backend, generated arithmetic), for {@code -Dttpipe.soak.steps} steps (20,000 by default),
 * through the same {@link TrainingJob#run} with a run directory. Every {@code steps / 40} steps, counted
 * from the run's {@code metrics.jsonl}, it samples heap used after a full GC, direct buffer memory
 * (the {@code direct} {@link BufferPoolMXBean}), resident memory ({@code VmRSS} of {@code /proc/self/status}),
 * native memory committed as NMT sees it (when the JVM runs with {@code -XX:NativeMemoryTracking=summary}),
 * open file descriptors ({@code /proc/self/fd}) and live threads, and prints the table.
 *
 * <p>No growth after warm-up: for each figure, the median of the last quarter of the samples is at
 * most the median of the second quarter plus {@value #GROWTH_PERCENT}% plus a small absolute slack
 * (heap and direct memory 4 MiB, RSS and NMT 32 MiB, descriptors and threads 2). Medians of whole
 * quarters, not single samples, so that one GC's timing or one page-cache spike does not decide; the
 * first quarter is warm-up (JIT, pools filling). The second and last quarters are half the run apart,
 * so the bound catches a steady leak of more than about {@code 10% x baseline / (steps / 2)} per step:
 * on a 20,000-step run with a heap of ~50 MiB that is ~500 bytes per step; a per-step leak of one
 * file descriptor or one thread is caught on any run longer than a few steps.
 *
 * <p>Everything it prints also goes, line by line and flushed, to {@code target/soak.txt} (or
 * {@code -Dttpipe.soak.out}), verdict included: a run of over an hour must not lose its table to surefire's
 * buffered capture of the fork's output (one 20,000-step run did: the fork could not say goodbye at the end).
 */
@Tag("long")
class TrainSoakTest {
    static final int GROWTH_PERCENT = 10;

    record Sample(int step, double seconds, long heap, long direct, long rss, long nmt, long fds, int threads) {
    }

    /** Where every printed line also goes, appended and flushed as it is printed. */
    private static final Path LOG = Path.of(System.getProperty("ttpipe.soak.out", "target/soak.txt"));

    /** Prints a line to stdout and appends it to {@link #LOG}. */
    private static void line(String s) {
        System.out.println(s);
        System.out.flush();
        try {
            Files.createDirectories(LOG.toAbsolutePath().getParent());
            Files.writeString(LOG, s + System.lineSeparator(), StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                    StandardOpenOption.APPEND);
        } catch (IOException e) {
            System.out.println("soak: cannot append to " + LOG + ": " + e.getMessage());
        }
    }

    @Test
    void theDefaultTrainingRunsWithoutGrowingMemoryDescriptorsOrThreads(@TempDir Path dir) throws Exception {
        int steps = Integer.getInteger("ttpipe.soak.steps", 20_000);
        int every = Math.max(1, steps / 40);
        line(String.format(Locale.ROOT, "soak: %d steps, a sample every %d, started %s", steps, every, Instant.now()));
        TtpipeConfig cfg = ConfigLoader.readResource(TrainCommand.DEFAULT_CONFIG);
        cfg.training.maxSteps = steps;
        ConfigValidator.validate(cfg);
        TrainingJob job = TrainingJob.fromConfig(cfg);
        job.logEvery(every);
        Path runDir = Files.createDirectories(dir.resolve("run"));
        List<Sample> samples = new ArrayList<>();
        long t0 = System.nanoTime();
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan());
             PrintStream out = new PrintStream(OutputStream.nullOutputStream(), true, StandardCharsets.UTF_8)) {
            CompletableFuture<TrainingJob.Result> run = CompletableFuture.supplyAsync(() -> {
                try {
                    return job.run(runtime, runDir, out);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
            StepCounter counter = new StepCounter(runDir.resolve("metrics.jsonl"));
            int next = every;
            printHeader();
            while (!run.isDone()) {
                int done = counter.steps();
                if (done >= next) {
                    Sample s = sample(done, (System.nanoTime() - t0) / 1e9);
                    samples.add(s);
                    print(s);                                     // as it goes: a long run shows its progress
                    next = (done / every + 1) * every;
                } else {
                    Thread.sleep(20);
                }
            }
            TrainingJob.Result result = run.get(1, TimeUnit.MINUTES);
            assertEquals(steps, result.losses().length);
            assertTrue(Double.isFinite(result.losses()[steps - 1]), "the last loss is " + result.losses()[steps - 1]);
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        print(samples, steps, seconds);
        assertTrue(samples.size() >= 8, "only " + samples.size() + " samples: too few steps to judge growth");
        noGrowth(samples, "heap after GC", Sample::heap, 4L << 20);
        noGrowth(samples, "direct buffers", Sample::direct, 4L << 20);
        noGrowth(samples, "RSS", Sample::rss, 32L << 20);
        if (samples.get(0).nmt() > 0) noGrowth(samples, "NMT committed", Sample::nmt, 32L << 20);
        noGrowth(samples, "open fds", Sample::fds, 2);
        noGrowth(samples, "threads", s -> s.threads(), 2);
        line("soak: passed, no figure grew past its bound");
    }

    /** The last quarter's median at most the second quarter's plus GROWTH_PERCENT% plus {@code slack}. */
    private static void noGrowth(List<Sample> samples, String what, ToLongFunction<Sample> f, long slack) {
        int q = samples.size() / 4;
        long second = median(samples.subList(q, 2 * q), f);
        long last = median(samples.subList(samples.size() - q, samples.size()), f);
        long bound = second + second * GROWTH_PERCENT / 100 + slack;
        line(String.format(Locale.ROOT, "%-15s second quarter %,15d  last quarter %,15d  bound %,15d  %s", what, second, last,
                bound, last <= bound ? "ok" : "GREW"));
        assertTrue(last <= bound, what + " grew: median " + second + " in the second quarter, " + last
                + " in the last (bound " + bound + ")");
    }

    private static long median(List<Sample> xs, ToLongFunction<Sample> f) {
        long[] v = xs.stream().mapToLong(f).sorted().toArray();
        return v[v.length / 2];
    }

    private static Sample sample(int step, double seconds) throws IOException {
        System.gc();
        System.gc();
        long heap = ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed();
        long direct = ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class).stream()
                .filter(b -> b.getName().equals("direct")).mapToLong(BufferPoolMXBean::getMemoryUsed).sum();
        long fds;
        try (Stream<Path> s = Files.list(Path.of("/proc/self/fd"))) {
            fds = s.count();
        }
        return new Sample(step, seconds, heap, direct, rssBytes(), nmtCommittedBytes(), fds,
                ManagementFactory.getThreadMXBean().getThreadCount());
    }

    /** VmRSS from /proc/self/status, in bytes. */
    private static long rssBytes() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
        }
        return -1;
    }

    /** Total committed bytes of NMT's summary, or 0 when native memory tracking is off. */
    private static long nmtCommittedBytes() {
        try {
            Object text = ManagementFactory.getPlatformMBeanServer().invoke(
                    new ObjectName("com.sun.management:type=DiagnosticCommand"), "vmNativeMemory",
                    new Object[]{new String[]{"summary", "scale=KB"}}, new String[]{String[].class.getName()});
            Matcher m = Pattern.compile("Total: reserved=\\d+KB, committed=(\\d+)KB")
                    .matcher(String.valueOf(text));
            return m.find() ? Long.parseLong(m.group(1)) * 1024 : 0;
        } catch (JMException e) {
            return 0;
        }
    }

    private static void printHeader() {
        line(String.format(Locale.ROOT, "%7s %8s %10s %10s %10s %10s %5s %7s", "step", "time s", "heap MiB", "direct MiB",
                "RSS MiB", "NMT MiB", "fds", "threads"));
    }

    private static void print(Sample s) {
        line(String.format(Locale.ROOT, "%7d %8.1f %10.1f %10.1f %10.1f %10.1f %5d %7d", s.step(), s.seconds(), mib(s.heap()),
                mib(s.direct()), mib(s.rss()), mib(s.nmt()), s.fds(), s.threads()));
    }

    private static void print(List<Sample> samples, int steps, double seconds) {
        line(String.format(Locale.ROOT, "soak: %d steps in %.0f s (%.1f ms/step, sampling included), %d samples", steps,
                seconds, 1000 * seconds / steps, samples.size()));
    }

    private static double mib(long bytes) {
        return bytes / (1024.0 * 1024.0);
    }

    /** Steps done so far: the lines of metrics.jsonl (one per step, flushed each step), read as the file grows. */
    private static final class StepCounter {
        private final Path file;
        private long position;
        private int lines;

        StepCounter(Path file) {
            this.file = file;
        }

        int steps() throws IOException {
            if (!Files.exists(file)) return 0;
            try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "r")) {
                long length = f.length();
                if (length <= position) return lines;
                byte[] buf = new byte[(int) (length - position)];
                f.seek(position);
                f.readFully(buf);
                position = length;
                for (byte b : buf) if (b == '\n') lines++;
                return lines;
            }
        }
    }
}

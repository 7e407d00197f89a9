package dev.ttpipe.actors.tune;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.ConfigValidator;
import dev.ttpipe.actors.config.ConfigWriter;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.TrainingJob;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A few real training steps of a config through {@link TrainingJob} and {@link PipelineRuntime},
 * as {@code ttpipe train} runs them (no run directory, nothing printed): what calibration and
 * {@code --verify-top} measure.
 */
public final class Trial {
    /** The first steps warm up (JIT, allocations, first touches) and are left out of medians. */
    public static final int WARMUP_STEPS = 2;

    private Trial() {
    }

    /** The steps' reports, the warm-up ones included, and the job that ran them. */
    public record Result(TrainingJob job, List<Coordinator.StepReport> reports, List<long[]> deviceCpuNs) {
        /** Median step seconds over the steps after the warm-up ones. */
        public double medianSeconds() {
            double[] s = reports.subList(Math.min(WARMUP_STEPS, reports.size() - 1), reports.size()).stream()
                    .mapToDouble(Coordinator.StepReport::seconds).toArray();
            return median(s);
        }

        /** The reports after warm-up. */
        public List<Coordinator.StepReport> measured() {
            return reports.subList(firstMeasured(), reports.size());
        }

        /** Per step after warm-up, the CPU time each rank's device thread spent in it (0 where the JVM cannot tell). */
        public List<long[]> measuredCpuNs() {
            return deviceCpuNs.subList(firstMeasured(), deviceCpuNs.size());
        }

        private int firstMeasured() {
            return Math.min(WARMUP_STEPS, reports.size() - 1);
        }
    }

    /** Runs {@code steps} steps of {@code cfg} (validated first). */
    public static Result run(TtpipeConfig cfg, int steps) {
        return interleaved(List.of(cfg), steps).get(0);
    }

    /**
     * Runs {@code steps} steps of every config, all started at once and stepped in turn (step 0 of
     * each, then step 1 of each, ...), so that a change in the machine's load falls on all of them
     * alike: on a shared host the figures compare with each other even when they move together.
     */
    public static List<Result> interleaved(List<TtpipeConfig> cfgs, int steps) {
        List<TrainingJob> jobs = new ArrayList<>();
        for (TtpipeConfig c : cfgs) {
            TtpipeConfig cfg = copy(c);
            cfg.telemetry.port = 0;               // no /metrics endpoint and no watchdog for a trial
            cfg.telemetry.stallWarningS = 0;
            ConfigValidator.validate(cfg);
            jobs.add(TrainingJob.fromConfig(cfg));
        }
        List<PipelineRuntime> runtimes = new ArrayList<>();
        List<List<Coordinator.StepReport>> reports = new ArrayList<>();
        List<List<long[]>> cpu = new ArrayList<>();
        try {
            for (TrainingJob job : jobs) {
                runtimes.add(PipelineRuntime.start(job.plan()));
                reports.add(new ArrayList<>());
                cpu.add(new ArrayList<>());
            }
            for (int s = 0; s < steps; s++) {
                for (int k = 0; k < jobs.size(); k++) {
                    int ranks = jobs.get(k).plan().ranks();
                    long[] before = deviceCpuNs(ranks);   // the other runtimes are idle: their threads add nothing
                    reports.get(k).add(runtimes.get(k).step(s, jobs.get(k).batches(s)));
                    long[] after = deviceCpuNs(ranks);
                    for (int r = 0; r < ranks; r++) after[r] -= before[r];
                    cpu.get(k).add(after);
                }
            }
        } finally {
            for (PipelineRuntime r : runtimes) r.close();
        }
        List<Result> out = new ArrayList<>();
        for (int k = 0; k < jobs.size(); k++) out.add(new Result(jobs.get(k), reports.get(k), cpu.get(k)));
        return out;
    }

    private static final Pattern DEVICE_THREAD = Pattern.compile("ttpipe-rank(\\d+)-device");

    /**
     * CPU time so far of each rank's device thread (the stage's command queue, where its kernels run when
     * a rank computes on one thread), summed over the runtimes of this JVM; 0 where the JVM cannot tell.
     */
    static long[] deviceCpuNs(int ranks) {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        long[] out = new long[ranks];
        if (!mx.isThreadCpuTimeSupported()) return out;
        long[] ids = mx.getAllThreadIds();
        ThreadInfo[] infos = mx.getThreadInfo(ids, 0);
        for (int i = 0; i < ids.length; i++) {
            if (infos[i] == null) continue;
            Matcher m = DEVICE_THREAD.matcher(infos[i].getThreadName());
            if (!m.matches()) continue;
            int r = Integer.parseInt(m.group(1));
            long t = mx.getThreadCpuTime(ids[i]);
            if (r < ranks && t > 0) out[r] += t;
        }
        return out;
    }

    /** An independent copy of {@code cfg} (through its YAML, so every key survives as train would read it). */
    public static TtpipeConfig copy(TtpipeConfig cfg) {
        TtpipeConfig c = ConfigLoader.read(ConfigWriter.toYaml(cfg), cfg.source, null);
        c.source = cfg.source;
        return c;
    }

    static double median(double[] values) {
        double[] s = values.clone();
        Arrays.sort(s);
        int n = s.length;
        return n == 0 ? Double.NaN : n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    }
}

package dev.ttpipe.actors.tune;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.ConfigValidator;
import dev.ttpipe.actors.config.PipelineMode;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.MemoryPlan;
import dev.ttpipe.actors.runtime.ActionEvent;
import dev.ttpipe.actors.telemetry.RunLinks;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.device.SimProfile;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.schedules.CostModel;
import dev.ttpipe.schedules.SimResult;
import dev.ttpipe.schedules.Simulator;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.checkpoint.MiniJson;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;

/**
 * Fits {@link LayerCosts} to a model on a backend, three ways: from short measured runs of the config
 * (through the real runtime) at several microbatch sizes; from the metrics of earlier runs
 * ({@code --costs-from}); or from a device cost model (the sim backend's figures or a named
 * {@link SimProfile}).
 *
 * <p>Measured runs use ZB-H1, which times F, I and W separately. On the cpu backend the ranks are
 * threads sharing the host's cores, so each measured action is turned into its work at full speed:
 * its duration weighted, moment by moment, by min(1, processors / ranks busy then), from the measured
 * timeline itself. Per-stage costs become per-block costs (the blocks are alike; the first and last
 * stages also carry the embedding and the head), and each is fitted as {@code fixed + perSample x
 * microbatch size} by least squares over the sizes measured: small microbatches cost more per sample.
 */
public final class Calibration {
    private Calibration() {
    }

    /** One run's figures at one microbatch size: per stage the work of F, I, W, and the step. */
    record Measurement(int microbatchSize, List<StageSlice> slices, double[] f, double[] i, double[] w, double stepSeconds,
                       long[] memoryPeak, int[] peakActivations, double optimizerSecondsPerParam, double hopSeconds,
                       int[] split, double cpuOverEstimate, double[] cpuScale) {
    }

    /** Measured: {@code steps} steps (the first {@link Trial#WARMUP_STEPS} left out) at each microbatch size chosen. */
    public static LayerCosts measure(TtpipeConfig cfg, int steps, PrintStream out) {
        int batch = cfg.training.batchSize;
        int m0 = batch / cfg.pipeline().numMicrobatches;
        int ddp = ConfigValidator.ddpSize(cfg.device);
        List<Integer> sizes = sizes(batch, ddp, m0);
        ModelSpec model = JobPlan.model(cfg, Tuning.vocab(cfg));
        if (out != null) {
            out.printf(Locale.ROOT, "calibrating: zb-h1 at microbatch sizes %s, %d steps each, stepped in turn (%s backend)...%n",
                    sizes, steps, cfg.device.backend);
        }
        List<Trial.Result> results = Trial.interleaved(calibrationConfigs(cfg, sizes), steps);
        return fit(cfg, model, measurements(sizes, results), out, true);
    }

    /** The config's calibration runs: ZB-H1 (F, I and W timed apart) at each microbatch size, no recompute. */
    static List<TtpipeConfig> calibrationConfigs(TtpipeConfig cfg, List<Integer> sizes) {
        List<TtpipeConfig> configs = new ArrayList<>();
        for (int mbs : sizes) {
            TtpipeConfig c = Trial.copy(cfg);
            c.pipeline().numMicrobatches = cfg.training.batchSize / mbs;
            c.pipeline().schedule = "zb-h1";
            c.pipeline().virtualStages = 1;
            c.pipeline().mode = PipelineMode.STATIC;
            c.transformer.runnerType = "default";
            configs.add(c);
        }
        return configs;
    }

    private static List<Measurement> measurements(List<Integer> sizes, List<Trial.Result> results) {
        List<Measurement> runs = new ArrayList<>();
        int cores = Runtime.getRuntime().availableProcessors();
        for (int k = 0; k < sizes.size(); k++) runs.add(fromTrial(results.get(k), sizes.get(k), cores));
        return runs;
    }

    /** Costs calibrated in the same interleaved run as other configs, and those configs' results. */
    public record Beside(LayerCosts costs, List<Trial.Result> others) {
    }

    /**
     * Runs {@code others} and calibration runs at {@code sizes} stepped in turn, {@code steps} steps each, and
     * fits the costs again from the calibration runs: costs measured under the load the others ran under.
     */
    public static Beside measureBeside(TtpipeConfig cfg, List<Integer> sizes, List<TtpipeConfig> others, int steps) {
        List<TtpipeConfig> all = new ArrayList<>(others);
        all.addAll(calibrationConfigs(cfg, sizes));
        List<Trial.Result> results = Trial.interleaved(all, steps);
        List<Trial.Result> calibration = results.subList(others.size(), results.size());
        LayerCosts costs = fit(cfg, JobPlan.model(cfg, Tuning.vocab(cfg)), measurements(sizes, calibration), null, true);
        return new Beside(costs, results.subList(0, others.size()));
    }

    /**
     * The microbatch sizes measured: every one the search may pick (divisors of the batch, multiples
     * of the DDP size) when there are at most {@link #MAX_SIZES}; else the smallest, the largest, the
     * config's and sizes spread evenly on a log scale between.
     */
    static List<Integer> sizes(int batch, int ddp, int own) {
        List<Integer> all = new ArrayList<>();
        for (int s = ddp; s <= batch; s++) if (batch % s == 0 && s % ddp == 0) all.add(s);
        if (all.size() <= MAX_SIZES) return all;
        TreeSet<Integer> pick = new TreeSet<>(List.of(all.get(0), all.get(all.size() - 1), own));
        for (int k = 1; pick.size() < MAX_SIZES && k < MAX_SIZES; k++) {
            double target = Math.exp(Math.log(all.get(0)) + k * (Math.log(all.get(all.size() - 1)) - Math.log(all.get(0))) / (MAX_SIZES - 1));
            int nearest = all.stream().min(Comparator.comparingDouble(x -> Math.abs(Math.log(x) - Math.log(target)))).orElseThrow();
            pick.add(nearest);
        }
        return new ArrayList<>(pick);
    }

    static final int MAX_SIZES = 6;

    /**
     * The share of the cores the ranks of {@code r} got while it ran (their device threads' CPU time over the
     * work the timeline shows), NaN where unknown or not a cpu run: the host's load at that time.
     */
    public static double coreShare(Trial.Result r) {
        JobPlan plan = r.job().plan();
        return fromTrial(r, plan.microbatchSize(), Runtime.getRuntime().availableProcessors()).cpuOverEstimate();
    }

    /** The figures of one trial: each action's work at full speed (see the class comment). */
    private static Measurement fromTrial(Trial.Result r, int mbs, int cores) {
        JobPlan plan = r.job().plan();
        int stages = plan.stages();
        int threads = plan.meshOptions().threads() > 0 ? plan.meshOptions().threads() : 1;
        int processors = plan.backend() == Backend.CPU ? Math.max(1, cores / threads) : 0;
        List<List<List<Double>>> works = new ArrayList<>();      // [kind][stage] -> each action's work
        for (int k = 0; k < 3; k++) {
            List<List<Double>> perStage = new ArrayList<>();
            for (int s = 0; s < stages; s++) perStage.add(new ArrayList<>());
            works.add(perStage);
        }
        double optWork = 0, hop = 0;
        int hops = 0;
        List<Double> stepSeconds = new ArrayList<>();
        long[] peak = new long[plan.ranks()];
        double cpuOverWall = 0;
        int cpuSteps = 0;
        double[] scaleSum = new double[plan.ranks()];
        int[] scaleCount = new int[plan.ranks()];
        for (int st = 0; st < r.measured().size(); st++) {
            Coordinator.StepReport step = r.measured().get(st);
            List<ActionEvent> compute = step.events().stream().filter(ActionEvent::isCompute).toList();
            double[] work = workAtFullSpeed(compute, processors);
            // Load from outside this process slows actions beyond what the ranks' own sharing explains: where the
            // device threads' CPU time is known, each rank's work is scaled to it (one thread per rank computes).
            long[] cpu = r.measuredCpuNs().get(st);
            if (threads == 1 && processors > 0) {
                double[] rankWork = new double[plan.ranks()];
                for (int k = 0; k < compute.size(); k++) rankWork[compute.get(k).rank()] += work[k];
                double[] scale = new double[plan.ranks()];
                for (int rk = 0; rk < scale.length; rk++) {
                    scale[rk] = cpu[rk] > 0 && rankWork[rk] > 0 ? cpu[rk] / 1e9 / rankWork[rk] : 1;
                    if (cpu[rk] > 0 && rankWork[rk] > 0) {
                        cpuOverWall += scale[rk];
                        cpuSteps++;
                    }
                }
                for (int rk = 0; rk < scale.length; rk++) {
                    scaleSum[rk] += scale[rk];
                    scaleCount[rk]++;
                }
            }
            for (int k = 0; k < compute.size(); k++) {
                ActionEvent e = compute.get(k);
                int kind = switch (e.kind()) {
                    case F -> 0;
                    case I -> 1;
                    case W -> 2;
                    default -> -1;
                };
                if (e.kind() == ActionKind.B) {              // not split: halves by the cost model's rule
                    works.get(1).get(e.stage()).add(work[k] / 2);
                    works.get(2).get(e.stage()).add(work[k] / 2);
                } else if (kind >= 0) {
                    works.get(kind).get(e.stage()).add(work[k]);
                } else {
                    optWork += work[k];                   // REDUCE_GRAD, OPTIMIZER_STEP
                }
            }
            for (ActionEvent e : step.events()) {
                if (e.kind() == ActionKind.SEND_F || e.kind() == ActionKind.SEND_B) {
                    hop += e.durationNs() / 1e9;
                    hops++;
                }
            }
            stepSeconds.add(step.seconds());
            for (int k = 0; k < peak.length; k++) peak[k] = Math.max(peak[k], step.memoryPeak()[k]);
        }
        double[][] mean = new double[3][stages];         // the median action: robust to a burst of load from elsewhere
        for (int k = 0; k < 3; k++) {
            for (int s = 0; s < stages; s++) {
                double[] v = works.get(k).get(s).stream().mapToDouble(Double::doubleValue).toArray();
                mean[k][s] = v.length == 0 ? 0 : Trial.median(v);
            }
        }
        long params = 0;
        for (StageSlice s : plan.slices()) params += sliceParams(plan.model(), s);
        SimResult order = Simulator.simulate(plan.schedule(), CostModel.uniform(1, 2, 1, 1, 0));
        int[] peakAct = new int[plan.ranks()];
        for (int k = 0; k < peakAct.length; k++) peakAct[k] = order.peakActivations(k);
        int[] split = new int[plan.ranks()];
        for (StageSlice s : plan.slices()) split[s.rank()] += s.blocks();
        return new Measurement(mbs, plan.slices(), mean[0], mean[1], mean[2],
                Trial.median(stepSeconds.stream().mapToDouble(Double::doubleValue).toArray()), peak, peakAct,
                optWork / r.measured().size() / Math.max(1, params), hops == 0 ? 0 : hop / hops, split,
                cpuSteps == 0 ? Double.NaN : cpuOverWall / cpuSteps, stageScale(plan, scaleSum, scaleCount));
    }

    /** Per stage, its rank's mean ratio of CPU time to the timeline's work (1 where unknown). */
    private static double[] stageScale(JobPlan plan, double[] sum, int[] count) {
        double[] out = new double[plan.stages()];
        for (StageSlice s : plan.slices()) out[s.index()] = count[s.rank()] == 0 ? 1 : sum[s.rank()] / count[s.rank()];
        return out;
    }

    /**
     * Each action's work at full speed: its duration weighted by min(1, processors / k(t)), k(t) the
     * actions running at time t (0 processors: no sharing, the durations as they are).
     */
    static double[] workAtFullSpeed(List<ActionEvent> events, int processors) {
        int n = events.size();
        double[] out = new double[n];
        if (processors <= 0) {
            for (int k = 0; k < n; k++) out[k] = events.get(k).durationNs() / 1e9;
            return out;
        }
        long[] times = new long[2 * n];
        for (int k = 0; k < n; k++) {
            times[2 * k] = events.get(k).startNs();
            times[2 * k + 1] = events.get(k).endNs();
        }
        Arrays.sort(times);
        int[] delta = new int[times.length];
        for (ActionEvent e : events) {
            delta[Arrays.binarySearch(times, e.startNs())]++;
            delta[Arrays.binarySearch(times, e.endNs())]--;
        }
        // equal times may take any of their indices: the intervals between them are empty, so the prefix is the same
        double[] prefix = new double[times.length];
        int running = 0;
        for (int k = 0; k + 1 < times.length; k++) {
            running += delta[k];
            double rate = running <= 0 ? 1 : Math.min(1.0, (double) processors / running);
            prefix[k + 1] = prefix[k] + rate * (times[k + 1] - times[k]) / 1e9;
        }
        for (int k = 0; k < n; k++) {
            ActionEvent e = events.get(k);
            out[k] = prefix[Arrays.binarySearch(times, e.endNs())] - prefix[Arrays.binarySearch(times, e.startNs())];
        }
        return out;
    }

    /** From the metrics.jsonl of earlier `ttpipe train` runs (their own config.yaml each). */
    public static LayerCosts fromRuns(TtpipeConfig cfg, List<Path> runDirs, PrintStream out) {
        ModelSpec model = JobPlan.model(cfg, Tuning.vocab(cfg));
        List<Measurement> runs = new ArrayList<>();
        RunLinks links = null;
        for (Path dir : runDirs) {
            try {
                RunLinks measured = RunLinks.read(dir);
                if (measured != null) links = measured;                 // a multi-process run's links: the last run's
            } catch (IllegalArgumentException e) {
                throw new UserInputException("--costs-from: " + e.getMessage());
            }
            TtpipeConfig runCfg = ConfigLoader.load(dir.resolve("config.yaml"));
            JobPlan plan = JobPlan.from(runCfg, Tuning.vocab(runCfg));
            List<Map<?, ?>> steps = new ArrayList<>();
            Path metrics = dir.resolve("metrics.jsonl");
            try {
                for (String line : Files.readAllLines(metrics, StandardCharsets.UTF_8)) {
                    if (line.isBlank()) continue;
                    if (MiniJson.parse(line) instanceof Map<?, ?> m && m.get("stage_ms") instanceof Map<?, ?>) steps.add(m);
                }
            } catch (IOException | IllegalArgumentException e) {
                throw new UserInputException("--costs-from: " + metrics + " cannot be read (" + e.getMessage()
                        + "), expected the run directory of a `ttpipe train` run");
            }
            if (steps.isEmpty()) {
                throw new UserInputException("--costs-from: " + metrics
                        + " has no step with per-stage costs (stage_ms), expected a run of this ttpipe version");
            }
            List<Map<?, ?>> used = steps.size() > Trial.WARMUP_STEPS ? steps.subList(Trial.WARMUP_STEPS, steps.size()) : steps;
            int stages = plan.stages();
            double[] f = new double[stages], i = new double[stages], w = new double[stages];
            double[] seconds = new double[used.size()];
            long[] peak = new long[plan.ranks()];
            double hop = 0;
            for (int k = 0; k < used.size(); k++) {
                Map<?, ?> m = used.get(k);
                Map<?, ?> c = (Map<?, ?>) m.get("stage_ms");
                for (int s = 0; s < stages; s++) {
                    f[s] += number(((List<?>) c.get("f")).get(s)) / 1e3 / used.size();
                    i[s] += number(((List<?>) c.get("i")).get(s)) / 1e3 / used.size();
                    w[s] += number(((List<?>) c.get("w")).get(s)) / 1e3 / used.size();
                }
                hop += number(c.get("comm")) / 1e3 / used.size();
                seconds[k] = number(m.get("seconds"));
                if (m.get("memory_peak_bytes") instanceof List<?> mem) {
                    for (int r = 0; r < peak.length && r < mem.size(); r++) peak[r] = Math.max(peak[r], (long) number(mem.get(r)));
                }
            }
            SimResult order = Simulator.simulate(plan.schedule(), CostModel.uniform(1, 2, 1, 1, 0));
            int[] peakAct = new int[plan.ranks()];
            for (int k = 0; k < peakAct.length; k++) peakAct[k] = order.peakActivations(k);
            int[] split = new int[plan.ranks()];
            for (StageSlice s : plan.slices()) split[s.rank()] += s.blocks();
            runs.add(new Measurement(plan.microbatchSize(), plan.slices(), f, i, w, Trial.median(seconds), peak, peakAct,
                    Double.NaN, hop, split, Double.NaN, null));
            if (out != null) {
                out.printf(Locale.ROOT, "costs from %s: %d steps after the first %d, microbatch size %d%n", dir, used.size(),
                        Trial.WARMUP_STEPS, plan.microbatchSize());
            }
        }
        return fit(cfg, model, runs, out, false, links);
    }

    private static double number(Object o) {
        return o instanceof Number n ? n.doubleValue() : 0;
    }

    /**
     * Per-block costs from per-stage ones, then each fitted over the microbatch sizes. With stages
     * holding only blocks, a block costs their mean per block and the end stages' rest is the
     * embedding's and the head's; with two stages or one, the embedding and head are weighed against
     * a block by their FLOPs (as the automatic split does).
     */
    static LayerCosts fit(TtpipeConfig cfg, ModelSpec model, List<Measurement> runs, PrintStream out, boolean sharedCores) {
        return fit(cfg, model, runs, out, sharedCores, null);
    }

    /** {@link #fit}; with {@code links} (a multi-process run's, measured before its step 1), each hop is its link's figure. */
    static LayerCosts fit(TtpipeConfig cfg, ModelSpec model, List<Measurement> runs, PrintStream out, boolean sharedCores,
                          RunLinks links) {
        runs.sort((a, b) -> Integer.compare(a.microbatchSize(), b.microbatchSize()));
        int n = model.numBlocks();
        int seq = cfg.transformer.effectiveSequenceLength();
        int sizes = runs.size();
        int[] mbs = new int[sizes];
        for (int k = 0; k < sizes; k++) mbs[k] = runs.get(k).microbatchSize();
        double block = model.blockTrainingFlops(seq, seq);
        double rhoHead = (model.headTrainingFlops(seq) + 0.05 * block) / block;
        double rhoEmbed = 4.0 * model.embeddingDim() * seq / block;
        // By CPU time: what the ranks' work takes on a processor of their own.
        double[][][] cpu = perBlockBySize(runs, rhoEmbed, rhoHead, true);
        double[][] blk = cpu[0];
        // The embedding and head are what is left of the end stages after their blocks: small and noisy, so a
        // least-squares line over the sizes rather than a curve through every point.
        LayerCosts.Curve[] fitBlock = curves(mbs, cpu[0]), fitEmbed = lines(mbs, cpu[1]), fitHead = lines(mbs, cpu[2]);
        LayerCosts.Curve[] bf = new LayerCosts.Curve[n], bi = new LayerCosts.Curve[n], bw = new LayerCosts.Curve[n];
        Arrays.fill(bf, fitBlock[0]);
        Arrays.fill(bi, fitBlock[1]);
        Arrays.fill(bw, fitBlock[2]);
        long[] blockParams = new long[n];
        Arrays.fill(blockParams, model.blockParameters());
        long embedParams = embedParams(model), headParams = headParams(model);
        double stateBytes = stateBytesPerParam(cfg);
        double input = 4.0 * seq * model.embeddingDim();
        double headBytes = 4.0 * seq * model.vocabSize() * 2;
        List<String> notes = new ArrayList<>();
        double analytic = analyticActivationBytes(model, seq);
        double act = fittedActivationBytes(runs, model, stateBytes, blockParams[0], embedParams, headParams);
        if (Double.isNaN(act)) {
            act = analytic;
            notes.add(String.format(Locale.ROOT, "activation bytes per block per sample: %s (an estimate, 2 x s x h x (34 + 5 a s / h),"
                    + " Korthikanti et al. 2022, in fp32; no memory peaks were measured)", bytes(act)));
        } else {
            notes.add(String.format(Locale.ROOT, "activation bytes per block per sample: %s fitted from the measured memory peaks"
                    + " (the estimate 2 s h (34 + 5 a s / h) gives %s)", bytes(act), bytes(analytic)));
        }
        double opt = runs.stream().mapToDouble(Measurement::optimizerSecondsPerParam).filter(x -> !Double.isNaN(x)).average().orElse(0);
        double hopSeconds = runs.stream().mapToDouble(Measurement::hopSeconds).average().orElse(0);
        LayerCosts.Hop hop = links == null ? LayerCosts.Hop.latency(hopSeconds) : links::seconds;
        if (links != null) {
            notes.add(String.format(Locale.ROOT, "hops: the links %s measured before step 1 (latency + bytes over bandwidth, the"
                    + " mean of both directions; one activation frame of that run %.3f ms)", links.file(), links.meanHopMs()));
        }
        double processors = 0;
        if (sharedCores && cfg.device.backend == Backend.CPU) {
            int ranks = cfg.pipeline().ranks();
            int threads = cfg.device.threads > 0 ? cfg.device.threads : Math.max(1, Runtime.getRuntime().availableProcessors() / ranks);
            processors = Math.max(1, Runtime.getRuntime().availableProcessors() / threads);
        }
        // Other processes' load, as the share of the cores the ranks got: predictions keep it (the next minutes of a
        // shared machine look like the last ones more than like an idle one).
        double cpuRatio = runs.stream().mapToDouble(Measurement::cpuOverEstimate).filter(x -> !Double.isNaN(x)).average().orElse(Double.NaN);
        double effective = processors > 0 && !Double.isNaN(cpuRatio) ? processors * Math.min(1, cpuRatio) : processors;
        LayerCosts asRun = new LayerCosts(bf, bi, bw, fitEmbed, fitHead, act, input, headBytes, blockParams,
                embedParams, headParams, stateBytes, hop, effective, cpuRatio, opt, LayerCosts.Curve.constant(0), notes);
        // The rest of the step (the runtime's own work, which the simulator does not see): measured step minus
        // prediction, fitted as a + b x microbatches over the runs by least squares.
        int k0 = runs.size();
        double[] m = new double[k0], residual = new double[k0], predicted = new double[k0];
        for (int k = 0; k < k0; k++) {
            Measurement run = runs.get(k);
            m[k] = cfg.training.batchSize / run.microbatchSize();
            Prediction p = new Search(asRun, job(cfg)).predict(new Candidate("zb-h1", 1, (int) m[k], run.split(), false));
            predicted[k] = p == null ? Double.NaN : p.stepSeconds();
            residual[k] = run.stepSeconds() - predicted[k];
        }
        // A least-squares line over the counts: each calibration step is noisy on a shared host, a line averages them.
        double[] ab = line(m, residual);
        LayerCosts.Curve overhead = LayerCosts.Curve.affine(ab[0], ab[1]);
        LayerCosts costs = new LayerCosts(bf, bi, bw, fitEmbed, fitHead, act, input, headBytes, blockParams, embedParams,
                headParams, stateBytes, hop, effective, cpuRatio, opt, overhead, notes);
        for (int k = 0; k < k0; k++) {
            notes.add(String.format(Locale.ROOT, "  calibration run, %d microbatches of %d: measured %.1f ms/step, simulated %.1f,"
                    + " with the runtime's overhead %.1f", (int) m[k], runs.get(k).microbatchSize(), runs.get(k).stepSeconds() * 1e3,
                    predicted[k] * 1e3, (predicted[k] + overhead.between((int) m[k])) * 1e3));
        }
        notes.add(String.format(Locale.ROOT, "per block, by microbatch size: F %s; I %s; W %s", fitBlock[0], fitBlock[1], fitBlock[2]));
        notes.add(String.format(Locale.ROOT, "embedding F+I+W %s; head F+I+W %s (least-squares lines)", line(fitEmbed), line(fitHead)));
        for (int k = 0; k < sizes; k++) {
            double perSample = (blk[0][k] + blk[1][k] + blk[2][k]) / mbs[k];
            notes.add(String.format(Locale.ROOT, "  microbatch %d: a block's F+I+W %.3f ms, %.3f ms per sample", mbs[k],
                    (blk[0][k] + blk[1][k] + blk[2][k]) * 1e3, perSample * 1e3));
        }
        notes.add(String.format(Locale.ROOT, "optimizer and gradient reduction %.2f ns per parameter; hop %.3f ms; the runtime's"
                        + " overhead (measured step - simulated) %.2f ms + %.3f ms x microbatches%s",
                opt * 1e9, (links == null ? hopSeconds : links.meanHopMs() / 1e3) * 1e3, ab[0] * 1e3, ab[1] * 1e3, processors > 0 ? String.format(Locale.ROOT, "; ranks share %.0f processors (cpu cores / threads per rank)", processors) : ""));
        if (!Double.isNaN(cpuRatio)) {
            notes.add(String.format(Locale.ROOT, "the ranks' device threads got %.0f%% of the time the timeline gives them (other"
                    + " processes took the rest): work taken from CPU time, and predictions share %.2f of the %.0f processors", 100 * cpuRatio,
                    effective, processors));
        }
        if (runs.size() == 1) {
            notes.add("one microbatch size measured: costs taken as proportional to it (give a run at a second size to fit the curve)");
        }
        return costs;
    }

    /** {a, b} of the least-squares line y = a + b x (b = 0 for one point or a negative slope). */
    static double[] line(double[] x, double[] y) {
        int n = x.length;
        double mx = 0, my = 0;
        for (int k = 0; k < n; k++) {
            mx += x[k] / n;
            my += y[k] / n;
        }
        double sxy = 0, sxx = 0;
        for (int k = 0; k < n; k++) {
            sxy += (x[k] - mx) * (y[k] - my);
            sxx += (x[k] - mx) * (x[k] - mx);
        }
        double b = sxx == 0 ? 0 : Math.max(0, sxy / sxx);
        if (my - b * mx < 0) {                             // through the origin instead: no negative fixed part
            double sx2 = 0, sxy0 = 0;
            for (int k = 0; k < n; k++) {
                sx2 += x[k] * x[k];
                sxy0 += x[k] * y[k];
            }
            return new double[]{0, sx2 == 0 ? 0 : Math.max(0, sxy0 / sx2)};
        }
        return new double[]{my - b * mx, b};
    }

    /** [block|embedding|head][F|I|W][size]: per-piece costs of each run, by CPU time or as the timeline shows them. */
    private static double[][][] perBlockBySize(List<Measurement> runs, double rhoEmbed, double rhoHead, boolean cpu) {
        double[][][] out = new double[3][3][runs.size()];
        for (int k = 0; k < runs.size(); k++) {
            Measurement m = runs.get(k);
            for (int kind = 0; kind < 3; kind++) {
                double[] cost = (kind == 0 ? m.f() : kind == 1 ? m.i() : m.w()).clone();
                if (cpu && m.cpuScale() != null) for (int s = 0; s < cost.length; s++) cost[s] *= m.cpuScale()[s];
                double[] e = perBlock(cost, m.slices(), rhoEmbed, rhoHead);
                for (int piece = 0; piece < 3; piece++) out[piece][kind][k] = e[piece];
            }
        }
        return out;
    }

    /** F + I + W of pieces fitted by {@link #lines}, as {@code a + b x mbs}. */
    private static String line(LayerCosts.Curve[] fitted) {
        double at1 = 0, at2 = 0;
        for (LayerCosts.Curve c : fitted) {
            at1 += c.at(1);
            at2 += c.at(2);
        }
        return String.format(Locale.ROOT, "%.3f ms + %.3f ms x mbs", (2 * at1 - at2) * 1e3, (at2 - at1) * 1e3);
    }

    private static LayerCosts.Curve[] lines(int[] sizes, double[][] byKind) {
        LayerCosts.Curve[] out = new LayerCosts.Curve[3];
        double[] x = Arrays.stream(sizes).asDoubleStream().toArray();
        for (int kind = 0; kind < 3; kind++) {
            double[] ab = line(x, byKind[kind]);
            out[kind] = sizes.length == 1 ? new LayerCosts.Curve(sizes, byKind[kind]) : LayerCosts.Curve.affine(ab[0], ab[1]);
        }
        return out;
    }

    private static LayerCosts.Curve[] curves(int[] sizes, double[][] byKind) {
        return new LayerCosts.Curve[]{new LayerCosts.Curve(sizes, byKind[0]), new LayerCosts.Curve(sizes, byKind[1]),
                new LayerCosts.Curve(sizes, byKind[2])};
    }

    /** {block, embedding, head} costs from per-stage costs (V = 1: stage s on rank s). */
    static double[] perBlock(double[] cost, List<StageSlice> slices, double rhoEmbed, double rhoHead) {
        double midCost = 0;
        int midBlocks = 0;
        for (int s = 0; s < slices.size(); s++) {
            StageSlice sl = slices.get(s);
            if (!sl.embedding() && !sl.head()) {
                midCost += cost[s];
                midBlocks += sl.blocks();
            }
        }
        StageSlice first = slices.get(0), last = slices.get(slices.size() - 1);
        double blk;
        if (midBlocks > 0) {
            blk = midCost / midBlocks;
        } else if (slices.size() == 1) {
            blk = cost[0] / (first.blocks() + rhoEmbed + rhoHead);
        } else {
            blk = cost[0] / (first.blocks() + rhoEmbed);
        }
        double embed = slices.size() == 1 || midBlocks == 0 ? rhoEmbed * blk : Math.max(0, cost[0] - first.blocks() * blk);
        double head = slices.size() == 1 ? rhoHead * blk : Math.max(0, cost[slices.size() - 1] - last.blocks() * blk);
        return new double[]{blk, embed, head};
    }

    /** Bytes per parameter for training: the weight, its gradient and the optimizer's state, fp32. */
    static double stateBytesPerParam(TtpipeConfig cfg) {
        if ("sgd".equals(cfg.training.optimizer)) return cfg.training.momentum > 0 ? 12 : 8;
        return 16;
    }

    /** Korthikanti et al. 2022's activation bytes per layer per sample, s h (34 + 5 a s / h) in 16 bit, doubled for fp32. */
    static double analyticActivationBytes(ModelSpec m, int seq) {
        double h = m.embeddingDim();
        return 2.0 * seq * h * (34 + 5.0 * m.numHeads() * seq / h);
    }

    /**
     * Bytes per block per sample from the measured peaks: on each rank, the peak minus its parameters'
     * state, over its peak number of microbatches in flight x its blocks x the microbatch size; the
     * median over ranks holding blocks only (all ranks when none do). NaN when nothing was measured.
     */
    static double fittedActivationBytes(List<Measurement> runs, ModelSpec model, double stateBytes, long blockParams,
                                        long embedParams, long headParams) {
        List<Double> samples = new ArrayList<>();
        List<Double> ends = new ArrayList<>();
        for (Measurement m : runs) {
            int ranks = m.memoryPeak().length;
            long[] params = new long[ranks];
            int[] blocks = new int[ranks];
            boolean[] end = new boolean[ranks];
            for (StageSlice s : m.slices()) {
                int r = Math.min(s.rank(), ranks - 1);
                params[r] += s.blocks() * blockParams + (s.embedding() ? embedParams : 0) + (s.head() ? headParams : 0);
                blocks[r] += s.blocks();
                end[r] |= s.embedding() || s.head();
            }
            for (int r = 0; r < ranks; r++) {
                if (m.memoryPeak()[r] <= 0 || m.peakActivations()[r] <= 0 || blocks[r] == 0) continue;
                double a = (m.memoryPeak()[r] - params[r] * stateBytes) / ((double) m.peakActivations()[r] * blocks[r] * m.microbatchSize());
                if (a > 0) (end[r] ? ends : samples).add(a);
            }
        }
        if (samples.isEmpty()) samples = ends;
        if (samples.isEmpty()) return Double.NaN;
        return Trial.median(samples.stream().mapToDouble(Double::doubleValue).toArray());
    }

    /**
     * From a device cost model: each op of a block takes the dispatch latency, its FLOPs at the
     * device's throughput (TP divides them) and the activations it touches at its DRAM bandwidth.
     * F does 2 x parameters x tokens + 4 x dim x seq x tokens FLOPs (attention), I the same twice over
     * less the weight part, W 2 x parameters x tokens. A hop takes the latency plus the hidden state's
     * bytes over the link it crosses ({@code profile}: a Galaxy's chip link or the link between hosts).
     */
    public static LayerCosts model(TtpipeConfig cfg, SimProfile profile, PrintStream out) {
        ModelSpec model = JobPlan.model(cfg, Tuning.vocab(cfg));
        SimCosts sim = profile != null ? profile.costs()
                : new SimCosts(cfg.device.sim.gflops, cfg.device.sim.memoryGbps, cfg.device.sim.opLatencyUs, cfg.device.sim.linkGbps, 1);
        int seq = cfg.transformer.effectiveSequenceLength();
        int tp = ConfigValidator.tpSize(cfg.device), ddp = ConfigValidator.ddpSize(cfg.device);
        double d = model.embeddingDim();
        double p = model.blockParameters();
        double flopRate = sim.gflops() * 1e9 * tp;
        double memRate = sim.memoryGbps() * 1e9 * tp;
        double lat = sim.opLatencyUs() * 1e-6;
        double analytic = analyticActivationBytes(model, seq);
        double act = plannedActivationBytes(cfg, model);
        boolean planned = !Double.isNaN(act);
        if (!planned) act = analytic;
        // per sample (seq tokens), spread over the DDP replicas
        double fPer = (2 * p * seq + 4 * d * seq * seq) / flopRate / ddp + act / memRate / ddp;
        double iPer = (2 * p * seq + 8 * d * seq * seq) / flopRate / ddp + act / memRate / ddp;
        double wPer = 2 * p * seq / flopRate / ddp;
        // Collectives as the sim backend charges them (ring: all_reduce moves 2 (n - 1) / n of the bytes over the link).
        // TP: the two row-parallel outputs of a block are all-reduced in F, the two column-parallel input gradients in I.
        double link = sim.linkGbps() * 1e9;
        double tpReducePer = tp > 1 ? 2 * ringAllReduce(tp) * 4 * d * seq / ddp / link : 0;
        double tpReduceLat = tp > 1 ? 2 * lat : 0;
        fPer += tpReducePer;
        iPer += tpReducePer;
        // DDP: every parameter's gradient all-reduced over the replicas once a step (its TP shard).
        double ddpReducePerParam = ddp > 1 ? ringAllReduce(ddp) * 4 / tp / link : 0;
        int n = model.numBlocks();
        LayerCosts.Curve[] bf = new LayerCosts.Curve[n], bi = new LayerCosts.Curve[n], bw = new LayerCosts.Curve[n];
        Arrays.fill(bf, LayerCosts.Curve.affine(12 * lat + tpReduceLat, fPer));
        Arrays.fill(bi, LayerCosts.Curve.affine(16 * lat + tpReduceLat, iPer));
        Arrays.fill(bw, LayerCosts.Curve.affine(6 * lat, wPer));
        double headF = 2 * d * model.vocabSize() * seq / flopRate / ddp;
        LayerCosts.Curve[] head = {LayerCosts.Curve.affine(4 * lat, headF), LayerCosts.Curve.affine(4 * lat, headF),
                LayerCosts.Curve.affine(2 * lat, headF)};
        double embedBytes = 4 * d * seq;
        LayerCosts.Curve[] embed = {LayerCosts.Curve.affine(2 * lat, embedBytes / memRate / ddp),
                LayerCosts.Curve.affine(0, 0), LayerCosts.Curve.affine(2 * lat, 2 * embedBytes / memRate / ddp)};
        long[] blockParams = new long[n];
        Arrays.fill(blockParams, model.blockParameters());
        long embedParams = embedParams(model), headParams = headParams(model);
        double stateBytes = stateBytesPerParam(cfg);
        double optPerParam = stateBytes * 2 / memRate + ddpReducePerParam;
        int chipsPerRank = cfg.device.devicesPerRank();
        double hopLatency = lat;
        LayerCosts.Hop hop = profile != null
                ? (from, to, bytes) -> hopLatency + bytes / ddp / profile.hopBytesPerSecond(from, chipsPerRank)
                : (from, to, bytes) -> hopLatency + bytes / ddp / (sim.linkGbps() * 1e9);
        List<String> notes = new ArrayList<>();
        notes.add(profile != null ? "costs modelled from the profile " + profile
                : String.format(Locale.ROOT, "costs modelled from device_config.sim: %.0f GFLOP/s, %.0f GB/s, %.0f us per op, link %.0f GB/s",
                sim.gflops(), sim.memoryGbps(), sim.opLatencyUs(), sim.linkGbps()));
        if (profile != null) {
            int p2 = cfg.pipeline().ranks();
            int crossing = 0;
            for (int r = 0; r + 1 < p2; r++) if (profile.hopCrossesHost(r, chipsPerRank)) crossing++;
            notes.add(String.format(Locale.ROOT, "%d ranks x %d chips in snake order over %d host(s) of %d chips: %d hop(s) on the"
                            + " chip link (%.0f Gb/s), %d between hosts (%.0f Gb/s)", p2, chipsPerRank,
                    (p2 * chipsPerRank + profile.chipsPerHost() - 1) / profile.chipsPerHost(), profile.chipsPerHost(),
                    p2 - 1 - crossing, profile.chipLinkGbps(), crossing, profile.hostLinkGbps()));
        }
        notes.add(String.format(Locale.ROOT, "per block, F = %.3f ms + %.3f ms x mbs, I = %.3f + %.3f x mbs, W = %.3f + %.3f x mbs",
                12 * lat * 1e3, fPer * 1e3, 16 * lat * 1e3, iPer * 1e3, 6 * lat * 1e3, wPer * 1e3));
        notes.add(planned
                ? String.format(Locale.ROOT, "activation bytes per block per sample: %s, as `ttpipe train`'s memory plan replays a rank"
                        + " holding only blocks (the estimate 2 s h (34 + 5 a s / h) gives %s)", bytes(act), bytes(analytic))
                : String.format(Locale.ROOT, "activation bytes per block per sample: %s (2 s h (34 + 5 a s / h), Korthikanti et al."
                        + " 2022, fp32; no rank holds only blocks to plan)", bytes(act)));
        if (tp > 1) {
            notes.add(String.format(Locale.ROOT, "TP over %d devices: 2 all-reduces per block in F and 2 in I (ring, link %.0f GB/s),"
                    + " %.3f ms per sample in each", tp, sim.linkGbps(), tpReducePer * 1e3));
        }
        if (ddp > 1) {
            notes.add(String.format(Locale.ROOT, "DDP over %d devices: the gradients' all-reduce (ring, link %.0f GB/s) %.3f ns per"
                    + " parameter a step", ddp, sim.linkGbps(), ddpReducePerParam * 1e9));
        }
        return new LayerCosts(bf, bi, bw, embed, head, act, 4 * d * seq, 4.0 * seq * model.vocabSize() * 2, blockParams,
                embedParams, headParams, stateBytes, hop, 0, Double.NaN, optPerParam, LayerCosts.Curve.constant(0), notes);
    }

    /**
     * Activation bytes one sample keeps per block, from the memory plan of the config's first rank that holds
     * only blocks (its activations over its microbatches in flight, blocks and microbatch size); NaN when no
     * rank does, or the config recomputes (then the plan holds only the blocks' inputs).
     */
    static double plannedActivationBytes(TtpipeConfig cfg, ModelSpec model) {
        if (model.recompute()) return Double.NaN;
        JobPlan plan = JobPlan.from(cfg, model.vocabSize());
        for (int r = 0; r < plan.ranks(); r++) {
            List<StageSlice> slices = plan.slicesOfRank(r);
            if (slices.stream().anyMatch(s -> s.embedding() || s.head())) continue;
            int blocks = slices.stream().mapToInt(StageSlice::blocks).sum();
            MemoryPlan.Rank rank = MemoryPlan.ofRank(plan, r);
            if (blocks == 0 || rank.inFlight() == 0) continue;
            // per device; the search divides by DDP x TP again
            double shards = (double) plan.parallelism().ddpSize() * plan.parallelism().tpSize();
            return rank.activations() * shards / ((double) rank.inFlight() * blocks * plan.microbatchSize());
        }
        return Double.NaN;
    }

    /** The share of a tensor's bytes each device sends in a ring all-reduce over {@code n} devices. */
    static double ringAllReduce(int n) {
        return 2.0 * (n - 1) / n;
    }

    /** The job's shape for the search. */
    public static Search.Job job(TtpipeConfig cfg) {
        return new Search.Job(cfg.training.batchSize, cfg.transformer.effectiveSequenceLength(), cfg.device.memoryPerDevice,
                ConfigValidator.tpSize(cfg.device), ConfigValidator.ddpSize(cfg.device));
    }

    /** Parameters of the token embedding (and GPT-2's learned positions). */
    static long embedParams(ModelSpec m) {
        return (long) m.vocabSize() * m.embeddingDim() + (m.isLlama() ? 0 : (long) m.maxSequenceLength() * m.embeddingDim());
    }

    /** Parameters of the final norm and the LM head. */
    static long headParams(ModelSpec m) {
        return (long) m.vocabSize() * m.embeddingDim() + 2L * m.embeddingDim();
    }

    private static long sliceParams(ModelSpec m, StageSlice s) {
        return s.blocks() * m.blockParameters() + (s.embedding() ? embedParams(m) : 0) + (s.head() ? headParams(m) : 0);
    }

    static String bytes(double b) {
        if (b >= 1 << 30) return String.format(Locale.ROOT, "%.2f GiB", b / (1 << 30));
        if (b >= 1 << 20) return String.format(Locale.ROOT, "%.2f MiB", b / (1 << 20));
        if (b >= 1 << 10) return String.format(Locale.ROOT, "%.1f KiB", b / (1 << 10));
        return String.format(Locale.ROOT, "%.0f B", b);
    }
}

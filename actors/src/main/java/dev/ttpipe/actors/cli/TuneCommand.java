package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.MemoryPlan;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.tune.Calibration;
import dev.ttpipe.actors.tune.Candidate;
import dev.ttpipe.actors.tune.LayerCosts;
import dev.ttpipe.actors.tune.Prediction;
import dev.ttpipe.actors.tune.Search;
import dev.ttpipe.actors.tune.Trial;
import dev.ttpipe.actors.tune.Tuning;
import dev.ttpipe.device.SimProfile;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.Callable;

/**
 * {@code ttpipe tune CONFIG}: calibrates the model's per-block costs (short measured runs, earlier
 * runs, or a device profile), searches schedules x microbatches x splits x recompute under each
 * rank's memory with the simulator, prints the ranking and writes the best config; with
 * {@code --verify-top K} runs the K best and the shipped config and prints measured against predicted.
 */
@Command(name = "tune",
        mixinStandardHelpOptions = true,
        description = {"Pick the schedule, microbatches, split and recompute for a config from measured costs.",
                "Calibrates per-block F/I/W costs (real steps at several microbatch sizes on cpu and ttnn; the cost model"
                        + " or a --profile on sim), searches every candidate with the simulator under each rank's memory,"
                        + " prints the ranking and writes the best config (--out), loadable by `ttpipe train` as is."},
        footer = {"", "Profiles: wormhole_n150, wormhole_n300, blackhole_p150, loudbox, quietbox, galaxy (see the README's table).",
                "", "Examples:",
                "  ttpipe tune configs/nanogpt-pp4-1f1b.yaml --verify-top 3",
                "  ttpipe tune configs/nanogpt-pp4-1f1b.yaml --out tuned.yaml && ttpipe train tuned.yaml",
                "  ttpipe tune configs/sim-pp16.yaml --profile galaxy --budget 30",
                "  ttpipe tune configs/nanogpt-pp4-1f1b.yaml --costs-from runs/a --costs-from runs/b --fix split"})
public final class TuneCommand implements Callable<Integer> {
    static final List<String> DIMENSIONS = List.of("schedule", "microbatches", "split", "recompute");
    /** Candidates, best first, whose memory is planned as `ttpipe train` plans it until one fits. */
    static final int MEMORY_PLAN_TRIES = 5;

    @Parameters(index = "0", paramLabel = "CONFIG", description = "A training config YAML.")
    Path config;

    @Option(names = "--budget", paramLabel = "SECONDS", defaultValue = "60",
            description = "Seconds for calibration and search (calibration runs are not cut short; the search gets what is"
                    + " left, at least a tenth); --verify-top comes on top (default ${DEFAULT-VALUE}).")
    double budget;

    @Option(names = "--memory-per-device", paramLabel = "SIZE",
            description = "Each device's memory (e.g. 12GiB); default device_config.memory_per_device or the profile's.")
    String memoryPerDevice;

    @Option(names = "--top", paramLabel = "K", defaultValue = "10", description = "Rows of the ranking (default ${DEFAULT-VALUE}).")
    int top;

    @Option(names = "--out", paramLabel = "FILE", description = "Write the best candidate as a config YAML here.")
    Path out;

    @Option(names = "--json", description = "Print one JSON object instead of text.")
    boolean json;

    @Option(names = "--verify-top", paramLabel = "K", defaultValue = "0",
            description = "Run the K best candidates and the shipped config for real, print measured against predicted,"
                    + " and pick the fastest measured of them.")
    int verifyTop;

    @Option(names = "--verify-steps", paramLabel = "N", defaultValue = "8",
            description = "Steps per verified candidate; the first " + Trial.WARMUP_STEPS + " warm up and are left out of the median (default ${DEFAULT-VALUE}).")
    int verifySteps;

    @Option(names = "--calibration-steps", paramLabel = "N", defaultValue = "5",
            description = "Steps per measured calibration run, the first " + Trial.WARMUP_STEPS + " left out (default ${DEFAULT-VALUE}).")
    int calibrationSteps;

    @Option(names = "--costs-from", paramLabel = "RUN_DIR",
            description = "Fit from earlier `ttpipe train` runs instead of measuring (repeat it: one run per microbatch size).")
    List<Path> costsFrom;

    @Option(names = "--profile", paramLabel = "NAME",
            description = "Model the devices as this Tenstorrent profile (costs from its published figures; memory its DRAM).")
    String profile;

    @Option(names = "--measure",
            description = "Calibrate by real steps on the sim backend too (its modelled time, and the host's own overhead).")
    boolean measure;

    @Option(names = "--ranks", paramLabel = "RANKS",
            description = "Also search the number of pipeline ranks: a range A..B or a list such as 2,4,8 (default: the config's).")
    String ranks;

    @Option(names = "--fix", paramLabel = "DIMS", split = ",",
            description = "Keep these as the config has them: schedule, microbatches, split, recompute.")
    List<String> fix;

    @Override
    public Integer call() throws IOException {
        PrintStream o = System.out;
        if (!(budget > 0) || Double.isInfinite(budget)) {
            throw new UserInputException("--budget: " + SimulateCommand.num(budget) + " given, expected a number of seconds > 0");
        }
        if (top < 1) throw new UserInputException("--top: " + top + " given, expected a positive integer");
        if (verifyTop < 0) throw new UserInputException("--verify-top: " + verifyTop + " given, expected 0 or more");
        if (verifySteps <= Trial.WARMUP_STEPS) {
            throw new UserInputException("--verify-steps: " + verifySteps + " given, expected more than the " + Trial.WARMUP_STEPS + " warm-up steps");
        }
        if (calibrationSteps <= Trial.WARMUP_STEPS) {
            throw new UserInputException("--calibration-steps: " + calibrationSteps + " given, expected more than the "
                    + Trial.WARMUP_STEPS + " warm-up steps");
        }
        Set<String> fixed = new java.util.LinkedHashSet<>();
        for (String f : fix == null ? List.<String>of() : fix) {
            String key = f.strip().toLowerCase(Locale.ROOT);
            if (!DIMENSIONS.contains(key)) {
                throw new UserInputException("--fix: '" + f + "' given, expected some of " + String.join(", ", DIMENSIONS));
            }
            fixed.add(key);
        }
        TtpipeConfig cfg = ConfigLoader.load(config);
        SimProfile prof = null;
        if (profile != null) {
            prof = SimProfile.named(profile);
            if (prof == null) {
                throw new UserInputException("--profile: '" + profile + "' given, expected one of " + String.join(", ", SimProfile.names()));
            }
            if (memoryPerDevice == null) cfg.device.memoryPerDevice = prof.dramBytes();
            cfg.device.sim.profile = prof.name();          // the written config models the same devices on the sim backend
            dev.ttpipe.device.SimCosts c = prof.costs();
            cfg.device.sim.gflops = c.gflops();
            cfg.device.sim.memoryGbps = c.memoryGbps();
            cfg.device.sim.opLatencyUs = c.opLatencyUs();
            cfg.device.sim.linkGbps = c.linkGbps();
        } else if (cfg.device.sim.profile != null && cfg.device.backend == Backend.SIM) {
            prof = SimProfile.named(cfg.device.sim.profile);
        }
        if (memoryPerDevice != null) {
            long bytes;
            try {
                bytes = Sizes.parseBytes(memoryPerDevice);
            } catch (RuntimeException e) {
                throw new UserInputException("--memory-per-device: '" + memoryPerDevice + "' given, expected a size such as 12GiB or 512MiB");
            }
            if (bytes <= 0) throw new UserInputException("--memory-per-device: '" + memoryPerDevice + "' given, expected a size > 0");
            cfg.device.memoryPerDevice = bytes;
        }
        List<Integer> rankCounts = ranks == null ? null : rankCounts(ranks, cfg, fixed);
        if (rankCounts != null && cfg.device.backend == Backend.CPU && cfg.device.threads == 0) {
            // Every candidate runs with the threads per rank its costs were measured with, whatever its rank count.
            cfg.device.threads = Math.max(1, Runtime.getRuntime().availableProcessors() / cfg.pipeline().ranks());
        }
        Tuning tuning = new Tuning(cfg, fixed, rankCounts);
        tuning.checkMemory(memoryPerDevice != null ? "--memory-per-device " + memoryPerDevice
                : cfg.origins.where("device_config.memory_per_device") + " " + Sizes.format(cfg.device.memoryPerDevice));
        Search.Space space = tuning.space();
        if (tuning.size(space) <= 1) {
            throw new UserInputException(config + ": nothing to tune: " + tuning.whyFixed() + "; expected at least one of schedule,"
                    + " microbatches, split, recompute left free (drop it from --fix, or raise batch_size / num_blocks)");
        }

        double loadBefore = loadAverage();
        long t0 = System.nanoTime();
        PrintStream progress = json ? null : o;
        LayerCosts costs;
        String how;
        boolean measuredCosts = false;
        if (costsFrom != null && !costsFrom.isEmpty()) {
            if (prof != null) throw new UserInputException("--costs-from and --profile given, expected one of them");
            if (measure) {
                throw new UserInputException("--measure and --costs-from " + costsFrom.get(0) + " given, expected one of them"
                        + " (--measure calibrates by new runs, --costs-from reads earlier ones)");
            }
            for (Path run : costsFrom) {
                if (!Files.isRegularFile(run.resolve("config.yaml"))) {
                    throw new UserInputException("--costs-from: " + run + (Files.isDirectory(run) ? " has no config.yaml" : ": no such directory")
                            + ", expected the run directory of a `ttpipe train` run");
                }
            }
            costs = Calibration.fromRuns(cfg, costsFrom, progress);
            how = "fitted from " + costsFrom.size() + " run(s)";
        } else if (!measure && (prof != null || cfg.device.backend == Backend.SIM)) {
            costs = Calibration.model(cfg, prof, progress);
            how = prof != null ? "modelled, profile " + prof.name() : "modelled, device_config.sim";
        } else {
            if (measure && prof != null && cfg.device.backend != Backend.SIM) {
                throw new UserInputException("--measure with --profile " + prof.name() + " on the " + cfg.device.backend
                        + " backend: the profile models devices this host does not have, expected device_config.backend: sim");
            }
            costs = Calibration.measure(cfg, calibrationSteps, progress);
            how = "measured on the " + cfg.device.backend + " backend";
            measuredCosts = true;
        }
        double calibrationSeconds = (System.nanoTime() - t0) / 1e9;
        double searchBudget = Math.max(0.1 * budget, budget - calibrationSeconds);
        Search search = new Search(costs, Calibration.job(cfg));
        Search.Outcome outcome = search.run(space, searchBudget, Math.max(top, verifyTop));
        Candidate shipped = tuning.shipped();
        Prediction shippedPrediction = search.predict(shipped);
        if (outcome.best() == null) {
            StringBuilder why = new StringBuilder();
            if (!outcome.overflowing().isEmpty()) {
                Prediction p = outcome.overflowing().get(0);
                why.append("; the fastest, ").append(p.candidate()).append(", overflows rank ").append(p.overflowRank())
                        .append(" by ").append(Sizes.format(p.overflowBytes()));
            }
            throw new UserInputException(config + ": no candidate fits in " + Sizes.format(cfg.device.memoryPerDevice)
                    + " per device (" + outcome.evaluated() + " evaluated" + why + "), expected a larger --memory-per-device");
        }
        List<Prediction> ranked = outcome.ranked().subList(0, Math.min(top, outcome.ranked().size()));
        List<double[]> measured = new ArrayList<>();     // {median seconds} per verified row; last: shipped
        double loadCalibrated = loadAverage();
        if (verifyTop > 0) {
            int k = Math.min(verifyTop, outcome.ranked().size());
            List<Candidate> runs = new ArrayList<>();
            for (int i = 0; i < k; i++) runs.add(outcome.ranked().get(i).candidate());
            int shippedAt = runs.indexOf(shipped);
            if (shippedAt < 0) runs.add(shipped);
            // Measured costs are measured again beside the candidates (ZB-H1 at their microbatch sizes, stepped in turn with
            // them), so that the host's load while they run is the load the costs were measured under.
            java.util.TreeSet<Integer> sizes = new java.util.TreeSet<>();
            for (Candidate c : runs) sizes.add(cfg.training.batchSize / c.microbatches());
            if (progress != null) {
                progress.printf(Locale.ROOT, "verifying the top %d%s: %d steps each, stepped in turn%s...%n", k,
                        shippedAt < 0 ? " and the shipped config" : " (the shipped config among them)", verifySteps,
                        measuredCosts ? " with calibration runs at microbatch sizes " + sizes : "");
            }
            List<dev.ttpipe.actors.config.TtpipeConfig> configs = new ArrayList<>();
            for (Candidate c : runs) configs.add(tuning.configOf(c));
            // {median seconds, the prediction again at the share of the cores the run got (the host's load then),
            //  the prediction from costs calibrated beside it}
            Search.Job shape = Calibration.job(cfg);
            List<Trial.Result> results;
            LayerCosts beside = null;
            if (measuredCosts) {
                Calibration.Beside b = Calibration.measureBeside(cfg, new ArrayList<>(sizes), configs, verifySteps);
                results = b.others();
                beside = b.costs();
            } else {
                results = Trial.interleaved(configs, verifySteps);
            }
            for (int i = 0; i < results.size(); i++) {
                Prediction again = new Search(costs.atCoreShare(Calibration.coreShare(results.get(i))), shape).predict(runs.get(i));
                Prediction near = beside == null ? null : new Search(beside, shape).predict(runs.get(i));
                measured.add(new double[]{results.get(i).medianSeconds(), again == null ? Double.NaN : again.stepSeconds(),
                        near == null ? Double.NaN : near.stepSeconds()});
            }
            if (shippedAt >= 0) measured.add(measured.get(shippedAt));
            how += String.format(Locale.ROOT, "; host load average %.1f before calibration, %.1f after it, %.1f after verifying,"
                    + " %d cores", loadBefore, loadCalibrated, loadAverage(), Runtime.getRuntime().availableProcessors());
        } else if (cfg.device.backend != Backend.SIM && prof == null && (costsFrom == null || costsFrom.isEmpty())) {
            how += String.format(Locale.ROOT, "; host load average %.1f before, %.1f after, %d cores", loadBefore, loadCalibrated,
                    Runtime.getRuntime().availableProcessors());
        }
        // The pick: the prediction's best; after --verify-top, the fastest measured of those run (the shipped config too).
        Prediction best = outcome.best();
        String pickedBy = "predicted";
        if (!measured.isEmpty()) {
            int fastest = 0;
            for (int i = 1; i < measured.size(); i++) if (measured.get(i)[0] < measured.get(fastest)[0]) fastest = i;
            best = fastest == measured.size() - 1 ? shippedPrediction : outcome.ranked().get(fastest);
            pickedBy = String.format(Locale.ROOT, "measured %.1f ms/step, the fastest of those verified", measured.get(fastest)[0] * 1e3);
        }
        // What `ttpipe train` checks at start: the pick's memory planned by replaying its rows on sim devices. The
        // search's estimate is a model of that; when they disagree on fitting, the next candidate that does fit is taken.
        String memoryNote = null;
        if (measured.isEmpty()) {
            int tries = Math.min(MEMORY_PLAN_TRIES, outcome.ranked().size());
            for (int i = 0; i < tries; i++) {
                Prediction p = outcome.ranked().get(i);
                MemoryPlan.Rank worst = MemoryPlan.of(JobPlan.from(tuning.configOf(p.candidate()), Tuning.vocab(cfg))).largest();
                memoryNote = String.format(Locale.ROOT, "memory plan of %s (what `ttpipe train` checks at start): at most %s of %s per device,"
                                + " rank %d; the search estimated %s", i == 0 ? "the pick" : "#" + (i + 1), Sizes.format(worst.peak()),
                        Sizes.format(cfg.device.memoryPerDevice), worst.rank(), Sizes.format(p.peakBytes()));
                if (worst.peak() <= cfg.device.memoryPerDevice) {
                    if (i > 0) {
                        best = p;
                        memoryNote += "; #1 to #" + i + " would not fit by the memory plan, so #" + (i + 1) + " is the pick";
                    }
                    break;
                }
                if (i == tries - 1) {
                    memoryNote += "; none of the first " + tries + " fits by the memory plan, so `ttpipe train` would refuse the pick:"
                            + " give a smaller --memory-per-device to the search or let it recompute";
                    best = outcome.best();
                }
            }
        }
        Path written = null;
        if (out != null) {
            written = out;
            String yaml = String.format(Locale.ROOT, "# written by ttpipe tune %s: %s, predicted %.1f ms/step, %.0f tokens/s (%s)%n",
                    config, best.candidate(), best.stepSeconds() * 1e3, best.tokensPerSecond(), pickedBy)
                    + dev.ttpipe.actors.config.ConfigWriter.toYaml(tuning.configOf(best.candidate()));
            try {
                Path parent = out.toAbsolutePath().getParent();
                if (parent != null) Files.createDirectories(parent);
                Files.writeString(out, yaml, StandardCharsets.UTF_8);
            } catch (IOException e) {
                throw new UserInputException("--out: cannot write " + out + ": " + e.getMessage(), e);
            }
        }
        if (json) {
            o.println(json(cfg, how, costs, outcome, ranked, shippedPrediction, measured, written, best));
        } else {
            o.print(report(cfg, how, costs, outcome, ranked, shippedPrediction, measured, calibrationSeconds, written));
            if (memoryNote != null) o.println(memoryNote);
            o.printf(Locale.ROOT, "best: %s (%s)%s%n", best.candidate(), pickedBy,
                    written != null ? ", written to " + written : "");
        }
        return Main.EXIT_OK;
    }

    /**
     * The rank counts {@code --ranks} names: {@code A..B} (every count between) or {@code a,b,c}, each from 1 to the
     * number of blocks; refused for a multihost config (its rank_bindings fix the ranks) and with {@code --fix split}.
     */
    static List<Integer> rankCounts(String spec, TtpipeConfig cfg, Set<String> fixed) {
        int blocks = cfg.pipeline().numBlocks > 0 ? cfg.pipeline().numBlocks : cfg.transformer.numBlocks;
        String expected = "expected rank counts from 1 to the " + blocks + " blocks, as A..B or a list such as 2,4,8";
        java.util.TreeSet<Integer> out = new java.util.TreeSet<>();
        try {
            String s = spec.strip();
            int dots = s.indexOf("..");
            if (dots >= 0) {
                int a = Integer.parseInt(s.substring(0, dots).strip()), b = Integer.parseInt(s.substring(dots + 2).strip());
                if (a > b || a < 1 || b > blocks) throw new NumberFormatException();   // checked before the loop: 1..2^31 is not a list to build
                for (int p = a; p <= b; p++) out.add(p);
            } else {
                for (String part : s.split(",")) out.add(Integer.parseInt(part.strip()));
            }
        } catch (NumberFormatException e) {
            throw new UserInputException("--ranks: '" + spec + "' given, " + expected);
        }
        if (out.isEmpty() || out.first() < 1 || out.last() > blocks) {
            throw new UserInputException("--ranks: '" + spec + "' given, " + expected);
        }
        if (cfg.multihost.enabled) {
            throw new UserInputException("--ranks: '" + spec + "' given for a multihost config, whose rank_bindings fix its "
                    + cfg.pipeline().ranks() + " ranks; expected --ranks only with multihost_config.enabled: false (tune a"
                    + " single-process copy of the config, then bind the ranks it picks)");
        }
        if (fixed.contains("split")) {
            throw new UserInputException("--ranks with --fix split: the split fixes the ranks at " + cfg.pipeline().ranks()
                    + ", expected one of them");
        }
        return List.copyOf(out);
    }

    /** The host's one-minute load average (NaN where the JVM cannot tell): a shared machine's noise, for the record. */
    private static double loadAverage() {
        double l = java.lang.management.ManagementFactory.getOperatingSystemMXBean().getSystemLoadAverage();
        return l < 0 ? Double.NaN : l;
    }

    static String report(TtpipeConfig cfg, String how, LayerCosts costs, Search.Outcome r, List<Prediction> ranked,
                         Prediction shipped, List<double[]> measured, double calibrationSeconds, Path written) {
        StringBuilder t = new StringBuilder();
        t.append(String.format(Locale.ROOT, "%ncosts (%s, %.1f s):%n", how, calibrationSeconds));
        for (String n : costs.notes()) t.append("  ").append(n).append('\n');
        t.append(String.format(Locale.ROOT, "%nsearched %d candidates in %.2f s (%.0f per second): %d simulated, %d pruned by their"
                        + " lower bound, %d dominated (within 1%% of a faster one that needs no more memory), %d do not fit, %d not buildable%s%n%n",
                r.considered(), r.seconds(), r.considered() / Math.max(1e-9, r.seconds()), r.evaluated(), r.prunedByBound(),
                r.dominated(), r.overflowing().size(), r.invalid(), r.stoppedAtBudget() ? "; stopped at the budget" : ""));
        List<String[]> rows = new ArrayList<>();
        boolean verified = !measured.isEmpty();
        // a P column when the ranking holds more than one rank count (tune --ranks)
        java.util.Set<Integer> counts = new java.util.HashSet<>();
        for (Prediction p : ranked) counts.add(p.candidate().ranks());
        if (shipped != null) counts.add(shipped.candidate().ranks());
        boolean ranks = counts.size() > 1;
        boolean besides = verified && measured.stream().anyMatch(m -> m.length > 2 && !Double.isNaN(m[2]));
        for (int i = 0; i < ranked.size(); i++) {
            Prediction p = ranked.get(i);
            rows.add(row(Integer.toString(i + 1), p, cfg, verified && i < measured.size() - 1 ? measured.get(i) : null, verified, ranks,
                    besides));
        }
        if (shipped != null) {
            rows.add(row("shipped", shipped, cfg, verified ? measured.get(measured.size() - 1) : null, verified, ranks, besides));
        }
        List<String> header = new ArrayList<>(List.of("#", "schedule", "V", "M", "mbs", "split", "recompute", "step ms", "bubble",
                "peak mem/rank", "tokens/s"));
        if (ranks) header.add(1, "P");
        if (verified) header.addAll(List.of("measured ms", "error", "at its load"));
        if (besides) header.add("calibrated beside");
        t.append(SimulateCommand.table(header.toArray(new String[0]), rows));
        if (verified) {
            t.append(String.format(Locale.ROOT, "measured: `ttpipe train`'s runtime, median step of the steps after the first %d"
                    + " (warm-up, left out); error = (measured - predicted) / predicted; at its load: against the same model"
                    + " re-run at the share of the cores the run itself got (the host's load moves between calibration and"
                    + " verification)%s%n", Trial.WARMUP_STEPS, besides ? "; calibrated beside: predicted again from costs measured by"
                    + " calibration runs stepped in turn with the verified ones (the same load), and its error" : ""));
        }
        if (!r.overflowing().isEmpty()) {
            t.append("\ndo not fit (fastest first):\n");
            for (Prediction p : r.overflowing().subList(0, Math.min(5, r.overflowing().size()))) {
                t.append(String.format(Locale.ROOT, "  %s: %.1f ms/step, rank %d needs %s, %s over %s%n", p.candidate(),
                        p.stepSeconds() * 1e3, p.overflowRank(), Sizes.format(p.peakBytesPerRank()[p.overflowRank()]),
                        Sizes.format(p.overflowBytes()), Sizes.format(cfg.device.memoryPerDevice)));
            }
        }
        return t.toString();
    }

    private static String[] row(String label, Prediction p, TtpipeConfig cfg, double[] m, boolean verified, boolean ranks,
                                boolean besides) {
        double measured = m == null ? Double.NaN : m[0];
        Candidate c = p.candidate();
        int mbs = cfg.training.batchSize / c.microbatches();
        List<String> cells = new ArrayList<>(List.of(label, c.schedule(), Integer.toString(c.virtualStages()),
                Integer.toString(c.microbatches()), Integer.toString(mbs), c.split(), c.recompute() ? "yes" : "no",
                String.format(Locale.ROOT, "%.1f", p.stepSeconds() * 1e3), String.format(Locale.ROOT, "%.1f%%", 100 * p.bubble()),
                Sizes.format(p.peakBytes()), String.format(Locale.ROOT, "%.0f", p.tokensPerSecond())));
        if (ranks) cells.add(1, Integer.toString(c.ranks()));
        if (verified) {
            cells.add(Double.isNaN(measured) ? "" : String.format(Locale.ROOT, "%.1f", measured * 1e3));
            cells.add(Double.isNaN(measured) ? "" : String.format(Locale.ROOT, "%+.1f%%", 100 * (measured - p.stepSeconds()) / p.stepSeconds()));
            cells.add(m == null || Double.isNaN(m[1]) ? "" : String.format(Locale.ROOT, "%+.1f%%", 100 * (measured - m[1]) / m[1]));
        }
        if (besides) {
            cells.add(m == null || Double.isNaN(m[2]) ? "" : String.format(Locale.ROOT, "%.1f ms, %+.1f%%", m[2] * 1e3,
                    100 * (measured - m[2]) / m[2]));
        }
        return cells.toArray(new String[0]);
    }

    static String json(TtpipeConfig cfg, String how, LayerCosts costs, Search.Outcome r, List<Prediction> ranked,
                       Prediction shipped, List<double[]> measured, Path written, Prediction best) {
        StringBuilder j = new StringBuilder("{");
        j.append("\"costs\":").append(Json.str(how));
        j.append(",\"candidates\":").append(r.considered()).append(",\"simulated\":").append(r.evaluated())
                .append(",\"pruned_by_bound\":").append(r.prunedByBound()).append(",\"dominated\":").append(r.dominated())
                .append(",\"do_not_fit\":").append(r.overflowing().size()).append(",\"seconds\":").append(Json.num(r.seconds()))
                .append(",\"stopped_at_budget\":").append(r.stoppedAtBudget());
        j.append(",\"ranking\":[");
        for (int i = 0; i < ranked.size(); i++) {
            j.append(i == 0 ? "" : ",").append(json(ranked.get(i), i < measured.size() - 1 ? measured.get(i) : null));
        }
        j.append("]");
        if (shipped != null) j.append(",\"shipped\":").append(json(shipped, measured.isEmpty() ? null : measured.get(measured.size() - 1)));
        j.append(",\"overflowing\":[");
        for (int i = 0; i < Math.min(5, r.overflowing().size()); i++) {
            Prediction p = r.overflowing().get(i);
            j.append(i == 0 ? "" : ",").append(json(p, null));
        }
        j.append("]");
        j.append(",\"best\":").append(json(best, null));
        if (written != null) j.append(",\"written\":").append(Json.str(written.toString()));
        return j.append('}').toString();
    }

    /** @param m null, or {measured seconds, the prediction at the run's core share, the prediction calibrated beside it} */
    private static String json(Prediction p, double[] m) {
        double measured = m == null ? Double.NaN : m[0];
        Candidate c = p.candidate();
        StringBuilder j = new StringBuilder("{\"schedule\":").append(Json.str(c.schedule()))
                .append(",\"ranks\":").append(c.ranks()).append(",\"virtual_stages\":").append(c.virtualStages()).append(",\"microbatches\":").append(c.microbatches())
                .append(",\"blocks_per_rank\":[").append(c.split()).append("],\"recompute\":").append(c.recompute())
                .append(",\"predicted_step_seconds\":").append(Json.num(p.stepSeconds()))
                .append(",\"bubble\":").append(Json.num(p.bubble())).append(",\"tokens_per_second\":").append(Json.num(p.tokensPerSecond()))
                .append(",\"peak_bytes_per_rank\":[");
        for (int r = 0; r < p.peakBytesPerRank().length; r++) j.append(r == 0 ? "" : ",").append(p.peakBytesPerRank()[r]);
        j.append(']');
        if (!p.fits()) j.append(",\"overflow_rank\":").append(p.overflowRank()).append(",\"overflow_bytes\":").append(p.overflowBytes());
        if (!Double.isNaN(measured)) {
            j.append(",\"measured_step_seconds\":").append(Json.num(measured))
                    .append(",\"error\":").append(Json.num((measured - p.stepSeconds()) / p.stepSeconds()));
            if (m.length > 2 && !Double.isNaN(m[2])) j.append(",\"calibrated_beside_step_seconds\":").append(Json.num(m[2]));
        }
        return j.append('}').toString();
    }
}

package dev.ttpipe.actors.tune;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.ConfigWriter;
import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.MemoryPlan;
import dev.ttpipe.actors.telemetry.TextTable;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.device.SimProfile;

import java.io.IOException;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.TreeSet;

/**
 * One {@code ttpipe tune}: calibrates the model's per-block costs (short measured runs, earlier runs, or a device
 * profile), searches schedules x microbatches x splits x recompute under each rank's memory with the simulator,
 * optionally runs the best for real ({@code verifyTop}), picks one that the memory plan of {@code ttpipe train}
 * accepts, writes it as a config and prints the ranking, as text or one JSON object.
 * A problem the settings cause is a {@link UserInputException} naming the flag.
 */
public final class TuneRun {
    /** What {@code fix} may name. */
    public static final List<String> DIMENSIONS = List.of("schedule", "microbatches", "split", "recompute");
    /** Candidates, best first, whose memory is planned as `ttpipe train` plans it until one fits. */
    static final int MEMORY_PLAN_TRIES = 5;

    /**
     * What to tune and how, one field per flag of {@code ttpipe tune}.
     *
     * @param memoryPerDevice a size such as 12GiB; null: the config's or the profile's
     * @param out             where to write the best candidate's config; null: nowhere
     * @param costsFrom       earlier run directories to fit the costs from; null or empty: calibrate otherwise
     * @param profile         a {@link SimProfile} name; null: none
     * @param ranks           the rank counts to search, {@code A..B} or {@code a,b,c}; null: the config's
     * @param fix             dimensions of {@link #DIMENSIONS} kept as the config has them; null: none
     */
    public record Settings(Path config, double budget, String memoryPerDevice, int top, Path out, boolean json, int verifyTop,
                           int verifySteps, int calibrationSteps, List<Path> costsFrom, String profile, boolean measure,
                           String ranks, List<String> fix) {
    }

    /** The costs and how they were found. */
    private record Calibrated(LayerCosts costs, String how, boolean measured) {
    }

    /** The candidate picked, why, and what its memory plan said (null when it was not planned). */
    private record Pick(Prediction best, String pickedBy, String memoryNote) {
    }

    private final Settings s;
    private final PrintStream out;
    private final TtpipeConfig cfg;
    private final SimProfile prof;
    private final Tuning tuning;
    private final Search.Space space;
    private final CostSource costSource;

    /** Where the per-block costs come from: earlier runs, a device model, or short measured runs. */
    private enum CostSource { RUNS, MODEL, MEASURED }

    private TuneRun(Settings s, TtpipeConfig cfg, PrintStream out) {
        this.s = s;
        this.out = out;
        this.cfg = cfg;
        Set<String> fixed = checkFlags();
        prof = devices(cfg);
        List<Integer> rankCounts = s.ranks() == null ? null : rankCounts(s.ranks(), cfg, fixed);
        if (rankCounts != null && cfg.device.backend == Backend.CPU && cfg.device.threads == 0) {
            // Every candidate runs with the threads per rank its costs were measured with, whatever its rank count.
            cfg.device.threads = Math.max(1, Runtime.getRuntime().availableProcessors() / cfg.pipeline().ranks());
        }
        tuning = new Tuning(cfg, fixed, rankCounts);
        tuning.checkMemory(s.memoryPerDevice() != null ? "--memory-per-device " + s.memoryPerDevice()
                : cfg.origins.where("device_config.memory_per_device") + " " + Sizes.format(cfg.device.memoryPerDevice));
        space = tuning.space();
        if (tuning.size(space) <= 1) {
            throw new UserInputException(s.config() + ": nothing to tune: " + tuning.whyFixed() + "; expected at least one of schedule,"
                    + " microbatches, split, recompute left free (drop it from --fix, or raise batch_size / num_blocks)");
        }
        costSource = costSource();
    }

    /**
     * A tune of {@code cfg} (the config {@code settings.config()} names, its flags and --set applied) as {@code settings}
     * say, checked and ready: the flags are valid, --profile and --memory-per-device are applied to {@code cfg}, and
     * something is left to search. Nothing has run yet.
     */
    public static TuneRun prepare(Settings settings, TtpipeConfig cfg, PrintStream out) {
        return new TuneRun(settings, cfg, out);
    }

    /** What {@link #run()} would do, in one paragraph: the candidates it would search, where the costs would come from. */
    public String plan() {
        StringBuilder t = new StringBuilder(String.format(Locale.ROOT, "tune would search up to %,d candidates (schedules %s;"
                        + " microbatches %s; pipeline ranks %s; recompute %s) in a budget of %s s, with costs %s",
                tuning.size(space), String.join(", ", space.schedules()), join(space.microbatches()), join(space.ranks()),
                space.recompute().size() == 2 ? "off and on" : space.recompute().get(0) ? "on" : "off", TextTable.num(s.budget()),
                how(costSource)));
        if (s.verifyTop() > 0) {
            t.append(String.format(Locale.ROOT, ", then run the %d best and the config as it is, %d steps each", s.verifyTop(),
                    s.verifySteps()));
        }
        if (s.out() != null) t.append("; the best would be written to ").append(s.out());
        return t.toString();
    }

    private static String join(List<Integer> values) {
        return String.join(", ", values.stream().map(String::valueOf).toList());
    }

    /** Tunes: calibrates, searches, (--verify-top) runs the best, and prints the result. */
    public void run() throws IOException {
        double loadBefore = loadAverage();
        long t0 = System.nanoTime();
        PrintStream progress = s.json() ? null : out;
        Calibrated calibrated = calibrate(progress);
        LayerCosts costs = calibrated.costs();
        String how = calibrated.how();
        double calibrationSeconds = (System.nanoTime() - t0) / 1e9;
        double searchBudget = Math.max(0.1 * s.budget(), s.budget() - calibrationSeconds);
        Search search = new Search(costs, Calibration.job(cfg));
        Search.Outcome outcome = search.run(space, searchBudget, Math.max(s.top(), s.verifyTop()));
        Candidate shipped = tuning.shipped();
        Prediction shippedPrediction = search.predict(shipped);
        if (outcome.best() == null) throw noneFits(cfg, outcome);
        List<Prediction> ranked = outcome.ranked().subList(0, Math.min(s.top(), outcome.ranked().size()));
        List<double[]> measured = new ArrayList<>();
        double loadCalibrated = loadAverage();
        if (s.verifyTop() > 0) {
            measured = verify(cfg, tuning, costs, outcome, shipped, calibrated.measured(), progress);
            how += String.format(Locale.ROOT, "; host load average %.1f before calibration, %.1f after it, %.1f after verifying,"
                    + " %d cores", loadBefore, loadCalibrated, loadAverage(), Runtime.getRuntime().availableProcessors());
        } else if (cfg.device.backend != Backend.SIM && prof == null && !costsFromRuns()) {
            how += String.format(Locale.ROOT, "; host load average %.1f before, %.1f after, %d cores", loadBefore, loadCalibrated,
                    Runtime.getRuntime().availableProcessors());
        }
        Pick pick = pick(cfg, tuning, outcome, shippedPrediction, measured);
        Prediction best = pick.best();
        Path written = write(cfg, tuning, best, pick.pickedBy());
        if (s.json()) {
            out.println(TuneReport.json(cfg, how, costs, outcome, ranked, shippedPrediction, measured, written, best));
        } else {
            out.print(TuneReport.text(cfg, how, costs, outcome, ranked, shippedPrediction, measured, calibrationSeconds, written));
            if (pick.memoryNote() != null) out.println(pick.memoryNote());
            out.printf(Locale.ROOT, "best: %s (%s)%s%n", best.candidate(), pick.pickedBy(),
                    written != null ? ", written to " + written : "");
        }
    }

    /** Refuses out-of-range numbers; the dimensions {@code fix} names, checked. */
    private Set<String> checkFlags() {
        if (!(s.budget() > 0) || Double.isInfinite(s.budget())) {
            throw new UserInputException("--budget: " + TextTable.num(s.budget()) + " given, expected a number of seconds > 0");
        }
        if (s.top() < 1) throw new UserInputException("--top: " + s.top() + " given, expected a positive integer");
        if (s.verifyTop() < 0) throw new UserInputException("--verify-top: " + s.verifyTop() + " given, expected 0 or more");
        if (s.verifySteps() <= Trial.WARMUP_STEPS) {
            throw new UserInputException("--verify-steps: " + s.verifySteps() + " given, expected more than the " + Trial.WARMUP_STEPS
                    + " warm-up steps");
        }
        if (s.calibrationSteps() <= Trial.WARMUP_STEPS) {
            throw new UserInputException("--calibration-steps: " + s.calibrationSteps() + " given, expected more than the "
                    + Trial.WARMUP_STEPS + " warm-up steps");
        }
        Set<String> fixed = new LinkedHashSet<>();
        for (String f : s.fix() == null ? List.<String>of() : s.fix()) {
            String key = f.strip().toLowerCase(Locale.ROOT);
            if (!DIMENSIONS.contains(key)) {
                throw new UserInputException("--fix: '" + f + "' given, expected some of " + String.join(", ", DIMENSIONS));
            }
            fixed.add(key);
        }
        return fixed;
    }

    /**
     * Sets the devices {@code cfg} models: the profile's costs and memory (so the written config models the same
     * devices on the sim backend), then the memory per device given. Returns the profile in force, or null.
     */
    private SimProfile devices(TtpipeConfig cfg) {
        SimProfile prof = null;
        if (s.profile() != null) {
            prof = SimProfile.named(s.profile());
            if (prof == null) {
                throw new UserInputException("--profile: '" + s.profile() + "' given, expected one of " + String.join(", ", SimProfile.names()));
            }
            if (s.memoryPerDevice() == null) cfg.device.memoryPerDevice = prof.dramBytes();
            cfg.device.sim.profile = prof.name();
            SimCosts c = prof.costs();
            cfg.device.sim.gflops = c.gflops();
            cfg.device.sim.memoryGbps = c.memoryGbps();
            cfg.device.sim.opLatencyUs = c.opLatencyUs();
            cfg.device.sim.linkGbps = c.linkGbps();
            for (String key : List.of("profile", "gflops", "memory_gbps", "op_latency_us", "link_gbps")) {
                cfg.origins.recordFlag("device_config.sim." + key, "--profile");
            }
            if (s.memoryPerDevice() == null) cfg.origins.recordFlag("device_config.memory_per_device", "--profile");
        } else if (cfg.device.sim.profile != null && cfg.device.backend == Backend.SIM) {
            prof = SimProfile.named(cfg.device.sim.profile);
        }
        if (s.memoryPerDevice() != null) {
            long bytes;
            try {
                bytes = Sizes.parseBytes(s.memoryPerDevice());
            } catch (RuntimeException e) {
                throw new UserInputException("--memory-per-device: '" + s.memoryPerDevice() + "' given, expected a size such as 12GiB or 512MiB");
            }
            if (bytes <= 0) throw new UserInputException("--memory-per-device: '" + s.memoryPerDevice() + "' given, expected a size > 0");
            cfg.device.memoryPerDevice = bytes;
            cfg.origins.recordFlag("device_config.memory_per_device", "--memory-per-device");
        }
        return prof;
    }

    private boolean costsFromRuns() {
        return s.costsFrom() != null && !s.costsFrom().isEmpty();
    }

    /**
     * Which costs the flags and the config ask for, checked (conflicting flags, --costs-from's directories) before
     * anything runs.
     */
    private CostSource costSource() {
        if (costsFromRuns()) {
            List<Path> runs = s.costsFrom();
            if (prof != null) throw new UserInputException("--costs-from and --profile given, expected one of them");
            if (s.measure()) {
                throw new UserInputException("--measure and --costs-from " + runs.get(0) + " given, expected one of them"
                        + " (--measure calibrates by new runs, --costs-from reads earlier ones)");
            }
            for (Path run : runs) {
                if (!Files.isRegularFile(run.resolve("config.yaml"))) {
                    throw new UserInputException("--costs-from: " + run + (Files.isDirectory(run) ? " has no config.yaml" : ": no such directory")
                            + ", expected the run directory of a `ttpipe train` run");
                }
            }
            return CostSource.RUNS;
        }
        if (!s.measure() && (prof != null || cfg.device.backend == Backend.SIM)) return CostSource.MODEL;
        if (s.measure() && prof != null && cfg.device.backend != Backend.SIM) {
            throw new UserInputException("--measure with --profile " + prof.name() + " on the " + cfg.device.backend
                    + " backend: the profile models devices this host does not have, expected device_config.backend: sim");
        }
        return CostSource.MEASURED;
    }

    /** How the costs were (or would be) found, for the report. */
    private String how(CostSource source) {
        return switch (source) {
            case RUNS -> "fitted from " + s.costsFrom().size() + " run(s)";
            case MODEL -> prof != null ? "modelled, profile " + prof.name() : "modelled, device_config.sim";
            case MEASURED -> "measured on the " + cfg.device.backend + " backend";
        };
    }

    /** The costs: fitted from earlier runs, modelled (a profile or the sim backend), or measured by short runs. */
    private Calibrated calibrate(PrintStream progress) {
        return switch (costSource) {
            case RUNS -> new Calibrated(Calibration.fromRuns(cfg, s.costsFrom(), progress), how(costSource), false);
            case MODEL -> new Calibrated(Calibration.model(cfg, prof, progress), how(costSource), false);
            case MEASURED -> new Calibrated(Calibration.measure(cfg, s.calibrationSteps(), progress), how(costSource), true);
        };
    }

    private UserInputException noneFits(TtpipeConfig cfg, Search.Outcome outcome) {
        StringBuilder why = new StringBuilder();
        if (!outcome.overflowing().isEmpty()) {
            Prediction p = outcome.overflowing().get(0);
            why.append("; the fastest, ").append(p.candidate()).append(", overflows rank ").append(p.overflowRank())
                    .append(" by ").append(Sizes.format(p.overflowBytes()));
        }
        return new UserInputException(s.config() + ": no candidate fits in " + Sizes.format(cfg.device.memoryPerDevice)
                + " per device (" + outcome.evaluated() + " evaluated" + why + "), expected a larger --memory-per-device");
    }

    /**
     * Runs the {@code verifyTop} best and the shipped config for real, stepped in turn. Returns per run {median
     * seconds, the prediction again at the share of the cores the run got (the host's load then), the prediction
     * from costs calibrated beside it}, the shipped config's last.
     */
    private List<double[]> verify(TtpipeConfig cfg, Tuning tuning, LayerCosts costs, Search.Outcome outcome, Candidate shipped,
                                  boolean measuredCosts, PrintStream progress) {
        int k = Math.min(s.verifyTop(), outcome.ranked().size());
        List<Candidate> runs = new ArrayList<>();
        for (int i = 0; i < k; i++) runs.add(outcome.ranked().get(i).candidate());
        int shippedAt = runs.indexOf(shipped);
        if (shippedAt < 0) runs.add(shipped);
        // Measured costs are measured again beside the candidates (ZB-H1 at their microbatch sizes, stepped in turn with
        // them), so that the host's load while they run is the load the costs were measured under.
        TreeSet<Integer> sizes = new TreeSet<>();
        for (Candidate c : runs) sizes.add(cfg.training.batchSize / c.microbatches());
        if (progress != null) {
            progress.printf(Locale.ROOT, "verifying the top %d%s: %d steps each, stepped in turn%s...%n", k,
                    shippedAt < 0 ? " and the shipped config" : " (the shipped config among them)", s.verifySteps(),
                    measuredCosts ? " with calibration runs at microbatch sizes " + sizes : "");
        }
        List<TtpipeConfig> configs = new ArrayList<>();
        for (Candidate c : runs) configs.add(tuning.configOf(c));
        Search.Job shape = Calibration.job(cfg);
        List<Trial.Result> results;
        LayerCosts beside = null;
        if (measuredCosts) {
            Calibration.Beside b = Calibration.measureBeside(cfg, new ArrayList<>(sizes), configs, s.verifySteps());
            results = b.others();
            beside = b.costs();
        } else {
            results = Trial.interleaved(configs, s.verifySteps());
        }
        List<double[]> measured = new ArrayList<>();
        for (int i = 0; i < results.size(); i++) {
            Prediction again = new Search(costs.atCoreShare(Calibration.coreShare(results.get(i))), shape).predict(runs.get(i));
            Prediction near = beside == null ? null : new Search(beside, shape).predict(runs.get(i));
            measured.add(new double[]{results.get(i).medianSeconds(), again == null ? Double.NaN : again.stepSeconds(),
                    near == null ? Double.NaN : near.stepSeconds()});
        }
        if (shippedAt >= 0) measured.add(measured.get(shippedAt));
        return measured;
    }

    /**
     * The pick: the prediction's best; after verifying, the fastest measured of those run (the shipped config too).
     * Without verifying, the pick's memory is planned as `ttpipe train` plans it at start (replaying its rows on sim
     * devices); the search's estimate is a model of that, and when they disagree on fitting, the next candidate that
     * does fit is taken.
     */
    private Pick pick(TtpipeConfig cfg, Tuning tuning, Search.Outcome outcome, Prediction shippedPrediction, List<double[]> measured) {
        Prediction best = outcome.best();
        String pickedBy = "predicted";
        if (!measured.isEmpty()) {
            int fastest = 0;
            for (int i = 1; i < measured.size(); i++) if (measured.get(i)[0] < measured.get(fastest)[0]) fastest = i;
            best = fastest == measured.size() - 1 ? shippedPrediction : outcome.ranked().get(fastest);
            pickedBy = String.format(Locale.ROOT, "measured %.1f ms/step, the fastest of those verified", measured.get(fastest)[0] * 1e3);
            return new Pick(best, pickedBy, null);
        }
        String memoryNote = null;
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
        return new Pick(best, pickedBy, memoryNote);
    }

    /** Writes the pick's config where {@code out} says; returns the file, or null when none was asked for. */
    private Path write(TtpipeConfig cfg, Tuning tuning, Prediction best, String pickedBy) {
        if (s.out() == null) return null;
        String yaml = String.format(Locale.ROOT, "# written by ttpipe tune %s: %s, predicted %.1f ms/step, %.0f tokens/s (%s)%n",
                s.config(), best.candidate(), best.stepSeconds() * 1e3, best.tokensPerSecond(), pickedBy)
                + ConfigWriter.toYaml(tuning.configOf(best.candidate()));
        try {
            Path parent = s.out().toAbsolutePath().getParent();
            if (parent != null) Files.createDirectories(parent);
            Files.writeString(s.out(), yaml, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UserInputException("--out: cannot write " + s.out() + ": " + e.getMessage(), e);
        }
        return s.out();
    }

    /**
     * The rank counts {@code --ranks} names: {@code A..B} (every count between) or {@code a,b,c}, each from 1 to the
     * number of blocks; refused for a multihost config (its rank_bindings fix the ranks) and with {@code --fix split}.
     */
    static List<Integer> rankCounts(String spec, TtpipeConfig cfg, Set<String> fixed) {
        int blocks = cfg.pipeline().numBlocks > 0 ? cfg.pipeline().numBlocks : cfg.transformer.numBlocks;
        String expected = "expected rank counts from 1 to the " + blocks + " blocks, as A..B or a list such as 2,4,8";
        TreeSet<Integer> out = new TreeSet<>();
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
        double l = ManagementFactory.getOperatingSystemMXBean().getSystemLoadAverage();
        return l < 0 ? Double.NaN : l;
    }
}

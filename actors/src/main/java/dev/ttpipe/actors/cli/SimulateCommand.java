package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.telemetry.RunStageCosts;
import dev.ttpipe.actors.telemetry.TextTable;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.schedules.AsciiGrid;
import dev.ttpipe.schedules.ChromeTrace;
import dev.ttpipe.schedules.CostModel;
import dev.ttpipe.schedules.Lowering;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.schedules.ScheduleCsv;
import dev.ttpipe.schedules.ScheduleException;
import dev.ttpipe.schedules.Schedules;
import dev.ttpipe.schedules.SimResult;
import dev.ttpipe.schedules.Simulator;
import dev.ttpipe.schedules.SvgTimeline;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.io.PrintStream;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;

import static dev.ttpipe.actors.telemetry.TextTable.num;

/**
 * {@code ttpipe simulate}: a microbatch schedule played against a cost model, without hardware.
 * Prints the timeline as a grid and the figures that decide between schedules (makespan, bubble
 * fraction, peak activations per rank); writes SVG, Chrome trace and CSV on request; compares
 * schedules side by side.
 */
@Command(name = "simulate",
        mixinStandardHelpOptions = true,
        description = {"Simulate a pipeline schedule from a cost model: the timeline, makespan, bubble fraction and peak"
                + " activations per rank. Without arguments: 4 ranks, 8 microbatches, 1f1b.",
                "A training CONFIG supplies ranks, microbatches, schedule and virtual stages; flags override it."},
        footer = {"", "Schedules: gpipe, 1f1b, interleaved (alias interleaved-1f1b), zb-h1, zb-h2, zb-greedy, dualpipev.",
                "", "Examples:",
                "  ttpipe simulate",
                "  ttpipe simulate -p 8 -m 16 -s zb-h1 --costs f=1,i=1,w=1,comm=0.05",
                "  ttpipe simulate -s interleaved -v 2 --svg il.svg --trace il.json",
                "  ttpipe simulate -p 8 -m 32 --compare --costs f=1,b=2,w=0.6",
                "  ttpipe simulate --compare 1f1b,zb-h1,zb-greedy --json",
                "  ttpipe simulate -s zb-greedy --memory-limit 8",
                "  ttpipe simulate --load-csv my_schedule.csv --lower",
                "  ttpipe simulate configs/nanogpt-pp4-zb.yaml --svg zb.svg"})
public final class SimulateCommand implements Callable<Integer> {
    static final int DEFAULT_RANKS = 4;
    static final int DEFAULT_MICROBATCHES = 8;
    static final String DEFAULT_SCHEDULE = "1f1b";
    static final String ALL = "all";

    @Parameters(index = "0", arity = "0..1", paramLabel = "CONFIG",
            description = "A training config YAML (its pipeline_parallel_config); optional.")
    Path config;

    @Option(names = {"-p", "--stages"}, paramLabel = "P", description = "Pipeline ranks (default 4).")
    Integer ranks;

    @Option(names = {"-m", "--microbatches"}, paramLabel = "M", description = "Microbatches per step (default 8).")
    Integer microbatches;

    @Option(names = {"-s", "--schedule"}, paramLabel = "NAME", description = "Schedule to generate (default 1f1b).")
    String schedule;

    @Option(names = {"-v", "--virtual-stages"}, paramLabel = "V",
            description = "Stages per rank (default 2 for interleaved and dualpipev, else 1).")
    Integer virtualStages;

    @Option(names = "--costs-from", paramLabel = "RUN_DIR", description = {"Use the per-stage F, B, I, W and comm times",
            "measured in a `ttpipe train` run (its metrics.jsonl, averaged over the steps after the first; its config.yaml",
            "gives P, M, the schedule and V unless flags say otherwise). Milliseconds."})
    Path costsFrom;

    @Option(names = "--costs", paramLabel = "K=X,...",
            description = "Costs of one rank's share of the model, keys f, b, i, w, comm (default f=1,b=2,comm=0)."
                    + " b alone splits into i=w=b/2; i and w alone give b=i+w. With V stages per rank each stage"
                    + " costs a V-th; comm is the time per hop between ranks.")
    String costs;

    @Option(names = "--memory-limit", paramLabel = "N",
            description = "Activations a stage may hold, in microbatches: zb-greedy schedules within it, others are checked.")
    Integer memoryLimit;

    @Option(names = "--svg", paramLabel = "FILE", description = "Write the timeline as an SVG diagram.")
    Path svg;

    @Option(names = "--trace", paramLabel = "FILE", description = "Write the timeline as a Chrome trace (Perfetto), 1 cost unit = 1 ms.")
    Path trace;

    @Option(names = "--csv", paramLabel = "FILE", description = "Write the schedule as a torch-style CSV (lowered with --lower).")
    Path csv;

    @Option(names = "--load-csv", paramLabel = "FILE",
            description = "Simulate a schedule read from a torch-style CSV (compute only or with SEND/RECV).")
    Path loadCsv;

    @Option(names = "--lower", description = "Insert SEND/RECV actions and show them in a step grid.")
    boolean lower;

    @Option(names = "--json", description = "Print one JSON object (an array with --compare) instead of text.")
    boolean json;

    @Option(names = "--compare", paramLabel = "NAMES", arity = "0..1", fallbackValue = ALL,
            description = "Compare schedules (comma-separated; alone: all that fit P and M), one table row each.")
    String compare;

    /** What to simulate, after the config file and the flags. */
    record Settings(int ranks, int microbatches, String schedule, Integer virtualStages, RankCosts costs, Integer memoryLimit) {
    }

    /**
     * The --costs values for one rank's share of the model, or ({@code measured} non-null) the per-stage
     * costs measured in a run; then f, b, i, w are their means per stage and comm the mean SEND time.
     */
    record RankCosts(double f, double b, double i, double w, double comm, RunStageCosts measured) {
        RankCosts(double f, double b, double i, double w, double comm) {
            this(f, b, i, w, comm, null);
        }

        /** Per-stage costs for a schedule with {@code v} stages per rank ({@code stages} in all). */
        CostModel forStages(int v, int stages, Integer memoryLimit) {
            CostModel.Builder builder;
            if (measured != null) {
                if (measured.f().length != stages) {
                    throw new UserInputException("--costs-from: " + measured.runDir() + " measured " + measured.f().length
                            + " stages, this simulation has " + stages + "; expected the run's split (P x V)");
                }
                builder = CostModel.builder().forward(measured.f()).backward(measured.b()).backwardInput(measured.i())
                        .backwardWeight(measured.w()).comm(comm);
            } else {
                builder = CostModel.builder().forward(f / v).backward(b / v).backwardInput(i / v).backwardWeight(w / v).comm(comm);
            }
            if (memoryLimit != null) builder.memoryLimitMicrobatches(memoryLimit);
            return builder.build();
        }
    }

    /** One simulated schedule. */
    record Outcome(Schedule schedule, SimResult result, RankCosts costs) {
    }

    @Override
    public Integer call() {
        PrintStream out = System.out;
        if (loadCsv != null) {
            for (Object[] conflict : new Object[][]{{"--schedule", schedule}, {"--microbatches", microbatches},
                    {"--virtual-stages", virtualStages}, {"--compare", compare}, {"CONFIG", config}}) {
                if (conflict[1] != null) {
                    throw new UserInputException("--load-csv " + loadCsv + " reads the schedule from the file; drop "
                            + conflict[0] + " " + conflict[1]);
                }
            }
        }
        Settings settings = settings();
        if (compare != null) {
            List<Outcome> outcomes = compare(settings, compare);
            if (json) {
                StringBuilder array = new StringBuilder("[");
                for (Outcome o : outcomes) array.append(array.length() > 1 ? ",\n " : "").append(json(o));
                out.println(array.append(']'));
            } else {
                out.print(compareTable(settings, outcomes));
            }
            return Main.EXIT_OK;
        }
        Outcome outcome = loadCsv != null ? simulateCsv(settings, loadCsv, lower) : simulate(settings, lower);
        writeFiles(outcome, out);
        if (json) {
            out.println(json(outcome));
        } else {
            out.print(report(outcome, lower));
        }
        return Main.EXIT_OK;
    }

    // ---- settings ---------------------------------------------------------------------------

    Settings settings() {
        int p = DEFAULT_RANKS;
        int m = DEFAULT_MICROBATCHES;
        String name = DEFAULT_SCHEDULE;
        Integer v = null;
        Path cfgFile = config;
        RunStageCosts measured = null;
        if (costsFrom != null) {
            if (costs != null) throw new UserInputException("--costs-from and --costs given, expected one of them");
            try {
                measured = RunStageCosts.read(costsFrom);
            } catch (IllegalArgumentException e) {
                throw new UserInputException("--costs-from: " + e.getMessage());
            }
            if (cfgFile == null) cfgFile = costsFrom.resolve("config.yaml");
        }
        if (cfgFile != null) {
            TtpipeConfig.PipelineConfig pc = ConfigLoader.load(cfgFile).pipeline();
            p = pc.ranks();
            m = pc.numMicrobatches;
            name = pc.schedule;
            v = pc.virtualStages > 0 ? pc.virtualStages : null;
        }
        if (ranks != null) p = positive("--stages", ranks);
        if (microbatches != null) m = positive("--microbatches", microbatches);
        if (schedule != null) name = schedule;
        if (virtualStages != null) v = positive("--virtual-stages", virtualStages);
        if (memoryLimit != null) positive("--memory-limit", memoryLimit);
        RankCosts rc;
        if (measured != null) {
            RunStageCosts mc = measured;
            rc = new RankCosts(average(mc.f()), average(mc.b()), average(mc.i()),
                    average(mc.w()), mc.comm(), mc);
        } else {
            rc = parseCosts(costs);
        }
        return new Settings(p, m, name, v, rc, memoryLimit);
    }

    private static double average(double[] v) {
        double s = 0;
        for (double x : v) s += x;
        return s / v.length;
    }

    private static int positive(String flag, int value) {
        if (value < 1) throw new UserInputException(flag + ": " + value + " given, expected a positive integer");
        return value;
    }

    /**
     * Parses {@code --costs}: keys f, b, i, w, comm, each at most once, values finite numbers >= 0.
     * Defaults f=1, b=2, comm=0; b alone gives i=w=b/2; i and w without b give b=i+w.
     */
    static RankCosts parseCosts(String text) {
        Map<String, Double> given = new LinkedHashMap<>();
        if (text != null && !text.isBlank()) {
            for (String item : text.split(",", -1)) {
                String entry = item.strip();
                int eq = entry.indexOf('=');
                if (eq < 0) {
                    throw new UserInputException("--costs: \"" + entry + "\" given, expected KEY=NUMBER such as f=1 (keys f, b, i, w, comm)");
                }
                String key = entry.substring(0, eq).strip().toLowerCase(Locale.ROOT);
                String value = entry.substring(eq + 1).strip();
                if (!List.of("f", "b", "i", "w", "comm").contains(key)) {
                    throw new UserInputException("--costs: unknown key \"" + entry.substring(0, eq).strip()
                            + "\", expected f, b, i, w or comm (e.g. --costs f=1,b=2,comm=0.05)");
                }
                double number;
                try {
                    number = Double.parseDouble(value);
                } catch (NumberFormatException e) {
                    throw new UserInputException("--costs: " + key + "=" + value + " is not a number, expected e.g. " + key + "=1.5");
                }
                if (!(number >= 0) || Double.isInfinite(number)) {
                    throw new UserInputException("--costs: " + key + "=" + value + ", expected a finite number >= 0");
                }
                if (given.put(key, number) != null) {
                    throw new UserInputException("--costs: " + key + " given twice in \"" + text + "\"");
                }
            }
        }
        double f = given.getOrDefault("f", 1.0);
        Double b = given.get("b");
        Double i = given.get("i");
        Double w = given.get("w");
        double comm = given.getOrDefault("comm", 0.0);
        double[] biw;
        try {
            biw = CostModel.backwardParts(b, i, w, 2.0);
        } catch (IllegalArgumentException e) {
            throw new UserInputException("--costs: b=" + b + " is smaller than " + (i != null && i > b ? "i=" + i : "w=" + w)
                    + ", expected b >= i and b >= w (b is the whole backward, i + w)");
        }
        b = biw[0];
        i = biw[1];
        w = biw[2];
        return new RankCosts(f, b, i, w, comm);
    }

    // ---- simulation -------------------------------------------------------------------------

    /** Generates and simulates the schedule of {@code s}; {@code lowered}: with SEND/RECV. */
    static Outcome simulate(Settings s, boolean lowered) {
        String name = Schedules.canonicalName(s.schedule());
        int v = s.virtualStages() != null ? s.virtualStages() : Schedules.defaultVirtualStages(name);
        CostModel costs = s.costs().forStages(v, s.ranks() * v, s.memoryLimit());
        Schedule schedule = Schedules.generate(name, s.ranks(), s.microbatches(), v, costs);
        if (lowered) schedule = Lowering.lower(schedule);
        return new Outcome(schedule, Simulator.simulate(schedule, costs), s.costs());
    }

    /** Reads, validates and simulates a CSV schedule; its rows fix P, V and M. */
    Outcome simulateCsv(Settings s, Path file, boolean lowered) {
        Schedule schedule;
        try (Reader in = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            schedule = ScheduleCsv.read(in, file.toString(), ranks != null ? ranks : 0);
        } catch (NoSuchFileException e) {
            throw new UserInputException("--load-csv: " + file + " does not exist");
        } catch (IOException e) {
            throw new UserInputException("--load-csv: cannot read " + file + ": " + e.getMessage(), e);
        }
        if (lowered) schedule = Lowering.lower(schedule);
        CostModel costs = s.costs().forStages(schedule.virtualStages(), schedule.stages(), s.memoryLimit());
        return new Outcome(schedule, Simulator.simulate(schedule, costs), s.costs());
    }

    /** Simulates each schedule named in {@code names} ("all": every one that fits P and M). */
    static List<Outcome> compare(Settings s, String names) {
        boolean all = names.strip().equalsIgnoreCase(ALL);
        List<String> list = all ? Schedules.names() : List.of(names.split(","));
        List<Outcome> outcomes = new ArrayList<>();
        for (String raw : list) {
            String name = raw.strip();
            if (name.isEmpty()) continue;
            try {
                String key = Schedules.canonicalName(name);
                Integer v = key.equals("interleaved") && s.virtualStages() != null ? s.virtualStages() : null;
                outcomes.add(simulate(new Settings(s.ranks(), s.microbatches(), key, v, s.costs(), s.memoryLimit()), false));
            } catch (ScheduleException e) {
                if (all) continue;
                throw new UserInputException("--compare: " + name + ": " + e.reason(), e);
            }
        }
        if (outcomes.isEmpty()) throw new UserInputException("--compare: \"" + names + "\" names no schedule");
        return outcomes;
    }

    // ---- output -----------------------------------------------------------------------------

    private void writeFiles(Outcome o, PrintStream out) {
        if (svg != null) {
            write("--svg", svg, SvgTimeline.render(o.result(), o.schedule().name()));
            if (!json) out.println("wrote " + svg);
        }
        if (trace != null) {
            write("--trace", trace, ChromeTrace.render(o.result()));
            if (!json) out.println("wrote " + trace + " (open it in https://ui.perfetto.dev)");
        }
        if (csv != null) {
            write("--csv", csv, ScheduleCsv.write(o.schedule()));
            if (!json) out.println("wrote " + csv);
        }
    }

    private static void write(String flag, Path file, String text) {
        try {
            Path parent = file.toAbsolutePath().getParent();
            if (parent != null) Files.createDirectories(parent);
            Files.writeString(file, text, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UserInputException(flag + ": cannot write " + file + ": " + e.getMessage(), e);
        }
    }

    /** The grid and the figures, as text. */
    static String report(Outcome o, boolean stepGrid) {
        Schedule s = o.schedule();
        SimResult r = o.result();
        StringBuilder text = new StringBuilder();
        text.append(String.format(Locale.ROOT, "%s: %d ranks, %d stages, %d microbatches; %s F=%s B=%s (I=%s W=%s), comm=%s per hop%n",
                s.name(), s.ranks(), s.stages(), s.microbatches(), o.costs().measured() == null ? "per rank" : "mean per stage",
                num(o.costs().f()), num(o.costs().b()), num(o.costs().i()), num(o.costs().w()), num(o.costs().comm())));
        RunStageCosts mc = o.costs().measured();
        if (mc != null) {
            text.append(String.format(Locale.ROOT, "costs measured in %s (ms, mean of %d steps after the first): F per stage %s, B %s%n",
                    mc.runDir(), mc.steps(), nums(mc.f()), nums(mc.b())));
        }
        text.append('\n').append(stepGrid ? AsciiGrid.render(s) : AsciiGrid.render(r)).append('\n');
        text.append(String.format(Locale.ROOT, "makespan %s, bubble %s overall%n%n", num(r.makespan()), percent(r.bubbleFraction())));
        boolean bytes = r.peakActivationBytes(0) >= 0;
        String[] header = {"rank", "stages", "busy", "idle", "bubble", "peak activations"};
        List<String[]> rows = new ArrayList<>();
        for (int rank = 0; rank < s.ranks(); rank++) {
            StringBuilder stages = new StringBuilder();
            for (int st : s.stagesOfRank(rank)) stages.append(stages.length() == 0 ? "" : ",").append(st);
            rows.add(new String[]{Integer.toString(rank), stages.toString(), num(r.busy(rank)), num(r.makespan() - r.busy(rank)),
                    percent(r.bubbleFraction(rank)), r.peakActivations(rank) + (bytes ? " (" + r.peakActivationBytes(rank) + " B)" : "")});
        }
        text.append(TextTable.render(header, rows));
        for (String violation : r.memoryLimitViolations()) text.append("note: ").append(violation).append('\n');
        return text.toString();
    }

    private static String nums(double[] v) {
        StringBuilder b = new StringBuilder("[");
        for (int k = 0; k < v.length; k++) b.append(k == 0 ? "" : ", ").append(num(v[k]));
        return b.append(']').toString();
    }

    /** One aligned row per schedule. */
    static String compareTable(Settings s, List<Outcome> outcomes) {
        StringBuilder text = new StringBuilder(String.format(Locale.ROOT,
                "%d ranks, %d microbatches; per rank F=%s B=%s (I=%s W=%s), comm=%s per hop%n%n", s.ranks(), s.microbatches(),
                num(s.costs().f()), num(s.costs().b()), num(s.costs().i()), num(s.costs().w()), num(s.costs().comm())));
        String[] header = {"schedule", "V", "makespan", "bubble", "peak activations per rank"};
        List<String[]> rows = new ArrayList<>();
        for (Outcome o : outcomes) {
            StringBuilder peaks = new StringBuilder();
            for (int rank = 0; rank < o.schedule().ranks(); rank++) {
                peaks.append(rank == 0 ? "" : " ").append(o.result().peakActivations(rank));
            }
            rows.add(new String[]{o.schedule().name(), Integer.toString(o.schedule().virtualStages()), num(o.result().makespan()),
                    percent(o.result().bubbleFraction()), peaks.toString()});
        }
        text.append(TextTable.render(header, rows));
        if (outcomes.stream().anyMatch(o -> o.schedule().virtualStages() > 1)) {
            text.append("(with V stages per rank, one activation is one stage's: a V-th of a rank's share)\n");
        }
        return text.toString();
    }

    /** One JSON object with the schedule's figures. */
    static String json(Outcome o) {
        Schedule s = o.schedule();
        SimResult r = o.result();
        StringBuilder j = new StringBuilder("{");
        j.append("\"schedule\":").append(Json.str(s.name()));
        j.append(",\"stages\":").append(s.ranks());
        j.append(",\"virtual_stages\":").append(s.virtualStages());
        j.append(",\"microbatches\":").append(s.microbatches());
        j.append(",\"lowered\":").append(s.isLowered());
        j.append(",\"costs\":{\"f\":").append(Json.num(o.costs().f())).append(",\"b\":").append(Json.num(o.costs().b()))
                .append(",\"i\":").append(Json.num(o.costs().i())).append(",\"w\":").append(Json.num(o.costs().w()))
                .append(",\"comm\":").append(Json.num(o.costs().comm())).append('}');
        j.append(",\"makespan\":").append(Json.num(r.makespan()));
        j.append(",\"bubble_fraction\":").append(Json.num(r.bubbleFraction()));
        j.append(",\"bubble_fraction_per_rank\":[");
        for (int rank = 0; rank < s.ranks(); rank++) j.append(rank == 0 ? "" : ",").append(Json.num(r.bubbleFraction(rank)));
        j.append("],\"peak_activations\":[");
        for (int rank = 0; rank < s.ranks(); rank++) j.append(rank == 0 ? "" : ",").append(r.peakActivations(rank));
        j.append("],\"memory_limit_violations\":[");
        List<String> violations = r.memoryLimitViolations();
        for (int k = 0; k < violations.size(); k++) j.append(k == 0 ? "" : ",").append(Json.str(violations.get(k)));
        return j.append("]}").toString();
    }

    private static String percent(double fraction) {
        return String.format(Locale.ROOT, "%.1f%%", 100 * fraction);
    }

}

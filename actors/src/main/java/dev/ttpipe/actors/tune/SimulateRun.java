package dev.ttpipe.actors.tune;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.telemetry.RunStageCosts;
import dev.ttpipe.actors.telemetry.Terminal;
import dev.ttpipe.actors.telemetry.TextWrap;
import dev.ttpipe.schedules.ChromeTrace;
import dev.ttpipe.schedules.Lowering;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.schedules.ScheduleCsv;
import dev.ttpipe.schedules.ScheduleException;
import dev.ttpipe.schedules.Schedules;
import dev.ttpipe.schedules.SimResult;
import dev.ttpipe.schedules.Simulator;
import dev.ttpipe.schedules.SvgTimeline;

import java.io.IOException;
import java.io.PrintStream;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * One {@code ttpipe simulate}: a microbatch schedule (generated, or read from a CSV) played against a cost model
 * (from {@code --costs} or measured in a run), without hardware; or several schedules side by side
 * ({@code compare}). Prints the timeline as a grid and the figures that decide between schedules, as text or JSON,
 * and writes SVG, Chrome trace and CSV on request. A training config supplies ranks, microbatches, schedule and
 * virtual stages; the flags override it. A problem the settings cause is a {@link UserInputException} naming the
 * flag (or the config's {@code ConfigException}, or the schedules' {@link ScheduleException}).
 */
public final class SimulateRun {
    static final int DEFAULT_RANKS = 4;
    static final int DEFAULT_MICROBATCHES = 8;
    static final String DEFAULT_SCHEDULE = "1f1b";
    /** The narrowest {@code --width}: the per-rank table (not folded) is about 50 columns wide. */
    static final int MIN_WIDTH = 60;
    /** {@code compare} alone: every schedule that fits P and M. */
    public static final String ALL = "all";

    /**
     * What to simulate and what to write, one field per flag of {@code ttpipe simulate}; null: not given.
     *
     * @param config    a training config whose pipeline_parallel_config supplies P, M, the schedule and V
     * @param costsFrom a `ttpipe train` run directory whose measured per-stage costs (and config.yaml) to use
     * @param costs     the {@code --costs} text, keys f, b, i, w, comm
     * @param loadCsv   a torch-style CSV schedule to simulate instead of generating one
     * @param lower     insert SEND/RECV actions and show them in a step grid
     * @param compare   comma-separated schedule names, or {@link #ALL}
     * @param sets      {@code --set KEY=VALUE} settings applied to the config
     * @param width     the columns the text may take (the grid folds into bands, lines wrap); null: the terminal's
     */
    public record Settings(Path config, Integer ranks, Integer microbatches, String schedule, Integer virtualStages,
                           Path costsFrom, String costs, Integer memoryLimit, Path svg, Path trace, Path csv, Path loadCsv,
                           boolean lower, boolean json, String compare, List<String> sets, Integer width) {
    }

    /** What to simulate, after the config file and the flags. */
    record Simulation(int ranks, int microbatches, String schedule, Integer virtualStages, RankCosts costs, Integer memoryLimit) {
    }

    /** One simulated schedule. */
    record Outcome(Schedule schedule, SimResult result, RankCosts costs) {
    }

    private final Settings s;
    private final PrintStream out;
    /** The columns the text may take: {@code --width}, else the terminal's. */
    private int width;

    private SimulateRun(Settings s, PrintStream out) {
        this.s = s;
        this.out = out;
    }

    /** Simulates as {@code settings} say, printing the result to {@code out} and writing the files asked for. */
    public static void run(Settings settings, PrintStream out) {
        new SimulateRun(settings, out).run();
    }

    private void run() {
        if (s.loadCsv() != null) {
            for (Object[] conflict : new Object[][]{{"--schedule", s.schedule()}, {"--microbatches", s.microbatches()},
                    {"--virtual-stages", s.virtualStages()}, {"--compare", s.compare()}, {"CONFIG", s.config()}}) {
                if (conflict[1] != null) {
                    throw new UserInputException("--load-csv " + s.loadCsv() + " reads the schedule from the file; drop "
                            + conflict[0] + " " + conflict[1]);
                }
            }
        }
        Simulation sim = simulation();
        width = s.width() != null ? atLeast("--width", s.width(), MIN_WIDTH) : Terminal.columns();
        if (s.compare() != null) {
            List<Outcome> outcomes = compare(sim, s.compare());
            if (s.json()) {
                out.println(SimulateReport.jsonArray(outcomes));
            } else {
                out.print(SimulateReport.compareTable(sim, outcomes, width));
            }
            return;
        }
        Outcome outcome = s.loadCsv() != null ? simulateCsv(sim, s.loadCsv(), s.lower()) : simulate(sim, s.lower());
        writeFiles(outcome);
        if (s.json()) {
            out.println(SimulateReport.json(outcome));
        } else {
            out.print(SimulateReport.text(outcome, s.lower(), width));
        }
    }

    // ---- settings ---------------------------------------------------------------------------

    private Simulation simulation() {
        int p = DEFAULT_RANKS;
        int m = DEFAULT_MICROBATCHES;
        String name = DEFAULT_SCHEDULE;
        Integer v = null;
        Path cfgFile = s.config();
        RunStageCosts measured = null;
        if (s.costsFrom() != null) {
            if (s.costs() != null) throw new UserInputException("--costs-from and --costs given, expected one of them");
            try {
                measured = RunStageCosts.read(s.costsFrom());
            } catch (IllegalArgumentException e) {
                throw new UserInputException("--costs-from: " + e.getMessage());
            }
            if (cfgFile == null) cfgFile = s.costsFrom().resolve("config.yaml");
        }
        if (!s.sets().isEmpty() && cfgFile == null) {
            throw new UserInputException("--set: " + s.sets().get(0) + " given without a CONFIG, expected a config (or --costs-from"
                    + " a run) to set it in");
        }
        if (cfgFile != null) {
            TtpipeConfig.PipelineConfig pc = ConfigLoader.load(cfgFile, s.sets()).pipeline();
            p = pc.ranks();
            m = pc.numMicrobatches;
            name = pc.schedule;
            v = pc.virtualStages > 0 ? pc.virtualStages : null;
        }
        if (s.ranks() != null) p = positive("--stages", s.ranks());
        if (s.microbatches() != null) m = positive("--microbatches", s.microbatches());
        if (s.schedule() != null) name = s.schedule();
        if (s.virtualStages() != null) v = positive("--virtual-stages", s.virtualStages());
        if (s.memoryLimit() != null) positive("--memory-limit", s.memoryLimit());
        RankCosts rc = measured != null ? RankCosts.measured(measured) : RankCosts.parse(s.costs());
        return new Simulation(p, m, name, v, rc, s.memoryLimit());
    }

    private static int positive(String flag, int value) {
        if (value < 1) throw new UserInputException(flag + ": " + value + " given, expected a positive integer");
        return value;
    }

    private static int atLeast(String flag, int value, int min) {
        if (value < min) throw new UserInputException(flag + ": " + value + " given, expected at least " + min + " columns");
        return value;
    }

    // ---- simulation -------------------------------------------------------------------------

    /** Generates and simulates the schedule of {@code sim}; {@code lowered}: with SEND/RECV. */
    private static Outcome simulate(Simulation sim, boolean lowered) {
        String name = Schedules.canonicalName(sim.schedule());
        int v = sim.virtualStages() != null ? sim.virtualStages() : Schedules.defaultVirtualStages(name);
        Schedule schedule = Schedules.generate(name, sim.ranks(), sim.microbatches(), v,
                sim.costs().forStages(v, sim.ranks() * v, sim.memoryLimit()));
        if (lowered) schedule = Lowering.lower(schedule);
        return new Outcome(schedule, Simulator.simulate(schedule, sim.costs().forSchedule(schedule, sim.memoryLimit())), sim.costs());
    }

    /** Reads, validates and simulates a CSV schedule; its rows fix P, V and M. */
    private Outcome simulateCsv(Simulation sim, Path file, boolean lowered) {
        Schedule schedule;
        try (Reader in = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            schedule = ScheduleCsv.read(in, file.toString(), s.ranks() != null ? s.ranks() : 0);
        } catch (NoSuchFileException e) {
            throw new UserInputException("--load-csv: " + file + " does not exist");
        } catch (IOException e) {
            throw new UserInputException("--load-csv: cannot read " + file + ": " + e.getMessage(), e);
        }
        if (lowered) schedule = Lowering.lower(schedule);
        return new Outcome(schedule, Simulator.simulate(schedule, sim.costs().forSchedule(schedule, sim.memoryLimit())), sim.costs());
    }

    /** Simulates each schedule named in {@code names} ({@link #ALL}: every one that fits P and M). */
    private static List<Outcome> compare(Simulation sim, String names) {
        boolean all = names.strip().equalsIgnoreCase(ALL);
        List<String> list = all ? Schedules.names() : List.of(names.split(","));
        List<Outcome> outcomes = new ArrayList<>();
        for (String raw : list) {
            String name = raw.strip();
            if (name.isEmpty()) continue;
            try {
                String key = Schedules.canonicalName(name);
                Integer v = key.equals("interleaved") && sim.virtualStages() != null ? sim.virtualStages() : null;
                outcomes.add(simulate(new Simulation(sim.ranks(), sim.microbatches(), key, v, sim.costs(), sim.memoryLimit()), false));
            } catch (ScheduleException e) {
                if (all) continue;
                throw new UserInputException("--compare: " + name + ": " + e.reason(), e);
            }
        }
        if (outcomes.isEmpty()) throw new UserInputException("--compare: \"" + names + "\" names no schedule");
        return outcomes;
    }

    // ---- files ------------------------------------------------------------------------------

    private void writeFiles(Outcome o) {
        if (s.svg() != null) {
            write("--svg", s.svg(), SvgTimeline.render(o.result(), o.schedule().name()));
            if (!s.json()) out.println(TextWrap.wrap("wrote " + s.svg(), width, 2));
        }
        if (s.trace() != null) {
            write("--trace", s.trace(), ChromeTrace.render(o.result()));
            if (!s.json()) out.println(TextWrap.wrap("wrote " + s.trace() + " (open it in https://ui.perfetto.dev)", width, 2));
        }
        if (s.csv() != null) {
            write("--csv", s.csv(), ScheduleCsv.write(o.schedule()));
            if (!s.json()) out.println(TextWrap.wrap("wrote " + s.csv(), width, 2));
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
}

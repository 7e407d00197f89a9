package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.ConfigWriter;
import dev.ttpipe.actors.telemetry.Terminal;
import dev.ttpipe.actors.tune.SimulateRun;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;

/**
 * {@code ttpipe simulate}: the flags of a {@link SimulateRun}, which plays a microbatch schedule against a cost model,
 * without hardware, prints the timeline as a grid and the figures that decide between schedules (makespan, bubble
 * fraction, peak activations per rank), writes SVG, Chrome trace and CSV on request and compares schedules side by side.
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
                "  ttpipe simulate -p 8 -m 32 --width 120",
                "  ttpipe simulate --compare 1f1b,zb-h1,zb-greedy --json",
                "  ttpipe simulate -s zb-greedy --memory-limit 8",
                "  ttpipe simulate --load-csv my_schedule.csv --lower",
                "  ttpipe simulate configs/nanogpt-pp4-zb.yaml --svg zb.svg"})
public final class SimulateCommand implements Callable<Integer> {
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

    @Option(names = "--compare", paramLabel = "NAMES", arity = "0..1", fallbackValue = SimulateRun.ALL,
            description = "Compare schedules (comma-separated; alone: all that fit P and M), one table row each.")
    String compare;

    @Option(names = "--set", paramLabel = "KEY=VALUE", description = "Set a key of CONFIG, dotted as in the YAML (repeatable).")
    List<String> sets = new ArrayList<>();

    @Option(names = "--print-config", description = "Print CONFIG as read, each value with where it came from, and exit.")
    boolean printConfig;

    @Option(names = "--width", paramLabel = "COLUMNS", description = "Fit the text to this many columns (at least 60): the"
            + " grid goes on in bands below, each with its own time axis and rank labels. Default: the terminal's width"
            + " (COLUMNS, or TTPIPE_COLUMNS), 80 when the output is not a terminal.")
    Integer width;

    @Override
    public Integer call() {
        if (printConfig) {
            if (config == null) throw new UserInputException("--print-config: no CONFIG given, expected a config to print");
            System.out.print(ConfigWriter.withOrigins(ConfigLoader.load(config, sets), Terminal.columns()));
            return Main.EXIT_OK;
        }
        SimulateRun.run(new SimulateRun.Settings(config, ranks, microbatches, schedule, virtualStages, costsFrom, costs, memoryLimit,
                svg, trace, csv, loadCsv, lower, json, compare, sets, width), System.out);
        return Main.EXIT_OK;
    }
}

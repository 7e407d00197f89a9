package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.tune.Trial;
import dev.ttpipe.actors.tune.TuneRun;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;

/**
 * {@code ttpipe tune CONFIG}: the flags of a {@link TuneRun}, which calibrates the model's per-block costs,
 * searches schedules x microbatches x splits x recompute under each rank's memory with the simulator, prints
 * the ranking and writes the best config; with {@code --verify-top K} it runs the K best and the shipped
 * config and prints measured against predicted.
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
                "  ttpipe tune configs/nanogpt-pp4-1f1b.yaml --costs-from runs/a --costs-from runs/b --fix split",
                "  ttpipe tune configs/sim-pp16.yaml --profile galaxy --set training_config.batch_size=128 --dry-run"})
public final class TuneCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "CONFIG", description = "A training config YAML.")
    Path config;

    @Mixin
    JobOptions job = new JobOptions();

    @Mixin
    DryRunOptions preview = new DryRunOptions();

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
        TtpipeConfig cfg = job.resolve(config, null);
        TuneRun tune = TuneRun.prepare(new TuneRun.Settings(config, budget, memoryPerDevice, top, out, json, verifyTop, verifySteps,
                calibrationSteps, costsFrom, profile, measure, ranks, fix), cfg, System.out);
        // the config as it is need not fit: tune looks for a candidate that does
        if (preview.preview(cfg, System.out, false, tune::plan)) return Main.EXIT_OK;
        tune.run();
        return Main.EXIT_OK;
    }
}

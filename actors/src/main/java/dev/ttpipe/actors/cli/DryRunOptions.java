package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.actors.config.ConfigWriter;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.telemetry.Terminal;
import dev.ttpipe.actors.train.TrainingJob;
import picocli.CommandLine.Option;

import java.io.PrintStream;
import java.util.function.Supplier;

/**
 * {@code --print-config} and {@code --dry-run}, shared by the commands that run a config (train, verify, worker,
 * launch, tune, bench step): look at what a command line would run without running it.
 */
public final class DryRunOptions {
    @Option(names = "--print-config", description = {"Print the config as it would run, each value with where it came from",
            "(default, FILE:LINE, or the flag), and exit."})
    boolean printConfig;

    @Option(names = "--dry-run", description = {"Check the config, the data and every device's memory, print the plan,",
            "and exit without running (0: it would start)."})
    boolean dryRun;

    /**
     * Prints what was asked for a resolved config: the config with its origins, then (--dry-run) the plan built as the
     * run would build it, its memory planned. True when the command stops here.
     *
     * @throws dev.ttpipe.actors.config.ConfigException as the run itself would, when the job cannot start
     */
    boolean preview(TtpipeConfig cfg, PrintStream out) {
        return preview(cfg, out, true, null);
    }

    /**
     * {@link #preview(TtpipeConfig, PrintStream)} for a command that runs more than the training job: {@code also}
     * says what it would run, after the plan. With {@code mustFit} false, a config whose devices would run out of
     * memory is shown with the overflow instead of refused (tune looks for a candidate that fits).
     */
    boolean preview(TtpipeConfig cfg, PrintStream out, boolean mustFit, Supplier<String> also) {
        if (printConfig) out.print(ConfigWriter.withOrigins(cfg, Terminal.columns()));
        if (dryRun) {
            TrainingJob job = mustFit ? TrainingJob.fromConfig(cfg) : TrainingJob.planned(cfg);
            Terminal.printWrapped(out, job.describe());
            String fits = "every device fits";
            if (job.memoryPlan() != null) {
                Terminal.printWrapped(out, job.memoryPlan().summary());
                try {
                    job.memoryPlan().check(cfg.origins.where("device_config.memory_per_device"));
                } catch (ConfigException overflow) {
                    Terminal.printWrapped(out, "as the config is: " + overflow.getMessage());
                    fits = "as it is, a device would run out of memory";
                }
            }
            if (also != null) Terminal.printWrapped(out, also.get());
            Terminal.printWrapped(out, "dry run: the config is valid, the data reads and " + fits + "; nothing ran");
        }
        return printConfig || dryRun;
    }
}

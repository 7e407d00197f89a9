package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.ConfigWriter;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.telemetry.Terminal;
import dev.ttpipe.actors.train.TrainingJob;
import picocli.CommandLine.Option;

import java.io.PrintStream;

/**
 * {@code --print-config} and {@code --dry-run}, shared by the commands that run a config (train, verify, worker,
 * launch): look at what a command line would run without running it.
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
        if (printConfig) out.print(ConfigWriter.withOrigins(cfg));
        if (dryRun) {
            TrainingJob job = TrainingJob.fromConfig(cfg);
            Terminal.printWrapped(out, job.describe());
            if (job.memoryPlan() != null) Terminal.printWrapped(out, job.memoryPlan().summary());
            Terminal.printWrapped(out, "dry run: the config is valid, the data reads and every device fits; nothing ran");
        }
        return printConfig || dryRun;
    }
}

package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.train.CheckpointBenchmark;
import dev.ttpipe.actors.train.TrainingJob;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.Locale;
import java.util.concurrent.Callable;

/** {@code ttpipe bench checkpoint CONFIG}: the step time with and without a checkpoint after every step. */
@Command(name = "checkpoint",
        mixinStandardHelpOptions = true,
        description = {"Time training steps with and without a checkpoint after each.",
                "Steps without saving and with a checkpoint after every step (the pipeline waits for",
                "the host copy only; files are written in the background), and compare the writers' bandwidth with the disk's."},
        footer = {"", "Examples:",
                "  ttpipe bench checkpoint configs/nanogpt-pp4-1f1b.yaml",
                "  ttpipe bench checkpoint configs/nanogpt-pp2.yaml --steps 10 --dir /mnt/nvme/tmp --json"})
public final class BenchCheckpointCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "CONFIG", description = "A training config YAML.")
    Path config;

    @Mixin
    JobOptions job = new JobOptions();

    @Option(names = "--steps", paramLabel = "N", defaultValue = "8", description = "Timed steps of each kind (default ${DEFAULT-VALUE}).")
    int steps;

    @Option(names = "--dir", paramLabel = "DIR", description = "Where to write (default: a temporary directory, removed after).")
    Path dir;

    @Option(names = "--json", description = "Print one JSON object.")
    boolean json;

    @Override
    public Integer call() throws Exception {
        if (steps < 1) throw new UserInputException("--steps: " + steps + " given, expected a positive integer");
        TtpipeConfig cfg = job.resolve(config, null);
        TrainingJob training = TrainingJob.fromConfig(cfg);
        Path where = dir != null ? Files.createDirectories(dir).resolve("ttpipe-bench-checkpoint")
                : Files.createTempDirectory("ttpipe-bench-checkpoint");
        CheckpointBenchmark.Result r;
        try {
            r = CheckpointBenchmark.run(training, where, steps);
        } finally {
            try (var s = Files.walk(where)) {
                s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
        }
        if (json) {
            System.out.println("{\"config\":" + Json.str(config.toString()) + ",\"steps\":" + r.steps() + ",\"plain_step_ms\":"
                    + Json.num(r.plainStepMs()) + ",\"saving_step_ms\":" + Json.num(r.savingStepMs()) + ",\"copy_ms\":"
                    + Json.num(r.copyMs()) + ",\"checkpoint_bytes\":" + r.checkpointBytes() + ",\"write_mbps\":"
                    + Json.num(r.writeMBps()) + ",\"disk_mbps\":" + Json.num(r.diskMBps()) + "}");
        } else {
            System.out.printf(Locale.ROOT, "bench checkpoint: %s, %d steps of each kind, a checkpoint of %s%n", config, r.steps(),
                    Sizes.format(r.checkpointBytes()));
            System.out.printf(Locale.ROOT, "step without saving: median %.1f ms%n", r.plainStepMs());
            System.out.printf(Locale.ROOT, "step with a save after it: median %.1f ms (%.2fx; the pipeline waits %.1f ms for the host copy)%n",
                    r.savingStepMs(), r.savingStepMs() / r.plainStepMs(), r.copyMs());
            System.out.printf(Locale.ROOT, "background writes: %.0f MB/s; this disk, one file written and flushed: %.0f MB/s%n",
                    r.writeMBps(), r.diskMBps());
        }
        return Main.EXIT_OK;
    }
}

package dev.ttpipe.actors.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

/** {@code ttpipe bench ...}: programs that measure and print figures (never pass/fail on time). */
@Command(name = "bench",
        mixinStandardHelpOptions = true,
        description = "Measure and print figures: matmul, training step, checkpoints, telemetry, schedule engine, transport, bridge,"
                + " network, faults.",
        subcommands = {
                BenchMatmulCommand.class,
                BenchStepCommand.class,
                BenchCheckpointCommand.class,
                BenchTelemetryCommand.class,
                BenchScheduleCommand.class,
                BenchTransportCommand.class,
                BenchBridgeCommand.class,
                BenchNetworkCommand.class,
                BenchFaultsCommand.class,
        },
        footer = {"", "Examples:",
                "  ttpipe bench matmul --size 1024 --threads 2",
                "  ttpipe bench matmul --json",
                "  ttpipe bench step configs/bench/gpt-s.yaml",
                "  ttpipe bench checkpoint configs/nanogpt-pp4-1f1b.yaml",
                "  ttpipe bench transport --sizes 1MiB,4MiB,64MiB",
                "  ttpipe bench bridge --json",
                "  ttpipe bench faults --rounds 5"})
public final class BenchCommand implements Runnable {
    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public void run() {
        spec.commandLine().usage(spec.commandLine().getOut());
    }
}

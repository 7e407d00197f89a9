package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.schedules.ScheduleBenchmark;
import dev.ttpipe.schedules.Schedules;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.util.concurrent.Callable;

/** {@code ttpipe bench schedule}: how long generating, lowering, validating and simulating a schedule takes. */
@Command(name = "schedule",
        mixinStandardHelpOptions = true,
        description = "Time the schedule engine: generate, lower, validate and simulate (median of 11 runs after warm-up).",
        footer = {"", "Examples:",
                "  ttpipe bench schedule                          # 1f1b, P=64, M=512",
                "  ttpipe bench schedule --schedule zb-h1 --stages 32 --microbatches 256",
                "  ttpipe bench schedule --json"})
public final class BenchScheduleCommand implements Callable<Integer> {
    @Option(names = "--schedule", paramLabel = "NAME", defaultValue = "1f1b", description = "Schedule (default ${DEFAULT-VALUE}).")
    String schedule;

    @Option(names = "--stages", paramLabel = "P", defaultValue = "64", description = "Pipeline ranks (default ${DEFAULT-VALUE}).")
    int stages;

    @Option(names = "--microbatches", paramLabel = "M", defaultValue = "512", description = "Microbatches (default ${DEFAULT-VALUE}).")
    int microbatches;

    @Option(names = "--virtual-stages", paramLabel = "V", description = "Stages per rank (default: the schedule's).")
    Integer virtualStages;

    @Option(names = "--json", description = "Print one JSON object.")
    boolean json;

    @Override
    public Integer call() {
        if (stages < 1) throw new UserInputException("--stages: " + stages + " given, expected a positive integer");
        if (microbatches < 1) throw new UserInputException("--microbatches: " + microbatches + " given, expected a positive integer");
        int v = virtualStages != null ? virtualStages : Schedules.defaultVirtualStages(schedule);
        ScheduleBenchmark.Result r = ScheduleBenchmark.run(schedule, stages, microbatches, v);
        if (!json) {
            ScheduleBenchmark.print(r);
            return Main.EXIT_OK;
        }
        StringBuilder phases = new StringBuilder("{");
        for (int k = 0; k < ScheduleBenchmark.PHASES.size(); k++) {
            phases.append(k == 0 ? "" : ",").append(Json.str(ScheduleBenchmark.PHASES.get(k))).append(':').append(Json.num(r.medianMs()[k]));
        }
        System.out.println("{\"schedule\":" + Json.str(r.schedule()) + ",\"ranks\":" + r.ranks() + ",\"virtual_stages\":"
                + r.virtualStages() + ",\"microbatches\":" + r.microbatches() + ",\"compute_actions\":" + r.computeActions()
                + ",\"lowered_actions\":" + r.loweredActions() + ",\"runs\":" + r.runs() + ",\"warmup\":" + r.warmup()
                + ",\"median_ms\":" + phases.append('}') + ",\"total_ms\":" + Json.num(r.totalMs()) + ",\"makespan\":"
                + Json.num(r.makespan()) + ",\"bubble\":" + Json.num(r.bubble()) + "}");
        return Main.EXIT_OK;
    }
}

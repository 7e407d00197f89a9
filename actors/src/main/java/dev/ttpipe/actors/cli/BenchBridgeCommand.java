package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.telemetry.Json;

import dev.ttpipe.device.ttnn.BridgeBenchmark;
import dev.ttpipe.device.ttnn.BridgeLoadException;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.concurrent.Callable;

/**
 * {@code ttpipe bench bridge}: what the ttnn backend's bridge costs, the JNA call into the native
 * library and the per-op overhead over the cpu backend on small shapes. The computation is
 * {@link BridgeBenchmark}; this prints it. Figures only, never pass/fail.
 */
@Command(name = "bridge",
        mixinStandardHelpOptions = true,
        description = {"Measure the cost of the ttnn backend's native bridge: one JNA call into the library (the no-op "
                + "entry, median over many calls), and ns/op of small ops on the ttnn backend against the cpu backend "
                + "(one device, one thread each), with the difference.",
                "Without --library the bridge library is looked for as the ttnn backend does: -Dttpipe.bridge.library, "
                        + "$TTPIPE_BRIDGE_LIBRARY, next to the ttpipe jars, then device-bridge/target/native/ under the "
                        + "working directory and its parents (the reference build of 'mvn -pl device-bridge package')."},
        footer = {"", "Examples:",
                "  ttpipe bench bridge",
                "  ttpipe bench bridge --json",
                "  ttpipe bench bridge --library build/ttnn/libttpipe_bridge_ttnn.so --seconds 1"})
public final class BenchBridgeCommand implements Callable<Integer> {
    static final double MAX_SECONDS = 60;

    @Option(names = "--json", description = "Print one JSON object instead of the table.")
    boolean json;

    @Option(names = "--library", paramLabel = "PATH",
            description = "The bridge library to measure (default: the ttnn backend's search).")
    Path library;

    @Option(names = "--seconds", paramLabel = "S", defaultValue = "0.3",
            description = "Time spent on each figure and backend, warmup included (default: ${DEFAULT-VALUE}).")
    double seconds;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() {
        if (!(seconds > 0 && seconds <= MAX_SECONDS)) {
            throw new UserInputException("--seconds " + seconds + ": expected a number of seconds above 0 and at most "
                    + (int) MAX_SECONDS);
        }
        if (library != null && !Files.isRegularFile(library)) {
            throw new UserInputException("--library " + library + ": no such file; expected the path of a ttpipe bridge "
                    + "library (libttpipe_bridge_ref.so from 'mvn -pl device-bridge package', or a TTNN build)");
        }
        PrintWriter out = spec.commandLine().getOut();
        if (!json) {
            spec.commandLine().getErr().printf(Locale.ROOT, "measuring the bridge for about %.0f s...%n",
                    seconds * 13 + 1);
            spec.commandLine().getErr().flush();
        }
        BridgeBenchmark.Result r;
        try {
            r = BridgeBenchmark.run(library == null ? null : library.toString(), seconds);
        } catch (BridgeLoadException e) {
            throw new UserInputException(e.getMessage(), e);
        }
        if (json) out.println(json(r, seconds));
        else table(out, r, seconds);
        out.flush();
        return Main.EXIT_OK;
    }

    /** ttnn-ref for the reference library, ttnn for a TTNN build. */
    static String label(BridgeBenchmark.Result r) {
        return r.implementation().startsWith("reference") ? "ttnn-ref" : "ttnn";
    }

    static void table(PrintWriter out, BridgeBenchmark.Result r, double seconds) {
        String label = label(r);
        out.printf(Locale.ROOT, "bridge    %s%n", r.library());
        out.printf(Locale.ROOT, "          %s%n", r.implementation());
        out.printf(Locale.ROOT, "jna call  %.1f ns (ttpipe_noop, median over %,d calls; best sample %.1f ns)%n%n",
                r.jnaCallNanos(), r.jnaCalls(), r.jnaCallBest());
        out.printf(Locale.ROOT, "%-10s %-19s %12s %14s %12s%n", "op", "shape", "cpu ns/op", label + " ns/op",
                "difference");
        for (BridgeBenchmark.OpCost c : r.ops()) {
            out.printf(Locale.ROOT, "%-10s %-19s %12.0f %14.0f %+12.0f%n", c.op(), c.shape(), c.cpuNanos(), c.ttnnNanos(),
                    c.overheadNanos());
        }
        out.printf(Locale.ROOT, "%n(one-device meshes, one thread; medians of interleaved samples, %.2f s per figure "
                + "and backend; an op on %s is the allocation, the op and the free, each one call into the library)%n",
                seconds, label);
    }

    static String json(BridgeBenchmark.Result r, double seconds) {
        StringBuilder b = new StringBuilder();
        b.append(String.format(Locale.ROOT, "{\"library\": %s, \"implementation\": %s, \"backend_label\": %s, "
                        + "\"jna_call_ns\": %.2f, \"jna_call_best_ns\": %.2f, \"jna_calls\": %d, "
                        + "\"seconds_per_figure\": %.3f, \"ops\": [",
                Json.str(r.library().toString()), Json.str(r.implementation()),
                Json.str(label(r)), r.jnaCallNanos(), r.jnaCallBest(), r.jnaCalls(), seconds));
        for (int i = 0; i < r.ops().size(); i++) {
            BridgeBenchmark.OpCost c = r.ops().get(i);
            b.append(i == 0 ? "" : ", ").append(String.format(Locale.ROOT,
                    "{\"op\": %s, \"shape\": %s, \"cpu_ns\": %.1f, \"ttnn_ns\": %.1f, \"overhead_ns\": %.1f}",
                    Json.str(c.op()), Json.str(c.shape()), c.cpuNanos(), c.ttnnNanos(),
                    c.overheadNanos()));
        }
        return b.append("]}").toString();
    }
}

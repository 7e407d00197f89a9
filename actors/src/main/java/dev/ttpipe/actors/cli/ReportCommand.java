package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.telemetry.Report;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;

/** {@code ttpipe report RUN_DIR [RUN_DIR2]}: one self-contained HTML page about a run, or two side by side. */
@Command(name = "report",
        mixinStandardHelpOptions = true,
        description = {"Write an HTML report of a run, or of two side by side.",
                "report.html is one self-contained file (no network): loss and validation curves, tokens/s and",
                "bubble per step, the measured timeline of the last traced pass beside the simulator's prediction for its",
                "measured costs, the per-rank table averaged over steps, F/I/B/W cost per stage, and the run's metadata.",
                "With two run directories, they stand side by side."},
        footer = {"", "Examples:",
                "  ttpipe report runs/20261123-101500-arithmetic",
                "  ttpipe report runs/a runs/b --out compare.html",
                "  ttpipe report runs/a --step 3",
                "  ttpipe report runs/a --json"})
public final class ReportCommand implements Callable<Integer> {
    @Parameters(arity = "1..2", paramLabel = "RUN_DIR", description = "One or two run directories.")
    List<Path> runDirs = new ArrayList<>();

    @Option(names = "--out", paramLabel = "FILE", description = "Where to write (default: RUN_DIR/report.html).")
    Path out;

    @Option(names = "--step", paramLabel = "N", description = "Draw the timeline of step N (one of the traced: the first"
            + " telemetry.trace_steps, 10 unless set, and the last; default the last).")
    Integer step;

    @Option(names = "--json", description = "Print the figures as JSON instead of writing HTML.")
    boolean json;

    @Override
    public Integer call() throws Exception {
        List<Report.Run> runs = new ArrayList<>();
        for (Path d : runDirs) {
            try {
                runs.add(Report.Run.read(d));
            } catch (IllegalArgumentException e) {
                throw new UserInputException(e.getMessage());
            }
        }
        if (json) {
            System.out.println(Report.json(runs));
            return Main.EXIT_OK;
        }
        Path file = out != null ? out : runDirs.get(0).resolve("report.html");
        String html;
        try {
            html = Report.html(runs, step);
        } catch (IllegalArgumentException e) {
            throw new UserInputException(e.getMessage());
        }
        Files.writeString(file, html, StandardCharsets.UTF_8);
        System.out.println("wrote " + file + " (open it in a browser; it needs no network)");
        return Main.EXIT_OK;
    }
}

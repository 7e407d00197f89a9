package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.stages.StageSlice;

import java.io.PrintStream;
import java.util.Locale;

/** The per-rank table printed after a run: busy time, measured and simulated bubble, peak memory. */
public final class StageTable {
    private StageTable() {
    }

    public static void print(PrintStream out, JobPlan plan, StepAnalysis a, Coordinator.StepReport r) {
        StepAnalysis.Prediction p = a.predicted();
        int columns = Terminal.columns();
        out.println(TextWrap.wrap(String.format(Locale.ROOT, "last step: %.3f s; passes %.3f s wall, simulator predicts %s for the"
                + " measured costs", r.seconds(), a.wallSeconds(),
                p == null ? "n/a" : String.format(Locale.ROOT, "%.3f s", p.makespan() * r.passStartNs().length)), columns, 2));
        out.println(TextWrap.wrap(a.overhead().describe(), columns, 2));
        out.printf("%-5s %-10s %10s %10s %12s %12s%n", "rank", "stages", "busy", "bubble", "sim bubble", "peak memory");
        for (int rank = 0; rank < plan.ranks(); rank++) {
            StringBuilder st = new StringBuilder();
            for (StageSlice s : plan.slicesOfRank(rank)) st.append(st.length() == 0 ? "" : ",").append(s.index());
            out.printf(Locale.ROOT, "%-5d %-10s %9.3fs %9.1f%% %11s %12s%n", rank, st, a.busySeconds(rank), 100 * a.bubble(rank),
                    p == null ? "n/a" : String.format(Locale.ROOT, "%.1f%%", 100 * p.bubbleFraction(rank)),
                    Sizes.format(r.memoryPeak()[rank]));
        }
        out.printf(Locale.ROOT, "all   %-10s %10s %9.1f%% %11s%n", "", "", 100 * a.bubble(),
                p == null ? "n/a" : String.format(Locale.ROOT, "%.1f%%", 100 * p.bubbleFraction()));
    }
}

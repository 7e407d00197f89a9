package dev.ttpipe.actors.train;

import com.sun.jna.Library;
import com.sun.jna.Native;
import com.sun.jna.Platform;
import com.sun.management.HotSpotDiagnosticMXBean;
import com.sun.management.VMOption;
import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.runtime.JobPlan;

import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * A sim run of many ranks x microbatches in one JVM restarts that JVM under ZGC before it starts anything, in place
 * ({@code execv}: the same process, so a scheduler's signals still reach it), when nobody chose the collector.
 *
 * <p>Why: every rank's stash and actions are Java objects; at 256 x 1024 a young collection of G1 (the JVM's default)
 * copies about 100 MB and stops every rank for 100-200 ms, and a pause that lands where a queue has no lead on the
 * modeled clock lengthens the pass against the simulator (12-34% in 5 of 43 runs measured). ZGC collects beside the
 * program with pauses under a millisecond. A collector named on the command line or in {@code JAVA_TOOL_OPTIONS} is
 * kept ({@code TTPIPE_JAVA_OPTS=-XX:+UseG1GC} keeps G1, and {@link TrainingJob#collectorNote} says what it costs).
 */
public final class CollectorRestart {
    /**
     * Ranks x microbatches from which a sim run restarts under ZGC: {@value #DEFAULT_ABOVE} (sim-pp256's 262144 does,
     * sim-pp128's 65536, which held the simulator's time in every run measured, does not). {@code -Dttpipe.sim.zgc-above=N}
     * moves it; 0 turns the restart off.
     */
    public static final long DEFAULT_ABOVE = 100_000;

    /** The property that moves {@link #DEFAULT_ABOVE}. */
    static final String ABOVE_PROPERTY = "ttpipe.sim.zgc-above";

    private CollectorRestart() {
    }

    /** The threshold this JVM uses: {@link #DEFAULT_ABOVE}, or the property's (a bad value is one line, exit 2). */
    static long above() {
        String v = System.getProperty(ABOVE_PROPERTY);
        if (v == null) return DEFAULT_ABOVE;
        try {
            long n = Long.parseLong(v.trim());
            if (n >= 0) return n;
        } catch (NumberFormatException e) {
            // the message below
        }
        throw new UserInputException("-D" + ABOVE_PROPERTY + ": " + v + " given, expected a count of"
                + " ranks x microbatches (0: never restart under ZGC)");
    }

    /**
     * Why this JVM restarts under ZGC for a sim run of {@code ranks x microbatches}, or null where it does not: a run
     * below {@code above} (or {@code above} 0); a collector someone chose ({@code chosen}); one that already collects
     * beside the program ({@code current}: ZGC or Shenandoah); a JVM without ZGC ({@code zgc} false).
     */
    static String reason(int ranks, int microbatches, long above, String current, boolean chosen, boolean zgc) {
        if (above <= 0 || (long) ranks * microbatches < above || chosen || !zgc) return null;
        if (current.equals("ZGC") || current.equals("Shenandoah")) return null;
        return String.format(Locale.ROOT, "ttpipe: %d ranks x %d microbatches of the sim backend: restarting this JVM under ZGC"
                        + " (%s's pauses at this size lengthen passes against the simulator; TTPIPE_JAVA_OPTS=-XX:+Use%sGC keeps %s)",
                ranks, microbatches, current, current, current);
    }

    /**
     * Restarts this process under ZGC when {@link #reason} says so: {@code mainClass} with {@code args} (the command line
     * after the jar), on this JVM's class path and with its own flags; returns only when it does not restart (or the
     * restart failed, which it says on {@code err}).
     */
    public static void restartIfWorthIt(JobPlan plan, String mainClass, String[] args, PrintStream out, PrintStream err) {
        if (plan.backend() != Backend.SIM || args == null) return;
        HotSpotDiagnosticMXBean vm = ManagementFactory.getPlatformMXBean(HotSpotDiagnosticMXBean.class);
        if (vm == null) return;
        String current = null;
        boolean chosen = false;
        boolean zgc = false;
        for (String name : new String[]{"G1", "Z", "Shenandoah", "Parallel", "Serial", "Epsilon"}) {
            VMOption flag;
            try {
                flag = vm.getVMOption("Use" + name + "GC");
            } catch (IllegalArgumentException unknown) {
                continue;                                                // a flag this JVM does not have
            }
            if (name.equals("Z")) zgc = true;
            if (Boolean.parseBoolean(flag.getValue())) current = name.equals("Z") ? "ZGC" : name;
            VMOption.Origin o = flag.getOrigin();
            if (o != VMOption.Origin.DEFAULT && o != VMOption.Origin.ERGONOMIC) chosen = true;
        }
        zgc &= Platform.isLinux() && (Platform.isIntel() || Platform.isARM()) && Platform.is64Bit();
        String why = reason(plan.schedule().ranks(), plan.schedule().microbatches(), above(),
                current == null ? "this" : current, chosen, zgc);
        if (why == null) return;
        out.println(why);
        out.flush();
        err.flush();
        List<String> argv = new ArrayList<>();
        argv.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        argv.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments());
        argv.add("-XX:+UseZGC");
        argv.add("-cp");
        argv.add(System.getProperty("java.class.path"));
        argv.add(mainClass);
        argv.addAll(List.of(args));
        int rc = LibC.INSTANCE.execv(argv.get(0), argv.toArray(new String[0]));
        err.println("ttpipe: the restart under ZGC failed (execv returned " + rc + ", errno " + Native.getLastError()
                + "); going on under " + current);
    }

    /** The C library's {@code execv}: replaces this process's image, keeping its id, descriptors and environment. */
    private interface LibC extends Library {
        LibC INSTANCE = Native.load("c", LibC.class);

        int execv(String path, String[] argv);
    }
}

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
     * Heap ZGC needs per rank x microbatch of a sim run: 16 KiB (4 GiB for sim-pp256). Measured on sim-pp256 under ZGC:
     * the default 6 GiB and 4 GiB held the simulator's time; 3 GiB stalled allocations 150-180 times a run and came
     * 0.1% and 3.2% over; 2 GiB 23% over, where G1 with 2 GiB held it.
     */
    static final long HEAP_PER_RANK_MICROBATCH = 16 << 10;

    /** The heap ZGC needs for a sim run of {@code ranks x microbatches} ({@link #HEAP_PER_RANK_MICROBATCH} each). */
    static long heapNeeded(int ranks, int microbatches) {
        return (long) ranks * microbatches * HEAP_PER_RANK_MICROBATCH;
    }

    /** The flag that gives ZGC {@link #heapNeeded}: {@code -Xmx4096m} for 256 x 1024. */
    static String heapFlag(int ranks, int microbatches) {
        return "-Xmx" + ((heapNeeded(ranks, microbatches) + (1 << 20) - 1) >> 20) + "m";
    }

    /** What the restart does: the line it prints and the flags it adds to this JVM's. */
    record Restart(String line, List<String> flags) {
    }

    /**
     * Whether this JVM restarts under ZGC for a sim run of {@code ranks x microbatches}, or null where it does not: a run
     * below {@code above} (or {@code above} 0); a collector someone chose ({@code chosen}); one that already collects
     * beside the program ({@code current}: ZGC or Shenandoah); a JVM without ZGC ({@code zgc} false); a heap under
     * {@link #heapNeeded} ({@code heap} bytes) that someone chose ({@code heapChosen}), or that could only grow past half
     * of the machine's {@code ram}. A default heap too small that can grow is given {@code -Xmx} of the need.
     */
    static Restart decide(int ranks, int microbatches, long above, String current, boolean chosen, boolean zgc, long heap,
                          boolean heapChosen, long ram) {
        if (above <= 0 || (long) ranks * microbatches < above || chosen || !zgc) return null;
        if (current.equals("ZGC") || current.equals("Shenandoah")) return null;
        long need = heapNeeded(ranks, microbatches);
        List<String> flags = new ArrayList<>(List.of("-XX:+UseZGC"));
        String heapNote = "";
        if (heap < need) {
            if (heapChosen || need > ram / 2) return null;
            flags.add(heapFlag(ranks, microbatches));
            heapNote = " with " + heapFlag(ranks, microbatches);
        }
        String line = String.format(Locale.ROOT, "ttpipe: %d ranks x %d microbatches of the sim backend: restarting this JVM"
                        + " under ZGC%s, since %s's pauses at this size lengthen passes against the simulator%s"
                        + " (TTPIPE_JAVA_OPTS=-XX:+Use%sGC keeps %s)",
                ranks, microbatches, heapNote, current, heapNote.isEmpty() ? "" : " and ZGC stalls in a smaller heap",
                current, current);
        return new Restart(line, flags);
    }

    /**
     * Restarts this process under ZGC when {@link #decide} says so: {@code mainClass} with {@code args} (the command line
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
            chosen |= set(flag);
        }
        zgc &= Platform.isLinux() && (Platform.isIntel() || Platform.isARM()) && Platform.is64Bit();
        if (current == null) return;                                     // a collector this knows no flag of: left alone
        VMOption heap = vm.getVMOption("MaxHeapSize");
        long ram = ManagementFactory.getPlatformMXBean(com.sun.management.OperatingSystemMXBean.class).getTotalMemorySize();
        Restart restart = decide(plan.schedule().ranks(), plan.schedule().microbatches(), above(),
                current, chosen, zgc, Long.parseLong(heap.getValue()), set(heap), ram);
        if (restart == null) return;
        out.println(restart.line());
        out.flush();
        err.flush();
        List<String> argv = new ArrayList<>();
        argv.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        argv.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments());
        argv.addAll(restart.flags());
        argv.add("-cp");
        argv.add(System.getProperty("java.class.path"));
        argv.add(mainClass);
        argv.addAll(List.of(args));
        int rc = LibC.INSTANCE.execv(argv.get(0), argv.toArray(new String[0]));
        err.println("ttpipe: the restart under ZGC failed (execv returned " + rc + ", errno " + Native.getLastError()
                + "); going on under " + current);
    }

    /** Whether someone set {@code flag} (the command line, JAVA_TOOL_OPTIONS, a flags file), not the JVM's defaults. */
    private static boolean set(VMOption flag) {
        return flag.getOrigin() != VMOption.Origin.DEFAULT && flag.getOrigin() != VMOption.Origin.ERGONOMIC;
    }

    /** The C library's {@code execv}: replaces this process's image, keeping its id, descriptors and environment. */
    private interface LibC extends Library {
        LibC INSTANCE = Native.load("c", LibC.class);

        int execv(String path, String[] argv);
    }
}

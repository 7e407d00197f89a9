package dev.ttpipe.device.cpu;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * The fp32 peak of the machine this runs on, computed rather than looked up:
 * {@code cores x clock x FLOPs per cycle}. Cores are physical cores (distinct (physical id, core
 * id) pairs in /proc/cpuinfo, at most the processors this JVM may use). The clock is measured
 * with a dependent chain of two one-cycle integer ops per iteration (a VM's /proc/cpuinfo
 * shows the TSC rate, not the core clock), the best of several ~50 ms runs. FLOPs per cycle
 * come from the ISA flags: avx512f 64 (2 FMA units x 16 lanes x 2), avx2+fma 32, avx 16, else 8.
 *
 * @param cores          physical cores counted
 * @param ghz            the measured core clock
 * @param flopsPerCycle  fp32 FLOPs per cycle per core
 * @param isa            the flags that gave flopsPerCycle
 */
public record MachinePeak(int cores, double ghz, int flopsPerCycle, String isa) {
    private static volatile long sink;

    public double gflops() {
        return cores * ghz * flopsPerCycle;
    }

    /** How the peak was computed, e.g. {@code 2 cores x 3.20 GHz x 32 FLOP/cycle (avx2+fma)}. */
    public String how() {
        return String.format(Locale.ROOT, "%d core%s x %.2f GHz x %d FLOP/cycle (%s)", cores, cores == 1 ? "" : "s", ghz,
                flopsPerCycle, isa);
    }

    /** The peak available to {@code threads} threads (0: all cores) on this machine. */
    public static MachinePeak measure(int threads) {
        List<String> cpuinfo = readCpuinfo();
        int cores = Math.min(physicalCores(cpuinfo), Runtime.getRuntime().availableProcessors());
        if (threads > 0) cores = Math.min(cores, threads);
        String flags = flags(cpuinfo);
        return new MachinePeak(cores, measureGhz(), flopsPerCycle(flags), isaName(flags));
    }

    static int flopsPerCycle(String flags) {
        Set<String> f = Set.of(flags.split("\\s+"));
        if (f.contains("avx512f")) return 64;
        if (f.contains("avx2") && f.contains("fma")) return 32;
        if (f.contains("avx")) return 16;
        return 8;
    }

    static String isaName(String flags) {
        Set<String> f = Set.of(flags.split("\\s+"));
        if (f.contains("avx512f")) return "avx512f";
        if (f.contains("avx2") && f.contains("fma")) return "avx2+fma";
        if (f.contains("avx")) return "avx";
        return flags.isBlank() ? "unknown ISA, assumed sse" : "sse";
    }

    /** Distinct (physical id, core id) pairs; the processor count where /proc/cpuinfo says nothing. */
    static int physicalCores(List<String> cpuinfo) {
        Set<String> pairs = new HashSet<>();
        String physical = "0";
        for (String line : cpuinfo) {
            String key = line.contains(":") ? line.substring(0, line.indexOf(':')).trim() : "";
            String value = line.contains(":") ? line.substring(line.indexOf(':') + 1).trim() : "";
            if (key.equals("physical id")) physical = value;
            if (key.equals("core id")) pairs.add(physical + "/" + value);
        }
        return pairs.isEmpty() ? Runtime.getRuntime().availableProcessors() : pairs.size();
    }

    static String flags(List<String> cpuinfo) {
        for (String line : cpuinfo) {
            if (line.startsWith("flags") && line.contains(":")) return line.substring(line.indexOf(':') + 1).trim();
        }
        return "";
    }

    private static List<String> readCpuinfo() {
        try {
            return Files.readAllLines(Path.of("/proc/cpuinfo"));
        } catch (IOException | RuntimeException e) {
            return List.of();
        }
    }

    /** The core clock: iterations of a 2-cycle dependent chain per nanosecond, times 2; best of 7 runs. */
    static double measureGhz() {
        int n = 1 << 20;
        long x = 12345;
        for (int i = 0; i < 20; i++) x = chain(x, n); // JIT warmup
        n = 80_000_000;
        double best = 0;
        for (int run = 0; run < 7; run++) {
            long t0 = System.nanoTime();
            x = chain(x, n);
            long dt = System.nanoTime() - t0;
            best = Math.max(best, 2.0 * n / dt);
        }
        sink = x;
        return best;
    }

    /** Shift and xor depend on each other: 2 cycles per iteration on any out-of-order core. */
    private static long chain(long x, int n) {
        for (int i = 0; i < n; i++) x = (x << 1) ^ (x >>> 3);
        return x;
    }
}

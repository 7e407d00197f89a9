package dev.ttpipe.device.cpu;

import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The x86-64 micro-architecture levels (x86-64, x86-64-v2, -v3, -v4, as GCC's {@code -march} names them) and
 * whether this CPU runs each, from the flags of /proc/cpuinfo. A level the flags do not show is taken as not
 * run (where /proc/cpuinfo cannot be read, only the baseline is).
 */
final class X86Level {
    /** Every level, lowest first. */
    static final List<String> LEVELS = List.of("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4");

    /** The /proc/cpuinfo flags each level adds to the one below it (lzcnt shows as abm, sse3 as pni). */
    private static final Map<String, Set<String>> ADDS = Map.of(
            "x86-64", Set.of(),
            "x86-64-v2", Set.of("cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"),
            "x86-64-v3", Set.of("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"),
            "x86-64-v4", Set.of("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"));

    private static Set<String> flags;

    private X86Level() {
    }

    /** True when {@code level} is one of {@link #LEVELS} and this CPU has every flag of it and of the levels below. */
    static boolean supported(String level) {
        int top = LEVELS.indexOf(level);
        if (top < 0) return false;
        Set<String> have = flags();
        for (int i = 1; i <= top; i++) {
            if (!have.containsAll(ADDS.get(LEVELS.get(i)))) return false;
        }
        return true;
    }

    /** The highest level this CPU runs. */
    static String highest() {
        String best = LEVELS.get(0);
        for (String l : LEVELS) if (supported(l)) best = l;
        return best;
    }

    private static synchronized Set<String> flags() {
        if (flags == null) {
            String f = System.getProperty("os.arch", "").matches("amd64|x86_64")
                    ? MachinePeak.flags(MachinePeak.readCpuinfo()) : "";
            flags = f.isEmpty() ? Set.of() : Set.of(f.split("\\s+"));
        }
        return flags;
    }
}

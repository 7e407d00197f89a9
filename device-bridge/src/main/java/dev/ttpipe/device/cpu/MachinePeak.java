package dev.ttpipe.device.cpu;

import com.sun.management.HotSpotDiagnosticMXBean;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.DoubleSupplier;
import java.util.function.IntFunction;

/**
 * The fp32 peak of the machine this runs on, measured, never looked up: one thread per physical
 * core runs independent chains of fused multiply-adds at the JIT's full vector width, all threads at
 * once, and the best of ten ~50 ms runs counts. (A table of FLOPs per cycle by ISA flag is wrong
 * where the flag says nothing of the units: AMD Zen 4 has avx512f but runs each 512-bit FMA on two
 * 256-bit halves, 32 FLOP/cycle, not 64.)
 *
 * <p>The kernel ({@link #fmaChains}) is plain Java that C2's superword pass compiles to full-width
 * {@code vfmadd231ps} (zmm on AVX-512, ymm on AVX2): each vector of a thread's {@value #CHAIN_FLOATS}
 * floats is loaded, goes through {@value #CHAIN_DEPTH} dependent FMAs and is stored, and the out-of-order
 * core overlaps the independent vectors. The accumulator is the FMA's addend ({@code x = fma(a, b, x)}),
 * so no register copy competes with the FMAs for their ports. The loads, stores and the scalar pre- and
 * post-loop C2 adds cost some 5-10%: on an Ice Lake Xeon this measured 90-95% of what ten register-held
 * Vector API chains do. The Vector API itself would need {@code --add-modules jdk.incubator.vector} at
 * compile and run time, which this build does not pass.
 *
 * <p>Cores are physical cores (distinct (physical id, core id) pairs in /proc/cpuinfo, at most the
 * processors this JVM may use). The clock is measured too, with a dependent chain of two one-cycle
 * integer ops (a VM's /proc/cpuinfo shows the TSC rate, not the core clock): an informative figure,
 * which gives the measured FLOPs per cycle per core.
 *
 * <p>{@link #measure} costs about a second and is cached per core count for the life of the JVM;
 * it is thread-safe (measurements never run concurrently).
 *
 * @param cores          threads measured at once, one per physical core
 * @param ghz            the measured core clock (scalar code; wide vectors may run slower)
 * @param measuredGflops fp32 GFLOP/s of all {@code cores} threads together, FMA counted as 2
 * @param lanes          fp32 lanes of the widest vector C2 uses ({@code MaxVectorSize / 4}; 0 if unknown)
 * @param isa            the vector flags of /proc/cpuinfo, e.g. {@code avx2+fma}
 */
public record MachinePeak(int cores, double ghz, double measuredGflops, int lanes, String isa) {
    /** Floats per thread: 32 KiB, in L1 or close to it, long enough that the scalar loop ends weigh little. */
    static final int CHAIN_FLOATS = 8192;
    /** Dependent FMAs per element and pass. */
    static final int CHAIN_DEPTH = 8;
    private static final int RUNS = 10;
    private static final double RUN_SECONDS = 0.05;
    /** FMA operands, volatile so that C2 cannot fold them: a b = 1/8 exactly, so a chain's value is exact and never overflows. */
    private static volatile float fmaA = 0.5f;
    private static volatile float fmaB = 0.25f;

    private static final Map<Integer, MachinePeak> MEASURED = new HashMap<>();
    private static final Map<Integer, Double> BF16_MEASURED = new HashMap<>();
    private static double clockGhz;
    private static volatile float sink;
    private static volatile long longSink;

    /** The measured peak, GFLOP/s. */
    public double gflops() {
        return measuredGflops;
    }

    /**
     * The bf16 peak, GFLOP/s. With {@code avx512_bf16} it is measured as the fp32 one is, with chains of {@code vdpbf16ps}
     * (two bf16 products per fp32 lane) in the native kernels' library, once per core count for the life of the JVM;
     * where that library is not loaded, twice the measured fp32 FMA peak (derived). Without {@code avx512_bf16} bf16
     * runs on the fp32 FMA units: the fp32 peak. {@link #bf16How} says which.
     */
    public double bf16Gflops() {
        if (!hasBf16Dot()) return measuredGflops;
        double measured = bf16Measured(cores);
        return Double.isNaN(measured) ? 2 * measuredGflops : measured;
    }

    /** How {@link #bf16Gflops} was obtained, e.g. {@code measured: 2 threads of 16-lane vdpbf16ps chains, 2.0 x the fp32 peak}. */
    public String bf16How() {
        if (!hasBf16Dot()) return "no avx512_bf16: bf16 runs on the fp32 FMA units, so the fp32 peak";
        double measured = bf16Measured(cores);
        if (Double.isNaN(measured)) {
            return "2 x the fp32 FMA peak: avx512_bf16's vdpbf16ps does two products per fp32 lane; derived, not measured,"
                    + " as the native kernels are not loaded (" + CpuNative.describe() + ")";
        }
        return String.format(Locale.ROOT, "measured: %d thread%s of 16-lane vdpbf16ps chains (avx512_bf16), %.2f x the fp32"
                + " FMA peak", cores, cores == 1 ? "" : "s", measured / measuredGflops);
    }

    private static synchronized double bf16Measured(int cores) {
        return BF16_MEASURED.computeIfAbsent(cores, MachinePeak::measureBf16Gflops);
    }

    /** Measured fp32 FLOPs per cycle of one core at the measured clock. */
    public double flopsPerCyclePerCore() {
        return measuredGflops / (cores * ghz);
    }

    /** {@link #flopsPerCyclePerCore} rounded, for output that prints it as an integer. */
    public int flopsPerCycle() {
        return (int) Math.round(flopsPerCyclePerCore());
    }

    /**
     * How the peak was obtained, e.g. {@code 2 cores x 3.02 GHz x 30.7 FLOP/cycle, measured: 2 threads of
     * 8-lane fp32 FMA chains (avx2+fma)}.
     */
    public String how() {
        String width = lanes > 0 ? lanes + "-lane" : "JIT-vectorised";
        return String.format(Locale.ROOT, "%d core%s x %.2f GHz x %.1f FLOP/cycle, measured: %d thread%s of %s fp32 "
                        + "FMA chains (%s)", cores, cores == 1 ? "" : "s", ghz, flopsPerCyclePerCore(), cores,
                cores == 1 ? "" : "s", width, isa);
    }

    /** The peak available to {@code threads} threads (0: all cores) on this machine; cached per core count. */
    public static synchronized MachinePeak measure(int threads) {
        List<String> cpuinfo = readCpuinfo();
        int cores = Math.min(physicalCores(cpuinfo), Runtime.getRuntime().availableProcessors());
        if (threads > 0) cores = Math.min(cores, threads);
        MachinePeak known = MEASURED.get(cores);
        if (known != null) return known;
        if (clockGhz == 0) clockGhz = measureGhz();
        MachinePeak peak = new MachinePeak(cores, clockGhz, measureGflops(cores), vectorLanes(), isaName(flags(cpuinfo)));
        MEASURED.put(cores, peak);
        return peak;
    }

    /**
     * Runs {@code reps} passes over {@code chains}: each element goes through {@value #CHAIN_DEPTH}
     * dependent {@code x = fma(a, b, x)} per pass, {@code 2 * CHAIN_DEPTH * chains.length * reps} FLOPs in
     * all. Elements are independent, so C2 vectorises the inner loop and the core overlaps the vectors.
     */
    static void fmaChains(float[] chains, float a, float b, int reps) {
        for (int r = 0; r < reps; r++) {
            for (int i = 0; i < chains.length; i++) {
                float x = chains[i];
                x = Math.fma(a, b, x);
                x = Math.fma(a, b, x);
                x = Math.fma(a, b, x);
                x = Math.fma(a, b, x);
                x = Math.fma(a, b, x);
                x = Math.fma(a, b, x);
                x = Math.fma(a, b, x);
                x = Math.fma(a, b, x);
                chains[i] = x;
            }
        }
    }

    /** GFLOP/s of {@code threads} threads running {@link #fmaChains} at once: the best of {@value #RUNS} runs. */
    static double measureGflops(int threads) {
        float[] chains = new float[CHAIN_FLOATS];
        Arrays.fill(chains, 1f);
        float[] small = new float[256];
        for (int i = 0; i < 20_000; i++) fmaChains(small, fmaA, fmaB, 1); // C1, then C2 compiles it
        double perRep = Double.MAX_VALUE;
        for (int i = 0; i < 5; i++) {
            long t0 = System.nanoTime();
            fmaChains(chains, fmaA, fmaB, 200);
            perRep = Math.min(perRep, (System.nanoTime() - t0) / 1e9 / 200);
        }
        int reps = (int) Math.max(1, Math.min(Integer.MAX_VALUE, RUN_SECONDS / perRep));
        sink = chains[0] + small[0];
        return bestOfRuns(threads, id -> {
            float[] own = new float[CHAIN_FLOATS];
            Arrays.fill(own, 1f);
            fmaChains(own, fmaA, fmaB, 1);
            return () -> {
                fmaChains(own, fmaA, fmaB, reps);
                sink = own[0] + own[CHAIN_FLOATS - 1];
                return 2.0 * CHAIN_DEPTH * CHAIN_FLOATS * (double) reps;
            };
        });
    }

    /**
     * GFLOP/s of {@code threads} threads running {@code vdpbf16ps} chains at once (native, {@code
     * ttpipe_cpu_bf16_dot_chains}): the best of {@value #RUNS} runs; NaN where the native kernels are not loaded or
     * the CPU has no avx512_bf16.
     */
    static double measureBf16Gflops(int threads) {
        if (!CpuNative.active() || CpuNative.ttpipe_cpu_bf16_dot_chains(1) == 0) return Double.NaN;
        double perIteration = Double.MAX_VALUE;
        for (int i = 0; i < 5; i++) {
            long t0 = System.nanoTime();
            CpuNative.ttpipe_cpu_bf16_dot_chains(10_000);
            perIteration = Math.min(perIteration, (System.nanoTime() - t0) / 1e9 / 10_000);
        }
        long iterations = (long) Math.max(1, RUN_SECONDS / perIteration);
        return bestOfRuns(threads, id -> () -> CpuNative.ttpipe_cpu_bf16_dot_chains(iterations));
    }

    /**
     * Runs one kernel per thread, all {@code threads} at once, {@value #RUNS} times; returns the best run's FLOPs of all
     * threads over the span from the first thread's start to the last one's end, in GFLOP/s. {@code kernelOf} builds a
     * thread's kernel on that thread (its own memory); the kernel runs once per run and returns the FLOPs it did.
     */
    private static double bestOfRuns(int threads, IntFunction<DoubleSupplier> kernelOf) {
        long[][] start = new long[RUNS][threads];
        long[][] end = new long[RUNS][threads];
        double[][] flops = new double[RUNS][threads];
        CyclicBarrier together = new CyclicBarrier(threads);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Thread[] workers = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            int id = t;
            workers[t] = new Thread(() -> {
                DoubleSupplier kernel = kernelOf.apply(id);
                try {
                    for (int run = 0; run < RUNS; run++) {
                        together.await();
                        start[run][id] = System.nanoTime();
                        flops[run][id] = kernel.getAsDouble();
                        end[run][id] = System.nanoTime();
                    }
                } catch (InterruptedException | BrokenBarrierException | RuntimeException e) {
                    failure.compareAndSet(null, e);
                    together.reset();
                }
            }, "machine-peak-" + t);
            workers[t].setDaemon(true);
            workers[t].start();
        }
        try {
            for (Thread w : workers) w.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while measuring the machine peak", e);
        }
        if (failure.get() != null) throw new IllegalStateException("measuring the machine peak failed", failure.get());
        double best = 0;
        for (int run = 0; run < RUNS; run++) {
            long first = Arrays.stream(start[run]).min().orElseThrow();
            long last = Arrays.stream(end[run]).max().orElseThrow();
            best = Math.max(best, Arrays.stream(flops[run]).sum() / Math.max(1, last - first));
        }
        return best;
    }

    /** fp32 lanes of C2's widest vector ({@code MaxVectorSize} bytes / 4); 0 where the JVM does not say. */
    static int vectorLanes() {
        try {
            HotSpotDiagnosticMXBean hotspot = ManagementFactory.getPlatformMXBean(HotSpotDiagnosticMXBean.class);
            return Integer.parseInt(hotspot.getVMOption("MaxVectorSize").getValue()) / Float.BYTES;
        } catch (RuntimeException | LinkageError e) {
            return 0;
        }
    }

    static String isaName(String flags) {
        Set<String> f = Set.of(flags.split("\\s+"));
        if (f.contains("avx512f")) return "avx512f";
        if (f.contains("avx2") && f.contains("fma")) return "avx2+fma";
        if (f.contains("avx")) return "avx";
        return flags.isBlank() ? "ISA unknown" : "sse";
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

    /** Whether this CPU has bf16 dot-product instructions ({@code avx512_bf16}: {@code vdpbf16ps}); read once. */
    public static synchronized boolean hasBf16Dot() {
        if (bf16Dot == null) bf16Dot = Set.of(flags(readCpuinfo()).split("\\s+")).contains("avx512_bf16");
        return bf16Dot;
    }

    private static Boolean bf16Dot;

    static String flags(List<String> cpuinfo) {
        for (String line : cpuinfo) {
            if (line.startsWith("flags") && line.contains(":")) return line.substring(line.indexOf(':') + 1).trim();
        }
        return "";
    }

    static List<String> readCpuinfo() {
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
        n = 50_000_000;
        double best = 0;
        for (int run = 0; run < 7; run++) {
            long t0 = System.nanoTime();
            x = chain(x, n);
            long dt = System.nanoTime() - t0;
            best = Math.max(best, 2.0 * n / dt);
        }
        longSink = x;
        return best;
    }

    /** Shift and xor depend on each other: 2 cycles per iteration on any out-of-order core. */
    private static long chain(long x, int n) {
        for (int i = 0; i < n; i++) x = (x << 1) ^ (x >>> 3);
        return x;
    }

    /** {@code java -cp ... dev.ttpipe.device.cpu.MachinePeak [threads]}: prints the measured peak. */
    public static void main(String[] args) {
        int threads = args.length > 0 ? Integer.parseInt(args[0]) : 0;
        long t0 = System.nanoTime();
        MachinePeak p = measure(threads);
        System.out.printf(Locale.ROOT, "peak %.1f GFLOP/s = %s; measured in %.2f s%n", p.gflops(), p.how(),
                (System.nanoTime() - t0) / 1e9);
    }
}

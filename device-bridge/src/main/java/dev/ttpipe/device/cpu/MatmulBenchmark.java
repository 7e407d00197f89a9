package dev.ttpipe.device.cpu;

import java.util.Arrays;
import java.util.Locale;
import java.util.Random;
import java.util.function.DoubleSupplier;

/**
 * Measures fp32 matmul throughput of the cpu backend's kernel ({@code C = A B}, all n x n,
 * native buffers as the backend uses them) against the machine's measured fp32 FMA peak for as
 * many threads ({@link MachinePeak}). Runs warmups, then timed repetitions (about a second in all, at least 5),
 * and reports the median. A program that prints figures, not a test: see {@code ttpipe bench matmul}.
 */
public final class MatmulBenchmark {
    private MatmulBenchmark() {
    }

    /**
     * One measurement.
     *
     * @param size          n of the n x n x n product
     * @param threads       threads the kernel used
     * @param kernel        {@code blas} or {@code java}
     * @param kernelDetail  the kernel's description (library, version, threading)
     * @param gflops        2 n^3 / median seconds / 1e9
     * @param medianSeconds median time of one product
     * @param bestSeconds   fastest product (far from the median on a machine shared with other work)
     * @param repetitions   timed repetitions
     * @param peak          the machine's peak for that many threads, and how it was computed
     */
    public record Result(int size, int threads, String kernel, String kernelDetail, double gflops, double medianSeconds,
                         double bestSeconds, int repetitions, MachinePeak peak) {
        /** GFLOP/s of the fastest repetition. */
        public double bestGflops() {
            return 2.0 * size * size * (double) size / bestSeconds / 1e9;
        }

        public double peakGflops() {
            return peak.gflops();
        }

        public double fractionOfPeak() {
            return gflops / peak.gflops();
        }

        public String peakHow() {
            return peak.how();
        }
    }

    /**
     * Measures an n x n x n product.
     *
     * @param threads 0: all available processors
     * @param kernel  auto, blas or java
     */
    public static Result run(int size, int threads, String kernel) {
        if (size < 1) throw new IllegalArgumentException("size " + size + " must be >= 1");
        int t = threads <= 0 ? Runtime.getRuntime().availableProcessors() : threads;
        MachinePeak peak = MachinePeak.measure(t);
        try (Parallel par = new Parallel(t)) {
            Gemm gemm = GemmChoice.choose(kernel, t, par);
            int bytes = Math.multiplyExact(Math.multiplyExact(size, size), 4);
            NativeBuffer a = NativeBuffer.malloc(bytes);
            NativeBuffer b = NativeBuffer.malloc(bytes);
            NativeBuffer c = NativeBuffer.malloc(bytes);
            try {
                Random rnd = new Random(1);
                for (int i = 0; i < size * size; i++) {
                    a.floats.put(i, rnd.nextFloat() - 0.5f);
                    b.floats.put(i, rnd.nextFloat() - 0.5f);
                }
                double[] s = timeRuns(() -> time(gemm, a, b, c, size));
                double median = median(s);
                double gflops = 2.0 * size * size * (double) size / median / 1e9;
                return new Result(size, t, gemm.kind(), gemm.describe(), gflops, median, s[0], s.length, peak);
            } finally {
                a.free();
                b.free();
                c.free();
            }
        }
    }

    /** Warmups, then about a second of timed runs (at least 5); the seconds of each, sorted. */
    static double[] timeRuns(DoubleSupplier once) {
        double first = once.getAsDouble();
        int warmups = (int) Math.max(2, Math.min(50, 0.3 / first));
        double w = first;
        for (int i = 0; i < warmups; i++) w = Math.min(w, once.getAsDouble());
        int reps = (int) Math.max(5, Math.min(1000, 1.0 / w));
        double[] s = new double[reps];
        for (int i = 0; i < reps; i++) s[i] = once.getAsDouble();
        Arrays.sort(s);
        return s;
    }

    static double median(double[] sorted) {
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }

    private static double time(Gemm gemm, NativeBuffer a, NativeBuffer b, NativeBuffer c, int n) {
        long t0 = System.nanoTime();
        gemm.sgemm(false, false, n, n, n, 1f, a, 0, n, b, 0, n, 0f, c, 0, n);
        return (System.nanoTime() - t0) / 1e9;
    }

    /** {@code java -cp ... dev.ttpipe.device.cpu.MatmulBenchmark [size [threads [auto|blas|java]]]}. */
    public static void main(String[] args) {
        int size = args.length > 0 ? Integer.parseInt(args[0]) : 1024;
        int threads = args.length > 1 ? Integer.parseInt(args[1]) : 0;
        String kernel = args.length > 2 ? args[2] : "auto";
        Result r = run(size, threads, kernel);
        System.out.printf(Locale.ROOT, "matmul %d^3 fp32, %s kernel, %d threads: %.1f GFLOP/s (median of %d, %.3f ms; "
                        + "best %.1f); peak %.1f GFLOP/s = %s; %.1f%% of peak%n", r.size(), r.kernel(), r.threads(),
                r.gflops(), r.repetitions(), r.medianSeconds() * 1e3, r.bestGflops(), r.peakGflops(), r.peakHow(),
                100 * r.fractionOfPeak());
    }
}

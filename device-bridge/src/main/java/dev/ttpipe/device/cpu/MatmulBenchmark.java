package dev.ttpipe.device.cpu;

import java.util.Arrays;
import java.util.Locale;
import java.util.Random;
import java.util.function.DoubleSupplier;

/**
 * Measures fp32 matmul throughput of the cpu backend's kernel ({@code C = A B}, A m x k and B k x n,
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
     * @param m             rows of A and C
     * @param k             columns of A, rows of B
     * @param n             columns of B and C
     * @param threads       threads the kernel used
     * @param kernel        {@code blas} or {@code java}
     * @param kernelDetail  the kernel's description (library, version, threading)
     * @param gflops        2 m k n / median seconds / 1e9
     * @param medianSeconds median time of one product
     * @param bestSeconds   fastest product (far from the median on a machine shared with other work)
     * @param repetitions   timed repetitions
     * @param peak          the machine's peak for that many threads, and how it was computed
     */
    public record Result(int m, int k, int n, int threads, String kernel, String kernelDetail, double gflops,
                         double medianSeconds, double bestSeconds, int repetitions, MachinePeak peak) {
        /** GFLOP/s of the fastest repetition. */
        public double bestGflops() {
            return flops(m, k, n) / bestSeconds / 1e9;
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

    /** 2 m k n: the multiply-adds of an m x k by k x n product, counted as two operations each. */
    static double flops(int m, int k, int n) {
        return 2.0 * m * k * (double) n;
    }

    /** An n x n x n product: {@link #run(int, int, int, int, String)}. */
    public static Result run(int size, int threads, String kernel) {
        return run(size, size, size, threads, kernel);
    }

    /**
     * Measures an m x k by k x n product.
     *
     * @param threads 0: all available processors
     * @param kernel  auto, blas, dnnl or java
     */
    public static Result run(int m, int k, int n, int threads, String kernel) {
        checkShape(m, k, n);
        int t = threads <= 0 ? Runtime.getRuntime().availableProcessors() : threads;
        MachinePeak peak = MachinePeak.measure(t);
        try (Parallel par = new Parallel(t)) {
            Gemm gemm = GemmChoice.choose(kernel, t, par);
            NativeBuffer[] abc = operands(m, k, n);
            NativeBuffer a = abc[0], b = abc[1], c = abc[2];
            try {
                double[] s = timeRuns(() -> {
                    long t0 = System.nanoTime();
                    gemm.sgemm(false, false, m, n, k, 1f, a, 0, k, b, 0, n, 0f, c, 0, n);
                    return (System.nanoTime() - t0) / 1e9;
                });
                double median = median(s);
                return new Result(m, k, n, t, gemm.kind(), gemm.describe(), flops(m, k, n) / median / 1e9, median, s[0],
                        s.length, peak);
            } finally {
                for (NativeBuffer x : abc) x.free();
            }
        }
    }

    /**
     * Times one product shape on OpenBLAS and on oneDNN's sgemm, both tiled over {@code threads} threads as a cpu mesh
     * runs them, alternating the two (one product each, in turn) for about {@code seconds} after a warm-up, and
     * picks OpenBLAS only where its median is at least {@value #BLAS_MARGIN_PERCENT}% faster: a tie keeps oneDNN,
     * the default ({@link GemmChoice}). Without oneDNN the row says blas, with a dnnl figure of 0.
     */
    public static MatmulTable.Row compare(MatmulShapes.Shape shape, int threads, double seconds) {
        int t = threads <= 0 ? Runtime.getRuntime().availableProcessors() : threads;
        int m = shape.m(), k = shape.k(), n = shape.n();
        try (Parallel par = new Parallel(t)) {
            Gemm blas = GemmChoice.choose("blas", t, par);
            Gemm dnnl = DnnlGemm.tryLoad(par);
            NativeBuffer[] abc = operands(m, k, n);
            NativeBuffer a = abc[0], b = abc[1], c = abc[2];
            try {
                int lda = shape.transA() ? m : k, ldb = shape.transB() ? k : n;
                Gemm[] engines = dnnl == null ? new Gemm[]{blas} : new Gemm[]{blas, dnnl};
                java.util.function.ToDoubleFunction<Gemm> once = g -> {
                    long t0 = System.nanoTime();
                    g.sgemm(shape.transA(), shape.transB(), m, n, k, 1f, a, 0, lda, b, 0, ldb, 0f, c, 0, n);
                    return (System.nanoTime() - t0) / 1e9;
                };
                double first = 0;
                for (Gemm g : engines) first = Math.max(first, Math.min(once.applyAsDouble(g), once.applyAsDouble(g)));
                int pairs = (int) Math.max(7, Math.min(2000, seconds / engines.length / Math.max(first, 1e-7)));
                double[][] s = new double[engines.length][pairs];
                for (int i = 0; i < pairs; i++) {
                    for (int e = 0; e < engines.length; e++) s[e][i] = once.applyAsDouble(engines[e]);
                }
                double blasS = medianOf(s[0]);
                double dnnlS = dnnl == null ? Double.POSITIVE_INFINITY : medianOf(s[1]);
                boolean pickDnnl = dnnl != null && blasS * (1 + BLAS_MARGIN_PERCENT / 100.0) > dnnlS;
                double f = flops(m, k, n) / 1e9;
                return new MatmulTable.Row(shape, pickDnnl ? "dnnl" : "blas", f / blasS, dnnl == null ? 0 : f / dnnlS);
            } finally {
                for (NativeBuffer x : abc) x.free();
            }
        }
    }

    /** A [m, k] and B [k, n] filled with uniform values in [-0.5, 0.5) (seed 1), and C [m, n]. */
    private static NativeBuffer[] operands(int m, int k, int n) {
        NativeBuffer a = NativeBuffer.malloc(Math.multiplyExact(Math.multiplyExact(m, k), 4));
        NativeBuffer b = NativeBuffer.malloc(Math.multiplyExact(Math.multiplyExact(k, n), 4));
        NativeBuffer c = NativeBuffer.malloc(Math.multiplyExact(Math.multiplyExact(m, n), 4));
        Random rnd = new Random(1);
        for (int i = 0; i < m * k; i++) a.floats.put(i, rnd.nextFloat() - 0.5f);
        for (int i = 0; i < k * n; i++) b.floats.put(i, rnd.nextFloat() - 0.5f);
        return new NativeBuffer[]{a, b, c};
    }

    /** How much faster OpenBLAS must be on a shape for a matmul table to send that shape to it. */
    static final int BLAS_MARGIN_PERCENT = 3;

    private static double medianOf(double[] seconds) {
        double[] sorted = seconds.clone();
        Arrays.sort(sorted);
        return median(sorted);
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

    static void checkShape(int m, int k, int n) {
        if (m < 1 || k < 1 || n < 1) throw new IllegalArgumentException("shape " + m + " x " + k + " x " + n + ": each must be >= 1");
    }

    /** {@code java -cp ... dev.ttpipe.device.cpu.MatmulBenchmark [size [threads [auto|blas|java]]]}. */
    public static void main(String[] args) {
        int size = args.length > 0 ? Integer.parseInt(args[0]) : 1024;
        int threads = args.length > 1 ? Integer.parseInt(args[1]) : 0;
        String kernel = args.length > 2 ? args[2] : "auto";
        Result r = run(size, threads, kernel);
        System.out.printf(Locale.ROOT, "matmul %d^3 fp32, %s kernel, %d threads: %.1f GFLOP/s (median of %d, %.3f ms; "
                        + "best %.1f); peak %.1f GFLOP/s = %s; %.1f%% of peak%n", r.m(), r.kernel(), r.threads(),
                r.gflops(), r.repetitions(), r.medianSeconds() * 1e3, r.bestGflops(), r.peakGflops(), r.peakHow(),
                100 * r.fractionOfPeak());
    }
}

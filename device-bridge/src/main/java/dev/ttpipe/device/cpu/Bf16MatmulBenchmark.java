package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;

import java.util.Map;
import java.util.Random;

/**
 * Measures the bf16 matmul as the cpu backend runs it ({@code C = A B}, A [m, k] and B [k, n] BF16
 * tensors, C FP32, through {@link Ops#matmulInto} on a one-device mesh: operand staging included)
 * against the machine's bf16 peak. The peak: without {@code avx512_bf16} the CPU has no bf16
 * arithmetic and bf16 matmuls run on the fp32 FMA units, so the bf16 peak is the measured fp32 FMA
 * peak ({@link MachinePeak}); with it, {@code vdpbf16ps} does two bf16 products per fp32 lane where
 * an FMA does one, so the peak is twice the measured fp32 FMA peak (derived from the measured
 * figure, since the JIT cannot emit {@code vdpbf16ps} to measure it directly). A program that prints
 * figures, not a test: see {@code ttpipe bench matmul --dtype bf16}.
 */
public final class Bf16MatmulBenchmark {
    private Bf16MatmulBenchmark() {
    }

    /**
     * One measurement.
     *
     * @param kernel        the bf16 kernel ({@code sbgemm} or the fp32 kernel on bf16-rounded operands)
     * @param gflops        2 m k n / median seconds / 1e9
     * @param peakGflops    the machine's bf16 peak for that many threads
     * @param peakHow       how the peak was obtained
     * @param fp32Peak      the measured fp32 FMA peak it rests on
     */
    public record Result(int m, int k, int n, int threads, String kernel, double gflops, double medianSeconds,
                         double bestSeconds, int repetitions, double peakGflops, String peakHow, MachinePeak fp32Peak) {
        public double fractionOfPeak() {
            return gflops / peakGflops;
        }

        public double bestGflops() {
            return MatmulBenchmark.flops(m, k, n) / bestSeconds / 1e9;
        }
    }

    /** An n x n x n product: {@link #run(int, int, int, int, String)}. */
    public static Result run(int size, int threads, String kernel) {
        return run(size, size, size, threads, kernel);
    }

    /**
     * Measures an m x k by k x n bf16 product; threads 0: all processors; kernel: auto, dnnl, dot, fma, blas or java (that fp32
     * kernel on widened operands), or sgemm (the default fp32 kernel on widened operands).
     */
    public static Result run(int m, int k, int n, int threads, String kernel) {
        MatmulBenchmark.checkShape(m, k, n);
        int t = threads <= 0 ? Runtime.getRuntime().availableProcessors() : threads;
        MachinePeak peak = MachinePeak.measure(t);
        boolean bf16Dot = MachinePeak.hasBf16Dot();
        double peakGflops = peak.bf16Gflops();
        String how = peak.bf16How() + "; fp32: " + peak.how();
        // --kernel names the bf16 engine too: blas, java or sgemm (the default fp32 kernel) on widened operands, dnnl
        // oneDNN's bf16 GEMM, dot ttpipe's GEMM on the bf16 dot product, fma ttpipe's GEMM that widens bf16 operands as it
        // packs them.
        String engine = "blas".equals(kernel) || "java".equals(kernel) || "sgemm".equals(kernel) ? "sgemm"
                : "dnnl".equals(kernel) || "dot".equals(kernel) || "fma".equals(kernel) ? kernel : "auto";
        MeshOptions options = MeshOptions.defaults().withThreads(t).withEnvironment(Map.of("TTPIPE_BF16_GEMM", engine));
        try (CpuMeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), options,
                "dnnl".equals(kernel) || "dot".equals(kernel) || "sgemm".equals(kernel) || "fma".equals(kernel) ? "auto" : kernel)) {
            Bf16Gemm.Engine e = mesh.bf16Gemm().engine();
            if (bf16Dot && (e == Bf16Gemm.Engine.SGEMM || e == Bf16Gemm.Engine.FMA)) {
                how += "; the kernel that runs multiplies in fp32 (" + (e == Bf16Gemm.Engine.FMA ? "fma" : "sgemm")
                        + "), which cannot use vdpbf16ps: it reaches at most half of this";
            }
            Ops ops = mesh.asSubmesh().ops();
            Random rnd = new Random(1);
            try (Tensor a = ops.fromHost(random(rnd, m * k), Shape.of(m, k), Layout.REPLICATED, DType.BF16);
                 Tensor b = ops.fromHost(random(rnd, k * n), Shape.of(k, n), Layout.REPLICATED, DType.BF16);
                 Tensor c = ops.zeros(Shape.of(m, n), Layout.REPLICATED, DType.FP32)) {
                double[] secs = MatmulBenchmark.timeRuns(() -> {
                    long t0 = System.nanoTime();
                    ops.matmulInto(c, a, b, false, false, 1f, 0f);
                    return (System.nanoTime() - t0) / 1e9;
                });
                double median = MatmulBenchmark.median(secs);
                return new Result(m, k, n, t, mesh.bf16MatmulKernel(), MatmulBenchmark.flops(m, k, n) / median / 1e9,
                        median, secs[0], secs.length, peakGflops, how, peak);
            }
        }
    }

    private static float[] random(Random rnd, int count) {
        float[] v = new float[count];
        for (int i = 0; i < count; i++) v[i] = rnd.nextFloat() - 0.5f;
        return v;
    }
}

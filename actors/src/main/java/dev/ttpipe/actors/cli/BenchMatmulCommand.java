package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.telemetry.Terminal;
import dev.ttpipe.actors.telemetry.TextWrap;

import dev.ttpipe.device.cpu.Bf16MatmulBenchmark;
import dev.ttpipe.device.cpu.MatmulBenchmark;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.Callable;

/**
 * {@code ttpipe bench matmul}: fp32 matmul throughput of the cpu backend's kernel against this
 * machine's peak, which is measured ({@code MachinePeak}: one thread per physical core running
 * independent fused multiply-add chains), never assumed or looked up. Prints figures; never passes or fails on them.
 */
@Command(name = "matmul",
        mixinStandardHelpOptions = true,
        description = {"Measure matmul throughput (N x N x N, or the shapes given) of the cpu backend's kernel and "
                + "compare it with this machine's peak.",
                "The peak is measured, never looked up: one thread per physical core runs independent fused "
                        + "multiply-add chains at the JIT's widest vectors; the core clock is measured too.",
                "Reports the median of about a second of timed runs after warmup."},
        footer = {"", "Examples:",
                "  ttpipe bench matmul",
                "  ttpipe bench matmul --size 512 --threads 1",
                "  ttpipe bench matmul --kernel java",
                "  ttpipe bench matmul --size 2048 --json",
                "  ttpipe bench matmul --dtype bf16",
                "  ttpipe bench matmul --dtype bf16 --kernel dnnl --shape 2048x384x1152,2048x1536x384",
                "",
                "Kernels: blas is OpenBLAS (from the org.bytedeco:openblas jar) through JNA; dnnl is oneDNN's sgemm (from"
                        + " org.bytedeco:dnnl); java is the pure-JVM fallback the cpu backend uses where neither"
                        + " loads (or with TTPIPE_BLAS=java).",
                "--dtype bf16 times the backend's bf16 matmul (BF16 operands, fp32 accumulation, operand staging included):"
                        + " oneDNN's bf16 GEMM on a CPU with avx512_bf16, else ttpipe's fma GEMM (bf16 operands widened as they"
                        + " are packed), else the fp32 sgemm on bf16 operands widened to fp32;"
                        + " the line 'kernel' says which; its peak is the fp32 FMA peak without avx512_bf16, twice it with."
                        + " See docs/backends-bf16.md."})
public final class BenchMatmulCommand implements Callable<Integer> {
    static final int MAX_SIZE = 8192;
    static final Set<String> KERNELS = Set.of("auto", "blas", "dnnl", "java");

    @Option(names = "--size", paramLabel = "N", defaultValue = "1024",
            description = "Matrix size: an N x N by N x N product (default: ${DEFAULT-VALUE}).")
    int size;

    @Option(names = "--shape", paramLabel = "MxKxN", split = ",",
            description = {"An M x K by K x N product instead of --size (repeatable, or comma-separated): a model's",
                    "linears are (batch x seq) x in x out forward, x out x in for the input gradient, out x rows x in for",
                    "the weight gradient."})
    List<String> shapes = new ArrayList<>();

    @Option(names = "--threads", paramLabel = "T", defaultValue = "0",
            description = "Compute threads; 0 uses every available processor (default: ${DEFAULT-VALUE}).")
    int threads;

    @Option(names = "--kernel", paramLabel = "KERNEL", defaultValue = "auto",
            description = {"auto, blas, dnnl, java, or with bf16 dot, fma or sgemm (default: ${DEFAULT-VALUE}: for",
                    "fp32 oneDNN's sgemm, OpenBLAS where oneDNN does not load; for bf16, oneDNN's bf16 GEMM where the CPU",
                    "has avx512_bf16 (dot where oneDNN does not load), else fma). With --dtype bf16:",
                    "blas is OpenBLAS's sgemm on widened operands, dnnl oneDNN's bf16 GEMM, dot ttpipe's GEMM on the bf16",
                    "dot product (avx512_bf16), fma ttpipe's GEMM that widens bf16 operands as it packs them (what a CPU",
                    "without avx512_bf16 runs), and sgemm the default fp32 engine on widened operands."})
    String kernel;

    @Option(names = "--dtype", paramLabel = "DTYPE", defaultValue = "fp32",
            description = "fp32 or bf16 (default: ${DEFAULT-VALUE}).")
    String dtype;

    @Option(names = "--json", description = "Print one JSON object instead of the table.")
    boolean json;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() {
        if (size < 1 || size > MAX_SIZE) {
            throw new UserInputException("--size " + size + ": expected an integer from 1 to " + MAX_SIZE);
        }
        if (!shapes.isEmpty() && spec.commandLine().getParseResult().hasMatchedOption("--size")) {
            throw new UserInputException("--size and --shape: give one of them");
        }
        List<int[]> products = new ArrayList<>();
        for (String shape : shapes) products.add(shape(shape));
        if (products.isEmpty()) products.add(new int[]{size, size, size});
        if (threads < 0 || threads > 4096) {
            throw new UserInputException("--threads " + threads + ": expected 0 (all processors) or a positive count");
        }
        String k = kernel.toLowerCase(Locale.ROOT);
        String d = dtype.toLowerCase(Locale.ROOT);
        if (!d.equals("fp32") && !d.equals("bf16")) {
            throw new UserInputException("--dtype " + dtype + ": expected fp32 or bf16");
        }
        if (!KERNELS.contains(k) && !(d.equals("bf16") && (k.equals("sgemm") || k.equals("fma") || k.equals("dot")))) {
            throw new UserInputException("--kernel " + kernel + ": expected auto, blas, dnnl or java"
                    + (d.equals("bf16") ? ", or dot, fma or sgemm" : " (dot, fma and sgemm with --dtype bf16)"));
        }
        PrintWriter out = spec.commandLine().getOut();
        if (!json) {
            spec.commandLine().getErr().println("measuring the clock, then each product for about a second...");
            spec.commandLine().getErr().flush();
        }
        for (int[] p : products) {
            if (d.equals("bf16")) {
                Bf16MatmulBenchmark.Result r = Bf16MatmulBenchmark.run(p[0], p[1], p[2], threads, k);
                if (json) out.println(json(r));
                else table(out, r);
            } else {
                MatmulBenchmark.Result r = MatmulBenchmark.run(p[0], p[1], p[2], threads, k);
                if (json) out.println(json(r));
                else table(out, r);
            }
            out.flush();
        }
        return Main.EXIT_OK;
    }

    /** "MxKxN" as {m, k, n}, each from 1 to MAX_SIZE. */
    static int[] shape(String text) {
        String[] parts = text.trim().toLowerCase(Locale.ROOT).split("x", -1);
        int[] mkn = new int[3];
        boolean ok = parts.length == 3;
        for (int i = 0; ok && i < 3; i++) {
            try {
                mkn[i] = Integer.parseInt(parts[i].trim());
                ok = mkn[i] >= 1 && mkn[i] <= MAX_SIZE;
            } catch (NumberFormatException e) {
                ok = false;
            }
        }
        if (!ok) {
            throw new UserInputException("--shape " + text + ": expected MxKxN, three integers from 1 to " + MAX_SIZE
                    + " (an M x K by K x N product), such as 2048x384x1152");
        }
        return mkn;
    }

    private static void table(PrintWriter out, MatmulBenchmark.Result r) {
        out.printf(Locale.ROOT, "matmul %d x %d x %d fp32, %d thread%s%n", r.m(), r.k(), r.n(), r.threads(),
                r.threads() == 1 ? "" : "s");
        row(out, "kernel", r.kernel() + ": " + r.kernelDetail());
        row(out, "throughput", throughput(r.gflops(), r.repetitions(), r.medianSeconds(), r.bestGflops()));
        row(out, "peak", String.format(Locale.ROOT, "%.1f GFLOP/s = %s", r.peakGflops(), r.peakHow()));
        row(out, "fraction", String.format(Locale.ROOT, "%.1f%% of peak", 100 * r.fractionOfPeak()));
    }

    private static void table(PrintWriter out, Bf16MatmulBenchmark.Result r) {
        out.printf(Locale.ROOT, "matmul %d x %d x %d bf16 (fp32 accumulation), %d thread%s%n", r.m(), r.k(), r.n(),
                r.threads(), r.threads() == 1 ? "" : "s");
        row(out, "kernel", r.kernel());
        row(out, "throughput", throughput(r.gflops(), r.repetitions(), r.medianSeconds(), r.bestGflops()));
        row(out, "bf16 peak", String.format(Locale.ROOT, "%.1f GFLOP/s = %s", r.peakGflops(), r.peakHow()));
        row(out, "fraction", String.format(Locale.ROOT, "%.1f%% of the bf16 peak", 100 * r.fractionOfPeak()));
    }

    private static String throughput(double gflops, int runs, double medianSeconds, double bestGflops) {
        return String.format(Locale.ROOT, "%.1f GFLOP/s (median of %d runs, %.3f ms each; best run %.1f GFLOP/s)", gflops,
                runs, medianSeconds * 1e3, bestGflops);
    }

    /** One row of the table: the label in a column of 12, the value wrapped to the terminal's width under itself. */
    private static void row(PrintWriter out, String label, String value) {
        out.println(TextWrap.wrap(String.format(Locale.ROOT, "  %-11s %s", label, value), Terminal.columns(), 12));
    }

    static String json(Bf16MatmulBenchmark.Result r) {
        return String.format(Locale.ROOT,
                "{%s, \"threads\": %d, \"dtype\": \"bf16\", \"kernel\": %s, \"gflops\": %.3f, "
                        + "\"peak_gflops\": %.3f, \"fraction_of_peak\": %.4f, \"peak_how\": %s, "
                        + "\"fp32_peak_gflops\": %.3f, \"median_seconds\": %.6g, \"best_gflops\": %.3f, \"repetitions\": %d}",
                shapeJson(r.m(), r.k(), r.n()), r.threads(), Json.str(r.kernel()), r.gflops(), r.peakGflops(), r.fractionOfPeak(),
                Json.str(r.peakHow()), r.fp32Peak().gflops(), r.medianSeconds(), r.bestGflops(), r.repetitions());
    }

    static String json(MatmulBenchmark.Result r) {
        return String.format(Locale.ROOT,
                "{%s, \"threads\": %d, \"kernel\": %s, \"kernel_detail\": %s, \"gflops\": %.3f, "
                        + "\"peak_gflops\": %.3f, \"fraction_of_peak\": %.4f, \"peak_how\": %s, \"cores\": %d, "
                        + "\"ghz\": %.3f, \"flops_per_cycle\": %.3f, \"isa\": %s, \"median_seconds\": %.6g, "
                        + "\"best_gflops\": %.3f, \"repetitions\": %d}",
                shapeJson(r.m(), r.k(), r.n()), r.threads(), Json.str(r.kernel()), Json.str(r.kernelDetail()), r.gflops(),
                r.peakGflops(),
                r.fractionOfPeak(), Json.str(r.peakHow()), r.peak().cores(), r.peak().ghz(), r.peak().flopsPerCyclePerCore(),
                Json.str(r.peak().isa()), r.medianSeconds(), r.bestGflops(), r.repetitions());
    }

    /** "size" for a square product (as before shapes), with "m", "k" and "n" always. */
    private static String shapeJson(int m, int k, int n) {
        String mkn = String.format(Locale.ROOT, "\"m\": %d, \"k\": %d, \"n\": %d", m, k, n);
        return m == k && k == n ? "\"size\": " + m + ", " + mkn : mkn;
    }
}

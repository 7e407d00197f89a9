package dev.ttpipe.device.cpu;

import java.util.List;

/** Which matmul and elementwise kernels this process's cpu backend loaded, for run records ("OpenBLAS 0.3.31 SkylakeX, ..."). */
public final class CpuKernels {
    /** The fp32 matmul engines {@code TTPIPE_BLAS} ({@code -Dttpipe.blas}) may name ({@link GemmChoice}). */
    public static final List<String> FP32_ENGINES = List.of("auto", "blas", "openblas", "dnnl", "onednn", "java");
    /** The bf16 matmul engines {@code TTPIPE_BF16_GEMM} ({@code -Dttpipe.bf16.gemm}) may name ({@link Bf16Gemm}). */
    public static final List<String> BF16_ENGINES = List.of("auto", "dnnl", "dot", "sbgemm", "fma", "sgemm");

    private static volatile String matmul;
    private static volatile String bf16Matmul;
    private static volatile boolean bf16DotProduct;

    private CpuKernels() {
    }

    static void chose(String description) {
        matmul = description;
    }

    static void choseBf16(String description, boolean dotProduct) {
        bf16Matmul = description;
        bf16DotProduct = dotProduct;
    }

    /** What a matmul with a bf16 operand runs (oneDNN's bf16 GEMM, ttpipe's fma GEMM, or the fp32 sgemm), or null. */
    public static String bf16Matmul() {
        return bf16Matmul;
    }

    /**
     * Whether the bf16 engine chosen last multiplies with a bf16 dot product ({@code vdpbf16ps}: oneDNN's bf16 GEMM or
     * OpenBLAS's sbgemm), so that it can reach the bf16 peak; false for the engines that multiply in fp32 (fma, sgemm),
     * which reach at most the fp32 FMA peak, and before any cpu mesh chose one.
     */
    public static boolean bf16DotProduct() {
        return bf16DotProduct;
    }

    /**
     * Which elementwise and attention-row kernels run: "native avx512 (libttpipe_cpu.so)" (the C twins, see
     * {@code CpuNative}) or "Java (why not native)". Loads the library if it was not loaded yet.
     */
    public static String elementwise() {
        return CpuNative.describe();
    }

    /** The description of the kernel chosen last, or null when no cpu mesh chose one yet. */
    public static String matmul() {
        return matmul;
    }
}

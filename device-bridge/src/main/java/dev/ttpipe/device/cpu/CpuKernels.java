package dev.ttpipe.device.cpu;

/** Which matmul and elementwise kernels this process's cpu backend loaded, for run records ("OpenBLAS 0.3.31 SkylakeX, ..."). */
public final class CpuKernels {
    private static volatile String matmul;
    private static volatile String bf16Matmul;

    private CpuKernels() {
    }

    static void chose(String description) {
        matmul = description;
    }

    static void choseBf16(String description) {
        bf16Matmul = description;
    }

    /** What a matmul with a bf16 operand runs (oneDNN's bf16 GEMM, or the fp32 sgemm on widened operands), or null. */
    public static String bf16Matmul() {
        return bf16Matmul;
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

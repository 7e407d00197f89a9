package dev.ttpipe.device.cpu;

/** Which matmul kernel this process's cpu backend loaded, for run records ("OpenBLAS 0.3.31 SkylakeX, ..."). */
public final class CpuKernels {
    private static volatile String matmul;

    private CpuKernels() {
    }

    static void chose(String description) {
        matmul = description;
    }

    /** The description of the kernel chosen last, or null when no cpu mesh chose one yet. */
    public static String matmul() {
        return matmul;
    }
}

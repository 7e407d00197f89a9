package dev.ttpipe.device.cpu;

import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;
import dev.ttpipe.device.DeviceException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Matmul with bf16 operands and fp32 accumulation, as a Tenstorrent device multiplies: both
 * operands are taken at bf16 precision (an fp32 operand is first rounded to nearest even), every
 * product of two bf16 values is exact in fp32, and the products are summed in fp32. Two kernels:
 * <ul>
 *   <li>{@code sbgemm}: OpenBLAS's {@code cblas_sbgemm} on bf16 buffers, chosen where the CPU has
 *   {@code avx512_bf16} and the loaded OpenBLAS exports the symbol (the bytedeco build bundled with
 *   ttpipe does not: it is built without BUILD_BFLOAT16);</li>
 *   <li>{@code sgemm}: the fp32 kernel ({@link Gemm}) on operands rounded to bf16 and widened back to
 *   fp32 (see {@link Fp32Staging#bf16Operand}). The products are the same as sbgemm's; the order of the
 *   fp32 sums (and sbgemm's pairwise {@code vdpbf16ps} accumulation) differs, so the two kernels agree
 *   to fp32 rounding of the sums, not bit for bit. A pipeline and its reference trainer in one process
 *   use one kernel, so {@code verify} compares like with like.</li>
 * </ul>
 * {@code -Dttpipe.sbgemm=off} (or {@code TTPIPE_SBGEMM=off}) forces the fallback. Thread-safe.
 */
final class Bf16Gemm {
    private static final Logger LOG = LoggerFactory.getLogger(Bf16Gemm.class);
    private static Boolean sbgemmBound;

    private final Gemm fp32;
    private final boolean sbgemm;

    private Bf16Gemm(Gemm fp32, boolean sbgemm) {
        this.fp32 = fp32;
        this.sbgemm = sbgemm;
    }

    /** The bf16 kernel next to the fp32 kernel {@code fp32} (its thread count and library). */
    static Bf16Gemm choose(Gemm fp32) {
        return choose(fp32, System::getenv);
    }

    /** {@code getenv} reads TTPIPE_SBGEMM (a mesh's {@link dev.ttpipe.device.MeshOptions#getenv}). */
    static Bf16Gemm choose(Gemm fp32, java.util.function.UnaryOperator<String> getenv) {
        return new Bf16Gemm(fp32, fp32 instanceof BlasGemm && !"off".equals(requested(getenv)) && MachinePeak.hasBf16Dot()
                && bindSbgemm());
    }

    private static String requested(java.util.function.UnaryOperator<String> getenv) {
        String p = System.getProperty("ttpipe.sbgemm");
        if (p == null || p.isBlank()) p = getenv.apply("TTPIPE_SBGEMM");
        return p == null ? "auto" : p.trim();
    }

    /** Binds {@code cblas_sbgemm} from the OpenBLAS already loaded; false where it does not export it. */
    private static synchronized boolean bindSbgemm() {
        if (sbgemmBound == null) {
            try {
                NativeLibrary lib = NativeLibrary.getInstance(OpenBlas.loadedFrom());
                lib.getFunction("cblas_sbgemm");
                Native.register(Bf16Gemm.class, lib);
                sbgemmBound = true;
            } catch (Throwable t) {
                LOG.debug("cblas_sbgemm not available", t);
                sbgemmBound = false;
            }
        }
        return sbgemmBound;
    }

    private static native void cblas_sbgemm(int order, int transA, int transB, int m, int n, int k, float alpha, long a,
                                            int lda, long b, int ldb, float beta, long c, int ldc);

    /** True: operands are passed as bf16 buffers (2 bytes an element); false: as fp32 buffers holding bf16 values. */
    boolean packedOperands() {
        return sbgemm;
    }

    /** {@code sbgemm} or {@code sgemm on bf16-rounded operands}. */
    String kind() {
        return sbgemm ? "sbgemm" : "sgemm on bf16-rounded operands";
    }

    String describe() {
        return sbgemm ? "OpenBLAS cblas_sbgemm (avx512_bf16), fp32 accumulation"
                : "bf16-rounded operands through " + fp32.kind() + " sgemm, fp32 accumulation (no bf16 GEMM: "
                + (MachinePeak.hasBf16Dot() ? "the loaded OpenBLAS has no cblas_sbgemm" : "no avx512_bf16 on this CPU") + ")";
    }

    /**
     * {@code C = alpha * op(A) @ op(B) + beta * C}, row-major, as {@link Gemm#sgemm}; A and B are
     * bf16 buffers when {@link #packedOperands}, else fp32 buffers of bf16-representable values.
     */
    void gemm(boolean transA, boolean transB, int m, int n, int k, float alpha, NativeBuffer a, int aOff, int lda,
              NativeBuffer b, int bOff, int ldb, float beta, NativeBuffer c, int cOff, int ldc) {
        if (!sbgemm) {
            fp32.sgemm(transA, transB, m, n, k, alpha, a, aOff, lda, b, bOff, ldb, beta, c, cOff, ldc);
            return;
        }
        if (m < 0 || n < 0 || k < 0) throw new DeviceException("sbgemm: negative size m=" + m + " n=" + n + " k=" + k);
        checkBf16Bounds("A", a, aOff, transA ? k : m, transA ? m : k, lda);
        checkBf16Bounds("B", b, bOff, transB ? n : k, transB ? k : n, ldb);
        Gemm.checkBounds("C", c, cOff, m, n, ldc);
        if (m == 0 || n == 0) return;
        if (k == 0) {
            Gemm.scaleC(m, n, beta, c, cOff, ldc);
            return;
        }
        cblas_sbgemm(OpenBlas.ROW_MAJOR, transA ? OpenBlas.TRANS : OpenBlas.NO_TRANS,
                transB ? OpenBlas.TRANS : OpenBlas.NO_TRANS, m, n, k, alpha, a.address + 2L * aOff, lda,
                b.address + 2L * bOff, ldb, beta, c.address + 4L * cOff, ldc);
    }

    private static void checkBf16Bounds(String what, NativeBuffer buf, int off, int rows, int cols, int ld) {
        if (rows == 0 || cols == 0) return;
        long last = off + (long) (rows - 1) * ld + cols - 1;
        if (off < 0 || ld < cols || last >= buf.capacity / 2) {
            throw new DeviceException("sbgemm: matrix " + what + " [" + rows + " x " + cols + "] (ld " + ld + ", offset "
                    + off + ") lies outside its buffer of " + buf.capacity / 2 + " bf16 values");
        }
    }
}

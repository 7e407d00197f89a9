package dev.ttpipe.device.cpu;

import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;
import dev.ttpipe.device.DeviceException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.UnaryOperator;

/**
 * Matmul with bf16 operands and fp32 accumulation, as a Tenstorrent device multiplies: both
 * operands are taken at bf16 precision (an fp32 operand is first rounded to nearest even), every
 * product of two bf16 values is exact in fp32, and the products are summed in fp32.
 *
 * <p>What runs today, with the OpenBLAS bundled with ttpipe ({@code org.bytedeco:openblas} 0.3.31,
 * built without BUILD_BFLOAT16: it exports no {@code cblas_sbgemm}): always {@code sgemm}, the fp32
 * kernel ({@link Gemm}) on operands rounded to bf16 and widened back to fp32 (see
 * {@link Fp32Staging#bf16Operand}). No bf16 arithmetic runs; the fp32 FMA units do the work.
 *
 * <p>The {@code sbgemm} branch ({@code cblas_sbgemm} on bf16 buffers) is bound only where the loaded
 * OpenBLAS exports the symbol and the CPU has {@code avx512_bf16}. The bundled library is the one loaded
 * on linux x86_64, so there it never runs; it can only run with a system OpenBLAS built with
 * BUILD_BFLOAT16 on another OS (see {@link OpenBlas}). Its products are the same as sgemm's; the order of
 * the fp32 sums differs, so the two agree to fp32 rounding of the sums, not bit for bit. A pipeline and
 * its reference trainer in one process use one kernel, so {@code verify} compares like with like.
 * {@code -Dttpipe.sbgemm=off} (or {@code TTPIPE_SBGEMM=off}) forces sgemm. {@link #describe} says which
 * runs and why. Thread-safe.
 */
final class Bf16Gemm {
    private static final Logger LOG = LoggerFactory.getLogger(Bf16Gemm.class);
    private static Boolean sbgemmBound;
    private static final Set<String> LOGGED = ConcurrentHashMap.newKeySet();

    private final Gemm fp32;
    private final boolean sbgemm;
    /** Why sbgemm does not run (null when it does): every reason that holds, for {@link #describe}. */
    private final String whyNotSbgemm;

    private Bf16Gemm(Gemm fp32, boolean sbgemm, String whyNotSbgemm) {
        this.fp32 = fp32;
        this.sbgemm = sbgemm;
        this.whyNotSbgemm = whyNotSbgemm;
    }

    /** The bf16 kernel next to the fp32 kernel {@code fp32} (its thread count and library). */
    static Bf16Gemm choose(Gemm fp32) {
        return choose(fp32, System::getenv);
    }

    /** {@code getenv} reads TTPIPE_SBGEMM (a mesh's {@link dev.ttpipe.device.MeshOptions#getenv}). */
    static Bf16Gemm choose(Gemm fp32, UnaryOperator<String> getenv) {
        List<String> why = new ArrayList<>();
        if ("off".equals(requested(getenv))) why.add("turned off by ttpipe.sbgemm / TTPIPE_SBGEMM");
        if (!(fp32 instanceof BlasGemm)) {
            why.add("the fp32 kernel is " + fp32.kind() + ", not OpenBLAS");
        } else if (!bindSbgemm()) {
            why.add("the loaded OpenBLAS (" + OpenBlas.loadedFrom() + ") does not export cblas_sbgemm"
                    + (OpenBlas.isBundled() ? ": the bundled org.bytedeco build is compiled without BUILD_BFLOAT16" : ""));
        }
        if (!MachinePeak.hasBf16Dot()) why.add("this CPU has no avx512_bf16");
        Bf16Gemm g = new Bf16Gemm(fp32, why.isEmpty(), why.isEmpty() ? null : String.join("; ", why));
        if (LOGGED.add(g.describe())) LOG.info("cpu bf16 matmuls: {}", g.describe());
        return g;
    }

    private static String requested(UnaryOperator<String> getenv) {
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
                LOG.debug("cblas_sbgemm is not exported by {}", OpenBlas.loadedFrom(), t);
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

    /** {@code sbgemm} or {@code sgemm on bf16 operands widened to fp32} (what runs today). */
    String kind() {
        return sbgemm ? "sbgemm" : "sgemm on bf16 operands widened to fp32";
    }

    /** What a matmul with a BF16 operand runs, in words, and why not sbgemm. */
    String describe() {
        return sbgemm ? "OpenBLAS cblas_sbgemm on bf16 operands (avx512_bf16), fp32 accumulation"
                : "bf16 operands widened to fp32, then the fp32 sgemm (" + fp32.kind() + " kernel), fp32 accumulation; no bf16"
                + " GEMM runs (" + whyNotSbgemm + ")";
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

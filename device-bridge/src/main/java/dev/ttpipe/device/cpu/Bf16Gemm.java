package dev.ttpipe.device.cpu;

import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;
import dev.ttpipe.device.DeviceException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.UnaryOperator;

/**
 * Matmul with bf16 operands and fp32 accumulation, as a Tenstorrent device multiplies: both
 * operands are taken at bf16 precision (an fp32 operand is first rounded to nearest even), every
 * product of two bf16 values is exact in fp32, and the products are summed in fp32.
 *
 * <p>Five engines, the first that applies:
 * <ul>
 *   <li>{@code dnnl}: oneDNN's {@code dnnl_gemm_bf16bf16f32} on bf16 buffers ({@link Dnnl}), on CPUs with
 *   {@code avx512_bf16} (the {@code vdpbf16ps} dot product: twice the fp32 FMA rate) when oneDNN loads.
 *   Threaded as {@link BlasGemm} is: one single-threaded call per tile of C, the tiles a function of the
 *   shape alone. A product with a bf16 result runs oneDNN's matmul primitive instead ({@link DnnlMatmul}), whose
 *   epilogue adds the bias and rounds, on tiles of up to {@value DnnlMatmul#TILE_M} full-width rows.</li>
 *   <li>{@code dot}: ttpipe's own GEMM on the bf16 dot product ({@code ttpipe_cpu_gemm_bf16dot} in the native kernels),
 *   on CPUs with {@code avx512_bf16} where oneDNN does not load: the {@code fma} engine's loops and epilogue around a
 *   {@code vdpbf16ps} kernel, the operands packed in pairs of k. Threaded and rounded as {@code fma}; its bits are a
 *   function of the shape alone.</li>
 *   <li>{@code sbgemm}: OpenBLAS's {@code cblas_sbgemm}, where the loaded OpenBLAS exports it and the CPU
 *   has {@code avx512_bf16}. The bundled OpenBLAS ({@code org.bytedeco:openblas} 0.3.31) is built without
 *   BUILD_BFLOAT16 and exports none, so this runs only with a system OpenBLAS on another OS.</li>
 *   <li>{@code fma}: ttpipe's own GEMM for CPUs without a bf16 dot product ({@code ttpipe_cpu_gemm_bf16} in the native
 *   kernels, AVX-512 or AVX2 with FMA): bf16 operands widened to fp32 as they are packed into cache-sized panels, then
 *   fp32 FMAs, so no fp32 copy of an operand goes through memory. Threaded as {@code dnnl}; its bits are a function of
 *   the shape alone, the same from its AVX-512 and its AVX2 kernel.</li>
 *   <li>{@code sgemm}: the fp32 kernel ({@link Gemm}) on operands rounded to bf16 and widened back to fp32
 *   ({@link Fp32Staging#bf16Operand}): the same products, no bf16 arithmetic. Where the native kernels do not run, or
 *   the CPU has no AVX2 with FMA.</li>
 * </ul>
 * The engines' products are the same; the order of the fp32 sums differs, so they agree to fp32
 * rounding of the sums, not bit for bit. A pipeline and its reference trainer in one process use one
 * engine, so {@code verify} compares like with like. {@code -Dttpipe.bf16.gemm=dnnl|dot|sbgemm|fma|sgemm} (or
 * {@code TTPIPE_BF16_GEMM}) forces one; {@code -Dttpipe.sbgemm=off} ({@code TTPIPE_SBGEMM=off}) means
 * {@code sgemm}. {@link #describe} says which runs and why not the others. Thread-safe.
 */
final class Bf16Gemm {
    private static final Logger LOG = LoggerFactory.getLogger(Bf16Gemm.class);
    private static Boolean sbgemmBound;
    private static final Set<String> LOGGED = ConcurrentHashMap.newKeySet();

    /** Which engine multiplies. */
    enum Engine { DNNL, DOT, SBGEMM, FMA, SGEMM }

    private final Gemm fp32;
    private final Parallel parallel;
    private final Engine engine;
    /** Why the faster engines do not run (null when dnnl does): every reason that holds, for {@link #describe}. */
    private final String whyNot;

    private Bf16Gemm(Gemm fp32, Parallel parallel, Engine engine, String whyNot) {
        this.fp32 = fp32;
        this.parallel = parallel;
        this.engine = engine;
        this.whyNot = whyNot;
    }

    /** The bf16 kernel next to the fp32 kernel {@code fp32}, threaded over {@code parallel}. */
    static Bf16Gemm choose(Gemm fp32, Parallel parallel) {
        return choose(fp32, parallel, System::getenv);
    }

    /** {@code getenv} reads TTPIPE_BF16_GEMM and TTPIPE_SBGEMM (a mesh's {@link dev.ttpipe.device.MeshOptions#getenv}). */
    static Bf16Gemm choose(Gemm fp32, Parallel parallel, UnaryOperator<String> getenv) {
        String asked = requested(getenv);
        if (!CpuKernels.BF16_ENGINES.contains(asked)) {
            throw new DeviceException("bf16 matmul engine '" + asked + "' (ttpipe.bf16.gemm / TTPIPE_BF16_GEMM) unknown,"
                    + " expected one of " + String.join(", ", CpuKernels.BF16_ENGINES));
        }
        boolean bf16Dot = MachinePeak.hasBf16Dot();
        List<String> whyNot = new ArrayList<>();
        Engine engine = Engine.SGEMM;
        if (asked.equals("sgemm")) {
            whyNot.add("sgemm asked for (ttpipe.bf16.gemm / TTPIPE_BF16_GEMM, or TTPIPE_SBGEMM=off)");
        } else {
            boolean own = asked.equals("fma") || asked.equals("dot");      // ttpipe's own kernels: no library loaded
            if (own) whyNot.add(asked + " asked for (ttpipe.bf16.gemm / TTPIPE_BF16_GEMM)");
            if (!bf16Dot) whyNot.add("this CPU has no avx512_bf16");
            boolean dnnlOk = false;
            if (!asked.equals("sbgemm") && !own && bf16Dot) {   // without avx512_bf16 never used: not loaded
                if (!Dnnl.load()) whyNot.add("oneDNN does not load (" + Dnnl.failure() + ")");
                else dnnlOk = true;
            }
            boolean sbgemmOk = false;
            if (!asked.equals("dnnl") && !own) {
                if (!(fp32 instanceof BlasGemm)) {
                    whyNot.add("the fp32 kernel is " + fp32.kind() + ", not OpenBLAS, so no cblas_sbgemm");
                } else if (!bindSbgemm()) {
                    whyNot.add("the loaded OpenBLAS (" + OpenBlas.loadedFrom() + ") does not export cblas_sbgemm"
                            + (OpenBlas.isBundled() ? ": the bundled org.bytedeco build is compiled without BUILD_BFLOAT16" : ""));
                } else {
                    sbgemmOk = true;
                }
            }
            String fmaKernel = fmaKernel();
            boolean dotOk = bf16Dot && dotKernel();
            if (asked.equals("dot") && !dotOk) {
                whyNot.add("ttpipe's bf16 dot-product GEMM (dot) needs the native kernels on a CPU with avx512_bf16: "
                        + CpuNative.describe());
            }
            if (asked.equals("dot")) engine = dotOk ? Engine.DOT : Engine.SGEMM;       // SGEMM: refused below
            else if (bf16Dot && dnnlOk && !asked.equals("fma")) engine = Engine.DNNL;
            else if (dotOk && asked.equals("auto")) engine = Engine.DOT;
            else if (bf16Dot && sbgemmOk && !asked.equals("fma")) engine = Engine.SBGEMM;
            else if (fmaKernel != null && (asked.equals("auto") || asked.equals("fma"))) engine = Engine.FMA;
            if (fmaKernel == null) {
                whyNot.add("ttpipe's bf16-reading GEMM (fma) needs the native kernels on a CPU with AVX2 and FMA: "
                        + CpuNative.describe());
            }
            if (engine == Engine.SGEMM && !asked.equals("auto")) {
                throw new DeviceException("bf16 matmul engine " + asked + " asked for, but it cannot run: " + String.join("; ", whyNot));
            }
        }
        Bf16Gemm g = new Bf16Gemm(fp32, parallel, engine, whyNot.isEmpty() ? null : String.join("; ", whyNot));
        if (LOGGED.add(g.describe())) LOG.info("cpu bf16 matmuls: {}", g.describe());
        CpuKernels.choseBf16(g.describe(), engine == Engine.DNNL || engine == Engine.DOT || engine == Engine.SBGEMM);
        return g;
    }

    /** The kernel of the {@code fma} engine here ("avx512", "avx2"), or null where it cannot run. */
    static String fmaKernel() {
        return CpuNative.active() ? CpuNative.ttpipe_cpu_gemm_bf16_kernel() : null;
    }

    /** Whether the {@code dot} engine's kernel runs here (the native kernels, a CPU with avx512_bf16). */
    static boolean dotKernel() {
        return CpuNative.active() && CpuNative.ttpipe_cpu_gemm_bf16dot_available() == 1;
    }

    /** {@link BlasGemm.TileCall} of the {@code dot} engine: one single-threaded call of {@code ttpipe_cpu_gemm_bf16dot}. */
    static void dotTile(boolean transA, boolean transB, int m, int n, int k, float alpha, long a, int lda, long b, int ldb,
                        float beta, long c, int ldc) {
        ownDone(CpuNative.ttpipe_cpu_gemm_bf16dot(transA ? 1 : 0, transB ? 1 : 0, m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc), m, n, k);
    }

    /** {@link BlasGemm.TileCall} of the {@code fma} engine: one single-threaded call of {@code ttpipe_cpu_gemm_bf16}. */
    static void fmaTile(boolean transA, boolean transB, int m, int n, int k, float alpha, long a, int lda, long b, int ldb,
                        float beta, long c, int ldc) {
        ownDone(CpuNative.ttpipe_cpu_gemm_bf16(transA ? 1 : 0, transB ? 1 : 0, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc),
                m, n, k);
    }

    /** Throws unless {@code rc}, what the fma or dot engine's kernel returned for an m x k x n product, is 0. */
    private static void ownDone(int rc, int m, int n, int k) {
        if (rc != 0) {
            throw new DeviceException("bf16 gemm (ttpipe's kernel) on " + m + " x " + k + " x " + n + " failed: "
                    + (rc == -1 ? "its packed panels could not be allocated" : rc == -2 ? "no kernel runs on this CPU"
                    : "no scratch for the sums of a product longer than one block"));
        }
    }

    private static String requested(UnaryOperator<String> getenv) {
        String p = System.getProperty("ttpipe.bf16.gemm");
        if (p == null || p.isBlank()) p = getenv.apply("TTPIPE_BF16_GEMM");
        if (p != null && !p.isBlank()) return p.trim().toLowerCase(Locale.ROOT);
        String off = System.getProperty("ttpipe.sbgemm");
        if (off == null || off.isBlank()) off = getenv.apply("TTPIPE_SBGEMM");
        return "off".equals(off == null ? null : off.trim()) ? "sgemm" : "auto";
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
        return engine != Engine.SGEMM;
    }

    Engine engine() {
        return engine;
    }

    /** Whether the engine is one of ttpipe's own kernels ({@code fma}, {@code dot}): bits independent of the tiling. */
    private boolean ownKernel() {
        return ownEngine() >= 0;
    }

    /** The {@code dot} argument of the native kernels for ttpipe's own engines: 1 dot, 0 fma; -1 for the others. */
    int ownEngine() {
        return engine == Engine.DOT ? 1 : engine == Engine.FMA ? 0 : -1;
    }

    /** {@code dnnl}, {@code sbgemm}, {@code fma} or {@code sgemm on bf16 operands widened to fp32}. */
    String kind() {
        return switch (engine) {
            case DNNL -> "dnnl";
            case DOT -> "dot";
            case SBGEMM -> "sbgemm";
            case FMA -> "fma";
            case SGEMM -> "sgemm on bf16 operands widened to fp32";
        };
    }

    /** What a matmul with a BF16 operand runs, in words, and why not the faster engines. */
    String describe() {
        return switch (engine) {
            case DNNL -> Dnnl.describe() + ", dnnl_gemm_bf16bf16f32 on bf16 operands (avx512_bf16), fp32 accumulation;"
                    + " single-threaded calls on tiles of C up to " + BlasGemm.TILE_M + "x" + BlasGemm.TILE_N + " over "
                    + parallel.threadsInWords() + "; a product with a bf16 result in tiles of " + DnnlMatmul.TILE_M
                    + " rows through oneDNN's matmul primitive (bias and rounding in its epilogue), a shorter tile too when"
                    + " its rows are a multiple of " + DnnlMatmul.ROW_STEP;
            case DOT -> "ttpipe's bf16 dot-product GEMM (vdpbf16ps kernel in " + CpuNative.FILE + "): bf16 operands packed"
                    + " in pairs, fp32 accumulation (avx512_bf16); one single-threaded call per thread on a piece of C"
                    + " (at most " + OWN_TILE_N + " columns) over " + parallel.threadsInWords() + "; fused attention in one native"
                    + " pass per range of (batch, head) pairs; not oneDNN's (" + whyNot
                    + ")";
            case SBGEMM -> "OpenBLAS cblas_sbgemm on bf16 operands (avx512_bf16), fp32 accumulation";
            case FMA -> "ttpipe's bf16-reading GEMM (" + fmaKernel() + " kernel in " + CpuNative.FILE + "): bf16 operands"
                    + " widened to fp32 as they are packed, fp32 FMAs; one single-threaded call per thread on a piece of C"
                    + " (at most " + OWN_TILE_N + " columns) over " + parallel.threadsInWords() + "; fused attention in one native"
                    + " pass per range of (batch, head) pairs; no bf16 dot"
                    + " product runs (" + whyNot + ")";
            case SGEMM -> "bf16 operands widened to fp32, then the fp32 sgemm (" + fp32.kind() + " kernel), fp32 accumulation;"
                    + " no bf16 GEMM runs (" + whyNot + ")";
        };
    }

    /**
     * {@code C = alpha * op(A) @ op(B) + beta * C}, row-major, as {@link Gemm#sgemm}; A and B are
     * bf16 buffers when {@link #packedOperands}, else fp32 buffers of bf16-representable values.
     */
    void gemm(boolean transA, boolean transB, int m, int n, int k, float alpha, NativeBuffer a, int aOff, int lda,
              NativeBuffer b, int bOff, int ldb, float beta, NativeBuffer c, int cOff, int ldc) {
        if (engine == Engine.SGEMM) {
            fp32.sgemm(transA, transB, m, n, k, alpha, a, aOff, lda, b, bOff, ldb, beta, c, cOff, ldc);
            return;
        }
        if (m < 0 || n < 0 || k < 0) throw new DeviceException("bf16 gemm: negative size m=" + m + " n=" + n + " k=" + k);
        checkBf16Bounds("A", a, aOff, transA ? k : m, transA ? m : k, lda);
        checkBf16Bounds("B", b, bOff, transB ? n : k, transB ? k : n, ldb);
        Gemm.checkBounds("C", c, cOff, m, n, ldc);
        if (m == 0 || n == 0) return;
        if (k == 0) {
            Gemm.scaleC(m, n, beta, c, cOff, ldc);
        } else if (ownKernel()) {
            long aAt = a.address + 2L * aOff, bAt = b.address + 2L * bOff, cAt = c.address + 4L * cOff;
            BlasGemm.TileCall call = engine == Engine.DOT ? Bf16Gemm::dotTile : Bf16Gemm::fmaTile;
            ownTiles(m, n, k, (i0, j0, rows, cols) -> call.call(transA, transB, rows, cols, k, alpha,
                    BlasGemm.tileOfA(aAt, 2, lda, transA, i0), lda, BlasGemm.tileOfB(bAt, 2, ldb, transB, j0), ldb, beta,
                    cAt + 4L * ((long) i0 * ldc + j0), ldc));
        } else if (engine == Engine.DNNL) {
            BlasGemm.tiles(parallel, transA, transB, m, n, k, alpha, a.address + 2L * aOff, lda, 2, b.address + 2L * bOff,
                    ldb, 2, beta, c.address + 4L * cOff, ldc, Dnnl::gemmBf16);
        } else {
            cblas_sbgemm(OpenBlas.ROW_MAJOR, transA ? OpenBlas.TRANS : OpenBlas.NO_TRANS,
                    transB ? OpenBlas.TRANS : OpenBlas.NO_TRANS, m, n, k, alpha, a.address + 2L * aOff, lda,
                    b.address + 2L * bOff, ldb, beta, c.address + 4L * cOff, ldc);
        }
    }

    /**
     * {@code out = alpha * op(A) @ op(B) + beta * out (+ bias[j] on every row)} for a bf16 {@code out} (row stride
     * {@code ldo}), rounded once. On the dnnl engine with alpha 1 and beta 0 or 1, each tile of up to
     * {@value DnnlMatmul#TILE_M} rows, a multiple of {@value DnnlMatmul#ROW_STEP}, runs oneDNN's matmul primitive, which
     * adds the bias and the earlier value and rounds in its epilogue (its own order of the sums over k; other tiles, and
     * shapes it has no primitive for, run as follows). Where the
     * engine works tile by tile (oneDNN's bf16 GEMM, the fma and dot engines; the
     * sgemm engine on OpenBLAS or oneDNN), each tile's fp32 sums go to a scratch buffer taken from {@code scratch} by the
     * thread that computes the tile and given back after its rounding, so the sums stay in that thread's cache and no fp32
     * copy of the whole result exists; otherwise (the pure-JVM kernel, or k = 0), fp32 sums of the whole result, then the
     * rounding. Either way each element is the one fp32 sum of its products rounded once: off the primitive, the bits
     * of {@link #gemm} into fp32 followed by {@link Convert#sumsToBf16}.
     */
    void gemmToBf16(boolean transA, boolean transB, int m, int n, int k, float alpha, NativeBuffer a, int aOff, int lda,
                    NativeBuffer b, int bOff, int ldb, float beta, NativeBuffer out, int outOff, int ldo, NativeBuffer bias,
                    NativeAllocator scratch) {
        if (m <= 0 || n <= 0) return;
        BlasGemm.TileCall call = k <= 0 ? null : switch (engine) {
            case DNNL -> Dnnl::gemmBf16;
            case FMA -> Bf16Gemm::fmaTile;
            case DOT -> Bf16Gemm::dotTile;
            case SGEMM -> fp32.tileCall(transA, transB, m, n, k);
            case SBGEMM -> null;
        };
        if (call == null) {
            NativeBuffer c = scratch.take(4L * m * n);
            try {
                if (beta != 0f) {
                    for (int i = 0; i < m; i++) Convert.bf16ToFloat(c, i * n, out, outOff + i * ldo, n);
                }
                gemm(transA, transB, m, n, k, alpha, a, aOff, lda, b, bOff, ldb, beta, c, 0, n);
                parallel.range(m, Math.max(1, Elementwise.GRAIN / n), (lo, hi) ->
                        Convert.tileToBf16(out, outOff + lo * ldo, ldo, c, lo * n, n, hi - lo, n, bias, 0));
            } finally {
                scratch.give(c);
            }
            return;
        }
        int bytes = engine == Engine.SGEMM ? 4 : 2;                // the sgemm engine's operands are widened to fp32
        if (bytes == 2) {
            checkBf16Bounds("A", a, aOff, transA ? k : m, transA ? m : k, lda);
            checkBf16Bounds("B", b, bOff, transB ? n : k, transB ? k : n, ldb);
        } else {
            Gemm.checkBounds("A", a, aOff, transA ? k : m, transA ? m : k, lda);
            Gemm.checkBounds("B", b, bOff, transB ? n : k, transB ? k : n, ldb);
            MatmulShapes.note(transA, transB, m, n, k);
        }
        checkBf16Bounds("C", out, outOff, m, n, ldo);
        if (bias != null && bias.capacity < 4L * n) {
            throw new DeviceException("bf16 gemm: a bias of " + bias.capacity / 4 + " floats for " + n + " columns");
        }
        long aAt = a.address + (long) bytes * aOff, bAt = b.address + (long) bytes * bOff;
        if (ownKernel() && beta == 0f) {
            ownToBf16(transA, transB, m, n, k, alpha, aAt, lda, bAt, ldb, out, outOff, ldo, bias, scratch);
            return;
        }
        boolean primitive = engine == Engine.DNNL && alpha == 1f && (beta == 0f || beta == 1f);
        int tm = primitive ? DnnlMatmul.tileRows(m, n, k) : BlasGemm.tileRows(m, n, k);
        int tn = primitive ? DnnlMatmul.tileCols(m, n, k) : BlasGemm.tileCols(m, n, k);
        BlasGemm.eachTile(parallel, m, n, tm, tn, (i0, j0, rows, cols) -> {
            int at = outOff + i0 * ldo + j0;
            if (primitive && DnnlMatmul.runs(rows) && DnnlMatmul.tileToBf16(transA, transB, rows, cols, k,
                    BlasGemm.tileOfA(aAt, 2, lda, transA, i0), lda, BlasGemm.tileOfB(bAt, 2, ldb, transB, j0), ldb,
                    out.address + 2L * at, ldo, bias == null ? 0 : bias.address + 4L * j0, beta != 0f)) {
                return;                                     // the primitive did it, rounding included
            }
            NativeBuffer c = scratch.take(4L * rows * cols);
            try {
                if (beta != 0f) {
                    for (int i = 0; i < rows; i++) Convert.bf16ToFloat(c, i * cols, out, at + i * ldo, cols);
                }
                call.call(transA, transB, rows, cols, k, alpha, BlasGemm.tileOfA(aAt, bytes, lda, transA, i0), lda,
                        BlasGemm.tileOfB(bAt, bytes, ldb, transB, j0), ldb, beta, c.address, cols);
                Convert.tileToBf16(out, at, ldo, c, 0, cols, rows, cols, bias, j0);
            } finally {
                scratch.give(c);
            }
        });
    }

    /**
     * {@link #gemmToBf16} on the fma or dot engine with beta 0: each tile's kernel rounds its elements (plus bias) into
     * {@code out} as it finishes them, so only a product longer than one block of k keeps fp32 sums, in a scratch tile.
     */
    private void ownToBf16(boolean transA, boolean transB, int m, int n, int k, float alpha, long aAt, int lda, long bAt,
                           int ldb, NativeBuffer out, int outOff, int ldo, NativeBuffer bias, NativeAllocator scratch) {
        boolean sums = k > CpuNative.ttpipe_cpu_gemm_bf16_block();
        ownTiles(m, n, k, (i0, j0, rows, cols) -> {
            NativeBuffer c = sums ? scratch.take(4L * rows * cols) : null;
            try {
                ownDone(CpuNative.ttpipe_cpu_gemm_bf16_out(ownEngine(), transA ? 1 : 0, transB ? 1 : 0,
                        rows, cols, k, alpha, BlasGemm.tileOfA(aAt, 2, lda, transA, i0), lda,
                        BlasGemm.tileOfB(bAt, 2, ldb, transB, j0), ldb,
                        c == null ? 0 : c.address, cols, out.address + 2L * (outOff + (long) i0 * ldo + j0), ldo,
                        bias == null ? 0 : bias.address + 4L * j0), rows, cols, k);
            } finally {
                if (c != null) scratch.give(c);
            }
        });
    }

    /**
     * The most columns of C in one call of the fma or dot engine: B's packed panel (384 x this: fp32 values, or pairs of
     * bf16 values in 32-bit words) stays in the L3 cache.
     */
    static final int OWN_TILE_N = 2048;

    /**
     * {@code body} once per piece of C [m, n] for the fma and dot engines, over the threads. Their bits do not depend on
     * the pieces (each element's sums run over k in blocks of 384 from 0, whatever the tile), so the pieces follow the
     * thread count: one per thread, the longer side cut, and at most {@link #OWN_TILE_N} columns. Each tile packs its
     * rows of A and its columns of B once a block, so fewer, larger tiles pack the operands fewer times (the fixed tiles
     * of {@link BlasGemm#tileRows}, which the other engines need for thread-independent bits, packed a 2048-row
     * activation's weight four times). A small product is one call.
     */
    private void ownTiles(int m, int n, int k, BlasGemm.TileBody body) {
        int threads = parallel.threads();
        int rp = 1, cp = (n + OWN_TILE_N - 1) / OWN_TILE_N;
        if ((long) m * n * k < BlasGemm.SMALL_FLOPS) cp = 1;
        else if (cp > threads) cp = (cp + threads - 1) / threads * threads;
        while ((long) m * n * k >= BlasGemm.SMALL_FLOPS && rp * cp < threads) {
            boolean rowsCan = m / (rp + 1) >= 64, colsCan = n / (cp + 1) >= 64;
            if (rowsCan && (!colsCan || m / rp >= n / cp)) rp++;
            else if (colsCan) cp++;
            else break;
        }
        BlasGemm.eachTile(parallel, m, n, BlasGemm.even(m, (m + rp - 1) / rp), BlasGemm.even(n, (n + cp - 1) / cp), body);
    }

    private static void checkBf16Bounds(String what, NativeBuffer buf, int off, int rows, int cols, int ld) {
        if (rows == 0 || cols == 0) return;
        long last = off + (long) (rows - 1) * ld + cols - 1;
        if (off < 0 || ld < cols || last >= buf.capacity / 2) {
            throw new DeviceException("bf16 gemm: matrix " + what + " [" + rows + " x " + cols + "] (ld " + ld + ", offset "
                    + off + ") lies outside its buffer of " + buf.capacity / 2 + " bf16 values");
        }
    }
}

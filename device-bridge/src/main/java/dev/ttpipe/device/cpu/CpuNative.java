package dev.ttpipe.device.cpu;

import com.sun.jna.Function;
import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;
import com.sun.jna.Pointer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.io.InputStream;
import java.nio.Buffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Locale;
import java.util.zip.CRC32;

/**
 * The cpu backend's native kernels ({@code device-bridge/native/cpu/ttpipe_cpu.c}): GELU and SiLU forward and
 * backward, the fused attention's row work (softmax rows, backward rows), cross-entropy's rows, LayerNorm forward and
 * backward, broadcast add and multiply, AdamW, sums of rows and of squares, 4-byte permutes; and the GEMM on bf16
 * operands of {@link Bf16Gemm}'s fma engine. Bound with JNA direct mapping; pointers are passed as {@code long}
 * addresses, so a call allocates nothing.
 *
 * <p>Why native: C2 does not vectorise the JVM's loops over {@link FloatExp} (float-to-int bit moves), nor a
 * double-precision reduction, nor loops over direct-buffer accessors, so a GELU costs 10-20 ns per element in
 * Java. The C twins, cloned for AVX-512, AVX2 and SSE2, run each vector lane through the same IEEE operations.
 * Every function computes bit for bit what its Java twin computes (no FMA contraction; reductions in
 * {@value FlashAttention#LANES} partials in a fixed order, written the same way in both sources), so which one
 * ran never changes a result: {@code CpuNativeTest} checks it, for each x86-64 level.
 *
 * <p>The library is built by Maven in device-bridge's compile phase with the system C compiler and packed
 * into the jar ({@code ttpipe-native/<os>-<arch>/libttpipe_cpu.so}); at first use it is copied to a
 * directory under {@code java.io.tmpdir} named by its CRC (written under a temporary name and moved
 * atomically, so concurrent JVMs are safe) and loaded from there; {@code -Dttpipe.cpu.native.library=PATH} loads
 * another build instead (the tests load one built for each x86-64 level alone; a level this CPU does not run is
 * refused before any of its code runs). Without it (no compiler at build time,
 * another platform, {@code -Dttpipe.cpu.native=false}) the Java kernels run: slower, same bits.
 */
final class CpuNative {
    private static final Logger LOG = LoggerFactory.getLogger(CpuNative.class);
    static final String FILE = "libttpipe_cpu.so";
    static final String PROPERTY = "ttpipe.cpu.native";
    /** A libttpipe_cpu.so to load instead of the bundled one, e.g. one built for a single x86-64 level. */
    static final String LIBRARY_PROPERTY = "ttpipe.cpu.native.library";
    static final int ABI_VERSION = 11;

    private static volatile boolean loaded;
    private static volatile String description = "not loaded yet";
    /** Tests turn the native kernels off to compare with the Java ones. */
    private static volatile boolean enabled = true;
    private static boolean tried;

    private CpuNative() {
    }

    static native String ttpipe_cpu_variant();

    /** {@code iterations} passes of 12 vdpbf16ps chains; the FLOPs done, 0 without avx512_bf16 (MachinePeak). */
    static native long ttpipe_cpu_bf16_dot_chains(long iterations);

    static native void ttpipe_cpu_bf16_to_float(long out, long x, long n);

    static native void ttpipe_cpu_float_to_bf16(long out, long x, long n);

    static native void ttpipe_cpu_round_to_bf16(long out, long x, long n);

    static native void ttpipe_cpu_tile_to_bf16(long out, long ldo, long c, long ldc, long rows, long cols, long bias);

    /** The kernel {@link #ttpipe_cpu_gemm_bf16} runs here ("avx512" or "avx2"), or null where it has none (no FMA). */
    static native String ttpipe_cpu_gemm_bf16_kernel();

    /**
     * {@code C = alpha op(A) op(B) + beta C} on bf16 A and B (widened to fp32 as they are packed) and fp32 C, by fp32
     * FMAs, on the calling thread; the bits a function of the shape alone ({@link Bf16Gemm}'s {@code fma} engine).
     * 0, -1 when its panels cannot be allocated, -2 where no kernel runs.
     */
    static native int ttpipe_cpu_gemm_bf16(int transA, int transB, int m, int n, int k, float alpha, long a, int lda, long b,
                                           int ldb, float beta, long c, int ldc);

    /** 1 where {@link #ttpipe_cpu_gemm_bf16dot} runs (a CPU with avx512_bf16), else 0. */
    static native int ttpipe_cpu_gemm_bf16dot_available();

    /**
     * {@link #ttpipe_cpu_gemm_bf16} on the bf16 dot product ({@code vdpbf16ps}): the operands packed in pairs of k, each
     * pair's two products added to an fp32 sum as the instruction defines; the bits a function of the shape alone
     * ({@link Bf16Gemm}'s {@code dot} engine). 0, -1 when its panels cannot be allocated, -2 where it cannot run.
     */
    static native int ttpipe_cpu_gemm_bf16dot(int transA, int transB, int m, int n, int k, float alpha, long a, int lda,
                                              long b, int ldb, float beta, long c, int ldc);

    /**
     * {@link #ttpipe_cpu_gemm_bf16} ({@code dot} 0) or {@link #ttpipe_cpu_gemm_bf16dot} ({@code dot} 1) with beta 0 into
     * a bf16 {@code out} (row stride {@code ldo}): each element plus
     * {@code bias[j]} (bias 0: none) rounded once as the kernel finishes it; the sums of the blocks before the last go
     * to fp32 {@code c}, needed only when k exceeds {@link #ttpipe_cpu_gemm_bf16_block} (else 0). The bits of
     * {@link #ttpipe_cpu_gemm_bf16} then {@link #ttpipe_cpu_tile_to_bf16}. 0, -1 when its panels cannot be allocated,
     * -2 where no kernel runs, -3 when c is needed and 0.
     */
    static native int ttpipe_cpu_gemm_bf16_out(int dot, int transA, int transB, int m, int n, int k, float alpha, long a,
                                               int lda, long b, int ldb, long c, int ldc, long out, int ldo, long bias);

    /** The k indices the fma and dot engines sum in one block (384). */
    static native int ttpipe_cpu_gemm_bf16_block();

    // Kernels with a `types` argument take bf16 arrays too: bit i set when the i-th array operand holds bf16 (see
    // ttpipe_cpu.c and DirectKernels); 0 is all fp32.

    static native void ttpipe_cpu_gelu(long out, long x, long n, int types);

    static native void ttpipe_cpu_gelu_backward(long dx, long dy, long x, long n, int types);

    static native void ttpipe_cpu_silu(long out, long x, long n, int types);

    static native void ttpipe_cpu_silu_backward(long dx, long dy, long x, long n, int types);

    static native void ttpipe_cpu_softmax_rows(long s, int rows, int keys, int first, int causal, long max, long sum);

    static native void ttpipe_cpu_attention_backward_rows(long p, long ds, int rows, int keys, int first, int causal,
                                                          long lse, long dO, long o, int hd, float scale);

    /** {@link #ttpipe_cpu_softmax_rows}, the probabilities rounded into the bf16 tile {@code pb} in the same pass. */
    static native void ttpipe_cpu_softmax_rows_bf16(long s, long pb, int rows, int keys, int first, int causal, long max,
                                                    long sum);

    /**
     * FlashAttention's bf16 forward on the fma ({@code dot} 0) or dot ({@code dot} 1) engine for the (batch, head) pairs
     * [lo, hi), fused: the same products, rows and roundings as the tile path, K and V packed once a pair. Writes o and
     * each query row's softmax max (float) and sum of exps (double) to {@code max} and {@code sum} [hi - lo, t]. 0, -1
     * when scratch cannot be allocated, -2 where the engine does not run.
     */
    static native int ttpipe_cpu_attention_forward_bf16(int dot, int lo, int hi, long q, long k, long v, long o, long max,
                                                        long sum, int t, int tk, int hd, float scale, int causal);

    /** FlashAttention's bf16 backward, fused as {@link #ttpipe_cpu_attention_forward_bf16}: dq, dk and dv. */
    static native int ttpipe_cpu_attention_backward_bf16(int dot, int lo, int hi, long q, long k, long v, long o, long lse,
                                                         long dO, long dq, long dk, long dv, int t, int tk, int hd,
                                                         float scale, int causal);

    /** {@link #ttpipe_cpu_attention_backward_rows} on bf16 dO and o rows, P and dS rounded into bf16 tiles pb and dsb. */
    static native void ttpipe_cpu_attention_backward_rows_bf16(long p, long ds, long pb, long dsb, int rows, int keys,
                                                               int first, int causal, long lse, long dO, long o, int hd,
                                                               float scale);

    /**
     * Each row's max and sum of exp(x - max) of x [rows, v] (cross-entropy's log-sum-exp without the log); scratch: v
     * floats; types bit 0: x is bf16.
     */
    static native void ttpipe_cpu_row_max_sumexp(long x, long rows, int v, long scratch, long max, long sum, int types);

    /**
     * dx = scale (softmax(x) - onehot(target)) for rows [lo, hi) of x [rows, v]; rows with the ignore index 0; types bit
     * 0: dx is bf16, bit 1: x is bf16; scratch: 2 v floats when either is.
     */
    static native void ttpipe_cpu_cross_entropy_backward_rows(long dx, long x, long targets, long lo, long hi, int v,
                                                              int ignore, float scale, long scratch, int types);

    static native void ttpipe_cpu_binary(long out, long a, long b, long rows, long nb, int mul, int types);

    static native void ttpipe_cpu_adamw(long param, long grad, long m, long v, long n, float b1, float b2, float gs,
                                        float decay, float stepSize, float bc2Sqrt, float eps);

    static native void ttpipe_cpu_layernorm(long y, long mean, long rstd, long x, long gamma, long beta, long lo, long hi,
                                            int d, float eps, int types);

    static native void ttpipe_cpu_layernorm_backward_input(long dx, long dy, long x, long gamma, long mean, long rstd,
                                                           long lo, long hi, int d, int types);

    static native void ttpipe_cpu_layernorm_backward_weight(long dy, long x, long mean, long rstd, long dGamma, long dBeta,
                                                            long rows, int d, int lo, int hi, int accumulate, int types);

    static native void ttpipe_cpu_sum_rows(long x, long out, long rows, long n, long lo, long hi, int accumulate, int types);

    static native double ttpipe_cpu_sum_squares(long x, long n);

    static native void ttpipe_cpu_permute4(long out, long x, int rank, int[] outDims, int[] inStride, long lo, long hi,
                                           int len, int step);

    static native void ttpipe_cpu_permute2(long out, long x, int rank, int[] outDims, int[] inStride, long lo, long hi,
                                           int len, int step);

    /**
     * The address of a direct buffer's first element, after checking that it holds {@code floats} 4-byte
     * elements (the native kernels do not check bounds); 0 for null. Throws for a heap buffer.
     */
    static long address(Buffer b, long floats) {
        if (b == null) return 0;
        if (!b.isDirect()) throw new IllegalArgumentException("a heap buffer cannot go to a native kernel");
        if (floats < 0 || floats > b.capacity()) {
            throw new IndexOutOfBoundsException(floats + " elements in a buffer of " + b.capacity());
        }
        return Pointer.nativeValue(Native.getDirectBufferPointer(b));
    }

    /** The resource path of the library for this platform. */
    static String resource() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT).replace(' ', '_');
        return "ttpipe-native/" + os + "-" + System.getProperty("os.arch", "") + "/" + FILE;
    }

    /** True when the native kernels are loaded and in use. */
    static boolean active() {
        return enabled && (loaded || load());
    }

    /** Turns the native kernels off (false) or back on, for tests; returns the previous setting. */
    static boolean enable(boolean on) {
        boolean was = enabled;
        enabled = on;
        return was;
    }

    /** Which kernels run, for run records: "native avx512 (libttpipe_cpu.so)" or "Java (why not native)". */
    static String describe() {
        active();
        return enabled ? description : "Java (native kernels turned off)";
    }

    private static synchronized boolean load() {
        if (tried) return loaded;
        tried = true;
        if (!Boolean.parseBoolean(System.getProperty(PROPERTY, "true"))) {
            description = "Java (-D" + PROPERTY + "=false)";
            return false;
        }
        String given = System.getProperty(LIBRARY_PROPERTY, "");
        if (!given.isBlank()) return loadFrom(Paths.get(given));
        try (InputStream in = CpuNative.class.getClassLoader().getResourceAsStream(resource())) {
            if (in == null) {
                description = "Java (no " + resource() + " in the build: it had no C compiler, or another platform)";
                return false;
            }
            byte[] bytes = in.readAllBytes();
            CRC32 crc = new CRC32();
            crc.update(bytes);
            Path dir = Paths.get(System.getProperty("java.io.tmpdir"), "ttpipe-native",
                    String.format(Locale.ROOT, "cpu-%08x", crc.getValue()));
            Files.createDirectories(dir);
            Path lib = dir.resolve(FILE);
            if (!Files.isRegularFile(lib) || Files.size(lib) != bytes.length) {
                Path tmp = Files.createTempFile(dir, FILE, ".tmp");
                try {
                    Files.write(tmp, bytes);
                    Files.move(tmp, lib, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
                } finally {
                    Files.deleteIfExists(tmp);
                }
            }
            return loadFrom(lib);
        } catch (IOException | RuntimeException e) {
            description = "Java (" + FILE + " did not load: " + e.getMessage() + ")";
            LOG.debug("native cpu kernels not available", e);
        }
        return loaded;
    }

    /**
     * What a library was built for ({@code ttpipe_cpu_build}: "clones", an x86-64 level, or "generic"), read as data
     * before any of its code runs, so that a library built for a level this CPU lacks is refused, not run.
     */
    static String build(NativeLibrary nl) {
        try {
            return nl.getGlobalVariableAddress("ttpipe_cpu_build").getString(0, "US-ASCII");
        } catch (UnsatisfiedLinkError e) {
            return "clones";                                   // built before the symbol existed: always cloned
        }
    }

    private static boolean loadFrom(Path lib) {
        try {
            if (!Files.isRegularFile(lib)) {
                description = "Java (" + lib + " does not exist)";
                return false;
            }
            NativeLibrary nl = NativeLibrary.getInstance(lib.toAbsolutePath().toString());
            String build = build(nl);
            if (X86Level.LEVELS.contains(build) && !X86Level.supported(build)) {
                description = "Java (" + lib + " is built for " + build + ", which this CPU does not run; it runs "
                        + X86Level.highest() + ")";
                return false;
            }
            Function abi = nl.getFunction("ttpipe_cpu_abi_version");
            int version = abi.invokeInt(new Object[0]);
            if (version != ABI_VERSION) {
                description = "Java (" + lib + " has ABI " + version + ", expected " + ABI_VERSION + ")";
                return false;
            }
            Native.register(CpuNative.class, nl);
            description = "native " + ttpipe_cpu_variant() + " (" + FILE + ")";
            loaded = true;
        } catch (UnsatisfiedLinkError | RuntimeException e) {
            description = "Java (" + lib + " did not load: " + e.getMessage() + ")";
            LOG.debug("native cpu kernels not available", e);
        }
        return loaded;
    }
}

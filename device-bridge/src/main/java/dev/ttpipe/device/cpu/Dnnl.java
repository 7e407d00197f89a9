package dev.ttpipe.device.cpu;

import com.sun.jna.Library;
import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;
import com.sun.jna.Pointer;
import dev.ttpipe.device.DeviceException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.file.Path;
import java.util.List;

/**
 * oneDNN (Intel's CPU deep-learning library) bound with JNA direct mapping, for its BLAS-like GEMMs:
 * {@code dnnl_sgemm} (fp32) and {@code dnnl_gemm_bf16bf16f32} (bf16 operands, fp32 accumulation and
 * result), row-major. The library comes from the {@code org.bytedeco:dnnl:linux-x86_64} jar,
 * {@code libdnnl.so.3} with the OpenMP runtime next to it, and the OpenCL ICD loader it links against
 * from {@code org.bytedeco:opencl} (no GPU is used); they are extracted once ({@link NativeBundle}) and
 * loaded by absolute path. Elsewhere nothing loads and the callers fall back to OpenBLAS.
 *
 * <p>oneDNN runs every call on the calling thread: {@code OMP_NUM_THREADS=1} is set in the process's
 * environment before its OpenMP runtime loads, and never changed. ttpipe splits a product into tiles
 * itself ({@link BlasGemm#tiles}), so the bits do not depend on a thread count.
 */
final class Dnnl {
    private static final Logger LOG = LoggerFactory.getLogger(Dnnl.class);
    private static final String DNNL = "org/bytedeco/dnnl/linux-x86_64/";
    private static final String OPENCL = "org/bytedeco/opencl/linux-x86_64/";

    private static Throwable failure;
    private static String loadedFrom;
    private static String version;
    private static boolean tried;

    private Dnnl() {
    }

    /** {@code dnnl_status_t dnnl_sgemm(char transa, char transb, dnnl_dim_t M, N, K, float alpha, const float *A, lda, ...)}. */
    static native int dnnl_sgemm(byte transA, byte transB, long m, long n, long k, float alpha, long a, long lda, long b,
                                 long ldb, float beta, long c, long ldc);

    /** As {@link #dnnl_sgemm} with A and B of bf16 (uint16) values; C fp32. */
    static native int dnnl_gemm_bf16bf16f32(byte transA, byte transB, long m, long n, long k, float alpha, long a, long lda,
                                            long b, long ldb, float beta, long c, long ldc);

    // The matmul primitive's C API (oneDNN 3.x), for DnnlMatmul. Handles are pointers, passed as long; an out
    // parameter is a long[1]; dnnl_dims_t is a long[] of up to 12.

    static native int dnnl_engine_create(long[] engine, int kind, long index);

    static native int dnnl_stream_create(long[] stream, long engine, int flags);

    static native int dnnl_stream_wait(long stream);

    static native int dnnl_memory_desc_create_with_strides(long[] md, int ndims, long[] dims, int dataType, long[] strides);

    static native int dnnl_memory_desc_destroy(long md);

    static native long dnnl_memory_desc_get_size(long md);

    static native int dnnl_primitive_attr_create(long[] attr);

    static native int dnnl_primitive_attr_destroy(long attr);

    static native int dnnl_primitive_attr_set_scratchpad_mode(long attr, int mode);

    static native int dnnl_primitive_attr_set_post_ops(long attr, long postOps);

    static native int dnnl_post_ops_create(long[] postOps);

    static native int dnnl_post_ops_destroy(long postOps);

    static native int dnnl_post_ops_append_sum(long postOps, float scale, int zeroPoint, int dataType);

    static native int dnnl_matmul_primitive_desc_create(long[] pd, long engine, long src, long weights, long bias, long dst,
                                                        long attr);

    static native int dnnl_primitive_desc_query(long pd, int what, int index, long[] result);

    static native long dnnl_primitive_desc_query_md(long pd, int what, int index);

    static native int dnnl_primitive_desc_destroy(long pd);

    static native int dnnl_primitive_create(long[] primitive, long pd);

    static native int dnnl_memory_create(long[] memory, long md, long engine, long handle);

    static native int dnnl_memory_set_data_handle(long memory, long handle);

    /** {@code args}: nargs {@code dnnl_exec_arg_t} (int arg, 4 bytes of padding, dnnl_memory_t memory). */
    static native int dnnl_primitive_execute(long primitive, long stream, int nargs, long args);

    /** {@code const dnnl_version_t *}: int major, minor, patch; const char *hash; unsigned cpu_runtime, gpu_runtime. */
    static native Pointer dnnl_version();

    /** {@code dnnl_cpu_isa_t}: the instruction set oneDNN's kernels use on this CPU. */
    static native int dnnl_get_effective_cpu_isa();

    private interface LibC extends Library {
        int setenv(String name, String value, int overwrite);
    }

    /** Loads the library once; true if the natives are bound. */
    static synchronized boolean load() {
        if (!tried) {
            tried = true;
            try {
                if (!NativeBundle.supportedPlatform()) throw new UnsupportedOperationException("oneDNN is bundled for linux x86_64 only");
                Path dir = NativeBundle.extract("dnnl", "META-INF/maven/org.bytedeco/dnnl/pom.properties",
                        List.of(OPENCL + "libOpenCL.so.1", DNNL + "libgomp.so.1", DNNL + "libdnnl.so.3"));
                if (dir == null) throw new UnsupportedOperationException("org.bytedeco:dnnl is not on the class path");
                // Before libgomp reads its environment: every oneDNN call on its caller's thread.
                Native.load("c", LibC.class).setenv("OMP_NUM_THREADS", "1", 1);
                NativeLibrary lib = NativeLibrary.getInstance(dir.resolve("libdnnl.so.3").toAbsolutePath().toString());
                Native.register(Dnnl.class, lib);
                Pointer v = dnnl_version();
                version = v.getInt(0) + "." + v.getInt(4) + "." + v.getInt(8);
                loadedFrom = dir.resolve("libdnnl.so.3").toString();
            } catch (Throwable t) {
                failure = t;
                LOG.debug("oneDNN not available", t);
            }
        }
        return failure == null;
    }

    /** Why {@link #load} failed, or null. */
    static synchronized Throwable failure() {
        return failure;
    }

    /** "oneDNN 3.3.4 (avx512_core_bf16) from PATH". */
    static synchronized String describe() {
        return "oneDNN " + version + " (" + isa() + ") from " + loadedFrom;
    }

    /** The instruction set of oneDNN's kernels here, by its dnnl_cpu_isa_t value (oneDNN 3.3). */
    static String isa() {
        int isa = dnnl_get_effective_cpu_isa();
        return switch (isa) {
            case 0x1 -> "sse41";
            case 0x3 -> "avx";
            case 0x7 -> "avx2";
            case 0xf -> "avx2_vnni";
            case 0x1f -> "avx2_vnni_2";
            case 0x27 -> "avx512_core";
            case 0x67 -> "avx512_core_vnni";
            case 0xe7 -> "avx512_core_bf16";
            case 0x1ef -> "avx512_core_fp16";
            case 0xfef -> "avx512_core_amx";
            case 0x1fef -> "avx512_core_amx_fp16";
            default -> "isa 0x" + Integer.toHexString(isa);
        };
    }

    /** {@link BlasGemm.TileCall} of {@code dnnl_sgemm}. */
    static void sgemm(boolean transA, boolean transB, int m, int n, int k, float alpha, long a, int lda, long b, int ldb,
                      float beta, long c, int ldc) {
        check(dnnl_sgemm(op(transA), op(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), "dnnl_sgemm");
    }

    /** {@link BlasGemm.TileCall} of {@code dnnl_gemm_bf16bf16f32}: A and B are bf16. */
    static void gemmBf16(boolean transA, boolean transB, int m, int n, int k, float alpha, long a, int lda, long b, int ldb,
                         float beta, long c, int ldc) {
        check(dnnl_gemm_bf16bf16f32(op(transA), op(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc),
                "dnnl_gemm_bf16bf16f32");
    }

    private static byte op(boolean trans) {
        return (byte) (trans ? 'T' : 'N');
    }

    /** Throws when a oneDNN call did not succeed ({@code dnnl_success} is 0). */
    static void check(int status, String call) {
        if (status != 0) {
            throw new DeviceException("oneDNN " + call + " failed with status " + status
                    + (status == 3 ? " (unimplemented on this CPU)" : status == 2 ? " (invalid arguments)"
                    : status == 1 ? " (out of memory)" : ""));
        }
    }
}

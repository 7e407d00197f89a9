package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DeviceException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.Locale;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.UnaryOperator;

/**
 * Picks the fp32 matmul kernel: {@code blas} (OpenBLAS, fails if it does not load), {@code dnnl}
 * (oneDNN's sgemm, fails if it does not load), {@code java} (pure JVM), or {@code auto}, the default, unless
 * {@code -Dttpipe.blas} or {@code TTPIPE_BLAS} names one of those: oneDNN, else OpenBLAS where oneDNN does not
 * load, else the JVM kernel. Under {@code auto}, a {@link MatmulTable} named by {@code -Dttpipe.matmul.table} or
 * {@code TTPIPE_MATMUL_TABLE} sends each shape it lists to the engine it names ({@link PerShapeGemm}). Logs the
 * kernel in use once per process and kind (INFO).
 *
 * <p>Why oneDNN first: on every CPU measured (docs/measurements), a training step ran faster on its
 * {@code dnnl_sgemm} than on the bundled OpenBLAS (it lost only on some small attention tiles of a Zen 4), by 2x
 * where the environment holds OpenBLAS to AVX2 kernels ({@code OPENBLAS_CORETYPE=Haswell}) on an AVX-512 CPU.
 * The choice depends on what loads, never on timing, so two processes on one machine pick the same engine
 * whatever the load.
 */
final class GemmChoice {
    private static final Logger LOG = LoggerFactory.getLogger(GemmChoice.class);
    private static final Set<String> LOGGED = ConcurrentHashMap.newKeySet();

    private GemmChoice() {
    }

    /**
     * The kernel asked for by {@code -Dttpipe.blas}, else {@code TTPIPE_BLAS} as {@code getenv} reads it (a
     * mesh's {@link dev.ttpipe.device.MeshOptions#getenv}: the job's global_env over the process's): auto, blas or java.
     */
    static String requested(UnaryOperator<String> getenv) {
        String p = System.getProperty("ttpipe.blas");
        if (p == null || p.isBlank()) p = getenv.apply("TTPIPE_BLAS");
        return p == null || p.isBlank() ? "auto" : p.trim().toLowerCase(Locale.ROOT);
    }

    static Gemm choose(String kind, int threads, Parallel parallel) {
        return choose(kind, threads, parallel, System::getenv);
    }

    static Gemm choose(String kind, int threads, Parallel parallel, UnaryOperator<String> getenv) {
        String k = kind == null ? "auto" : kind.toLowerCase(Locale.ROOT);
        String from = "";                                       // where an unknown name came from, for the error
        String tableFile = MatmulTable.requested(getenv);
        if (k.equals("auto")) {
            k = requested(getenv);
            from = " (ttpipe.blas / TTPIPE_BLAS)";
            if (tableFile != null && !k.equals("auto")) {
                throw new DeviceException("matmul table " + tableFile + " (ttpipe.matmul.table / TTPIPE_MATMUL_TABLE) and kernel '"
                        + k + "' (ttpipe.blas / TTPIPE_BLAS) both given, expected one of them: the table picks the kernel per shape");
            }
        } else {
            tableFile = null;                                   // a kernel asked for by name (bench matmul --kernel) runs alone
        }
        Gemm g;
        switch (k) {
            case "java":
                g = new JavaGemm(parallel);
                break;
            case "blas":
            case "openblas":
                g = BlasGemm.tryLoad(parallel);
                if (g == null) {
                    throw new DeviceException("OpenBLAS does not load: " + OpenBlas.failure());
                }
                break;
            case "dnnl":
            case "onednn":
                g = DnnlGemm.tryLoad(parallel);
                if (g == null) throw new DeviceException("oneDNN does not load: " + Dnnl.failure());
                break;
            case "auto":
                DnnlGemm dnnl = DnnlGemm.tryLoad(parallel);
                BlasGemm blas = dnnl == null || tableFile != null ? BlasGemm.tryLoad(parallel) : null;
                g = dnnl != null ? dnnl : blas;
                if (g == null) {
                    if (LOGGED.add("fallback")) {
                        LOG.info("neither oneDNN ({}) nor OpenBLAS ({}) loads; using the pure-JVM matmul",
                                String.valueOf(Dnnl.failure()), String.valueOf(OpenBlas.failure()));
                    }
                    g = new JavaGemm(parallel);
                }
                if (tableFile != null) g = new PerShapeGemm(g, blas, dnnl, MatmulTable.read(java.nio.file.Path.of(tableFile)));
                break;
            default:
                throw new DeviceException("matmul kernel '" + k + "'" + from + " unknown, expected one of "
                        + String.join(", ", CpuKernels.FP32_ENGINES));
        }
        if (LOGGED.add(g.kind())) LOG.info("cpu matmul kernel: {}", g.describe());
        CpuKernels.chose(g.describe());
        return g;
    }
}

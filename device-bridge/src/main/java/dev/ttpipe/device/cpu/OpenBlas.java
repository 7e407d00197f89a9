package dev.ttpipe.device.cpu;

import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.file.Path;
import java.util.List;

/**
 * OpenBLAS bound with JNA direct mapping. The library comes from the
 * {@code org.bytedeco:openblas:linux-x86_64} jar: {@code libopenblas.so.0} and the runtime
 * libraries next to it (it has RUNPATH $ORIGIN) are extracted once ({@link NativeBundle}), then
 * loaded by absolute path. Elsewhere the system's
 * {@code libopenblas} is tried. Pointers are passed as {@code long} addresses, so a call
 * allocates nothing. OpenBLAS runs single-threaded (set once here, never changed): ttpipe splits the work
 * itself ({@link BlasGemm}), so the bits do not depend on a thread count.
 */
final class OpenBlas {
    private static final Logger LOG = LoggerFactory.getLogger(OpenBlas.class);
    private static final String RESOURCE_DIR = "org/bytedeco/openblas/linux-x86_64/";
    private static final List<String> FILES = List.of("libgfortran.so.5", "libquadmath.so.0", "libgcc_s.so.1",
            "libopenblas.so.0");

    static final int ROW_MAJOR = 101;
    static final int NO_TRANS = 111;
    static final int TRANS = 112;

    private static Throwable failure;
    private static String loadedFrom;
    private static boolean tried;
    private static boolean bundled;

    private OpenBlas() {
    }

    static native void cblas_sgemm(int order, int transA, int transB, int m, int n, int k, float alpha, long a, int lda,
                                   long b, int ldb, float beta, long c, int ldc);

    static native void openblas_set_num_threads(int threads);

    static native int openblas_get_num_threads();

    static native String openblas_get_config();

    static native String openblas_get_corename();

    /** Loads the library once; true if the natives are bound. */
    static synchronized boolean load() {
        if (!tried) {
            tried = true;
            try {
                NativeLibrary lib = open();
                Native.register(OpenBlas.class, lib);
                openblas_set_num_threads(1);   // every call on its caller's thread: BlasGemm does the threading
                loadedFrom = lib.getFile() == null ? lib.getName() : lib.getFile().getPath();
            } catch (Throwable t) {
                failure = t;
                LOG.debug("OpenBLAS not available", t);
            }
        }
        return failure == null;
    }

    /** Why {@link #load} failed, or null. */
    static synchronized Throwable failure() {
        return failure;
    }

    static synchronized String loadedFrom() {
        return loadedFrom;
    }

    /** True when the library loaded is the one bundled in the org.bytedeco jar (extracted under ttpipe-native). */
    static synchronized boolean isBundled() {
        return bundled;
    }

    private static NativeLibrary open() throws IOException {
        Path dir = NativeBundle.supportedPlatform() ? NativeBundle.extract("openblas",
                "META-INF/maven/org.bytedeco/openblas/pom.properties", FILES.stream().map(f -> RESOURCE_DIR + f).toList()) : null;
        if (dir == null) return NativeLibrary.getInstance("openblas");
        NativeLibrary lib = NativeLibrary.getInstance(dir.resolve("libopenblas.so.0").toAbsolutePath().toString());
        bundled = true;
        return lib;
    }
}

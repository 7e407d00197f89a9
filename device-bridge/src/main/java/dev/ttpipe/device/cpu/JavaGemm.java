package dev.ttpipe.device.cpu;

import java.nio.FloatBuffer;
import java.util.Arrays;

/**
 * The pure-JVM {@link Gemm}, used when OpenBLAS does not load (or is switched off): C is cut into
 * tiles of {@value #MC} x {@value #NC} computed in parallel; for each tile, panels of op(A) and
 * op(B) are packed ({@value #KC} deep) into per-thread arrays and multiplied with an
 * axpy-form inner loop the JIT vectorises. No allocation per call once a thread has its scratch.
 */
final class JavaGemm implements Gemm {
    static final int MC = 64;
    static final int KC = 256;
    static final int NC = 256;

    /**
     * Per thread: packed A [MC * KC], then MC accumulator rows [NC], then KC packed rows of B [NC].
     * Rows are separate arrays indexed alike ({@code c[j] += a * b[j]}) so that C2 vectorises.
     */
    private static final ThreadLocal<float[][]> SCRATCH = ThreadLocal.withInitial(() -> {
        float[][] s = new float[1 + MC + KC][];
        s[0] = new float[MC * KC];
        for (int i = 1; i < s.length; i++) s[i] = new float[NC];
        return s;
    });
    private static final int C_ROWS = 1;
    private static final int B_ROWS = 1 + MC;

    private final Parallel parallel;

    JavaGemm(Parallel parallel) {
        this.parallel = parallel;
    }

    @Override
    public String kind() {
        return "java";
    }

    @Override
    public String describe() {
        return "pure-JVM blocked matmul (" + MC + "x" + NC + " tiles, k panels of " + KC + ", "
                + parallel.threadsInWords() + ")";
    }

    @Override
    public void sgemm(boolean transA, boolean transB, int m, int n, int k, float alpha,
                      NativeBuffer a, int aOff, int lda, NativeBuffer b, int bOff, int ldb,
                      float beta, NativeBuffer c, int cOff, int ldc) {
        if (!Gemm.check(transA, transB, m, n, k, a, aOff, lda, b, bOff, ldb, c, cOff, ldc)) return;
        int tilesM = (m + MC - 1) / MC;
        int tilesN = (n + NC - 1) / NC;
        FloatBuffer af = a.floats;
        FloatBuffer bf = b.floats;
        FloatBuffer cf = c.floats;
        parallel.range(tilesM * tilesN, 1, (lo, hi) -> {
            for (int t = lo; t < hi; t++) {
                int i0 = (t / tilesN) * MC;
                int j0 = (t % tilesN) * NC;
                tile(transA, transB, Math.min(MC, m - i0), Math.min(NC, n - j0), k, alpha, af, aOff, lda, bf, bOff, ldb,
                        beta, cf, cOff, ldc, i0, j0);
            }
        });
    }

    private static void tile(boolean transA, boolean transB, int mc, int nc, int k, float alpha,
                             FloatBuffer a, int aOff, int lda, FloatBuffer b, int bOff, int ldb,
                             float beta, FloatBuffer c, int cOff, int ldc, int i0, int j0) {
        float[][] s = SCRATCH.get();
        float[] ap = s[0];
        for (int i = 0; i < mc; i++) Arrays.fill(s[C_ROWS + i], 0, nc, 0f);
        for (int k0 = 0; k0 < k; k0 += KC) {
            int kc = Math.min(KC, k - k0);
            // ap [mc, kc] = op(A)[i0.., k0..]
            for (int i = 0; i < mc; i++) {
                for (int kk = 0; kk < kc; kk++) {
                    int idx = transA ? aOff + (k0 + kk) * lda + i0 + i : aOff + (i0 + i) * lda + k0 + kk;
                    ap[i * kc + kk] = a.get(idx);
                }
            }
            // B rows [kc][nc] = op(B)[k0.., j0..]
            for (int kk = 0; kk < kc; kk++) {
                float[] brow = s[B_ROWS + kk];
                for (int j = 0; j < nc; j++) {
                    int idx = transB ? bOff + (j0 + j) * ldb + k0 + kk : bOff + (k0 + kk) * ldb + j0 + j;
                    brow[j] = b.get(idx);
                }
            }
            int i = 0;
            for (; i + 4 <= mc; i += 4) {
                // four rows of C share each loaded row of B
                float[] c0 = s[C_ROWS + i], c1 = s[C_ROWS + i + 1], c2 = s[C_ROWS + i + 2], c3 = s[C_ROWS + i + 3];
                for (int kk = 0; kk < kc; kk++) {
                    float a0 = ap[i * kc + kk], a1 = ap[(i + 1) * kc + kk];
                    float a2 = ap[(i + 2) * kc + kk], a3 = ap[(i + 3) * kc + kk];
                    float[] brow = s[B_ROWS + kk];
                    for (int j = 0; j < nc; j++) {
                        float bv = brow[j];
                        c0[j] += a0 * bv;
                        c1[j] += a1 * bv;
                        c2[j] += a2 * bv;
                        c3[j] += a3 * bv;
                    }
                }
            }
            for (; i < mc; i++) {
                float[] c0 = s[C_ROWS + i];
                for (int kk = 0; kk < kc; kk++) {
                    float av = ap[i * kc + kk];
                    float[] brow = s[B_ROWS + kk];
                    for (int j = 0; j < nc; j++) c0[j] += av * brow[j];
                }
            }
        }
        for (int i = 0; i < mc; i++) {
            int row = cOff + (i0 + i) * ldc + j0;
            for (int j = 0; j < nc; j++) {
                float v = alpha * s[C_ROWS + i][j];
                c.put(row + j, beta == 0f ? v : v + beta * c.get(row + j));
            }
        }
    }
}

package dev.ttpipe.device.cpu;

import java.nio.FloatBuffer;
import java.nio.IntBuffer;

/**
 * Embedding lookup and its scatter-add backward on one device's pieces. The table piece holds
 * logical rows {@code [rowOffset, rowOffset + localRows)} (all of them unless vocab-sharded); ids
 * outside that range give zero rows (vocab-parallel: another device holds them). Ids were
 * range-checked against the logical vocabulary before.
 */
final class Embedding {
    private Embedding() {
    }

    static void forward(Parallel par, FloatBuffer out, IntBuffer ids, FloatBuffer table, int n, int d, int rowOffset,
                        int localRows) {
        par.range(n, Math.max(1, Elementwise.GRAIN / Math.max(1, d)), (lo, hi) -> {
            for (int r = lo; r < hi; r++) {
                int row = ids.get(r) - rowOffset;
                int o = r * d;
                if (row >= 0 && row < localRows) {
                    out.put(o, table, row * d, d);
                } else {
                    for (int j = 0; j < d; j++) out.put(o + j, 0f);
                }
            }
        });
    }

    /** dTable[id] (+)= dOut[r] for every r; parallel over columns, so rows with equal ids never race. */
    static void backward(Parallel par, IntBuffer ids, FloatBuffer dOut, FloatBuffer dTable, int n, int d, int rowOffset,
                         int localRows, boolean accumulate) {
        par.range(d, 32, (lo, hi) -> {
            if (!accumulate) {
                for (int row = 0; row < localRows; row++) {
                    for (int j = lo; j < hi; j++) dTable.put(row * d + j, 0f);
                }
            }
            for (int r = 0; r < n; r++) {
                int row = ids.get(r) - rowOffset;
                if (row < 0 || row >= localRows) continue;
                int t = row * d;
                int o = r * d;
                for (int j = lo; j < hi; j++) dTable.put(t + j, dTable.get(t + j) + dOut.get(o + j));
            }
        });
    }
}

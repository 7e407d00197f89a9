package dev.ttpipe.device.cpu;

import java.nio.FloatBuffer;

/**
 * Collectives over one group of emulated devices (the devices along one mesh axis), moving data
 * between their pieces for real. Element i of each array argument belongs to the group's device
 * at position i along the axis. Sums run in a fixed order (position 0 first) and are computed
 * once, then copied, so every replica is bit-identical.
 */
final class Collectives {
    private Collectives() {
    }

    /**
     * Concatenation along a dim: each piece is [outer, inner] (inner = the dim and everything after
     * it, in bytes); every output is [outer, n * inner] with piece j at column block j.
     */
    static void allGather(NativeBuffer[] outs, NativeBuffer[] xs, int outer, int innerBytes) {
        int n = xs.length;
        for (NativeBuffer out : outs) {
            for (int j = 0; j < n; j++) {
                for (int o = 0; o < outer; o++) {
                    out.bytes.put((o * n + j) * innerBytes, xs[j].bytes, o * innerBytes, innerBytes);
                }
            }
        }
    }

    /**
     * Sum, then slice c to device c: inputs are [outer, n * inner] addends, output c is
     * [outer, inner] = sum over j of block c of input j.
     */
    static void reduceScatter(Parallel par, FloatBuffer[] outs, FloatBuffer[] xs, int outer, int inner) {
        int n = xs.length;
        for (int c = 0; c < n; c++) {
            FloatBuffer out = outs[c];
            int block = c * inner;
            par.range(outer * inner, Elementwise.GRAIN, (lo, hi) -> {
                for (int e = lo; e < hi; e++) {
                    int o = e / inner;
                    int i = e - o * inner;
                    int src = o * n * inner + block + i;
                    float s = xs[0].get(src);
                    for (int j = 1; j < n; j++) s += xs[j].get(src);
                    out.put(e, s);
                }
            });
        }
    }

    /** Every output = (sum over j of xs[j]) * post; outs[j] may be xs[j] (in place). */
    static void allReduce(Parallel par, FloatBuffer[] outs, FloatBuffer[] xs, int len, float post) {
        int n = xs.length;
        FloatBuffer first = outs[0];
        par.range(len, Elementwise.GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) {
                float s = xs[0].get(i);
                for (int j = 1; j < n; j++) s += xs[j].get(i);
                first.put(i, post == 1f ? s : s * post);
            }
        });
        for (int j = 1; j < n; j++) outs[j].put(0, first, 0, len);
    }
}

package dev.ttpipe.device.spi;

import dev.ttpipe.device.Shape;

/**
 * The sizes of a (batched) matmul {@code op(a) @ op(b)}: {@code batch} independent [m, k] x [k, n]
 * products; {@code batchedB} says whether b has one matrix per batch entry or one shared [k, n].
 * Computed from shapes as stored (before the transposes); apply it to local shapes to get one
 * device's work.
 */
public record MatmulDims(int batch, int m, int n, int k, boolean batchedB) {
    public static MatmulDims of(Shape a, boolean transposeA, Shape b, boolean transposeB) {
        int ra = a.rank();
        int rb = b.rank();
        int m = transposeA ? a.dim(ra - 1) : a.dim(ra - 2);
        int k = transposeA ? a.dim(ra - 2) : a.dim(ra - 1);
        int n = transposeB ? b.dim(rb - 2) : b.dim(rb - 1);
        long batch = 1;
        for (int i = 0; i < ra - 2; i++) batch *= a.dim(i);
        return new MatmulDims((int) batch, m, n, k, rb > 2);
    }

    /** Multiply-adds counted twice: {@code 2 * batch * m * n * k}. */
    public double flops() {
        return 2.0 * batch * m * n * k;
    }
}

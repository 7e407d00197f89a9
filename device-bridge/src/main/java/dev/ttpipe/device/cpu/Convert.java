package dev.ttpipe.device.cpu;

import dev.ttpipe.device.BFloat16;
import dev.ttpipe.device.DType;

/**
 * Copies n elements between pieces, converting dtypes: fp32 to bf16 rounds to nearest even,
 * ints to floats by value, floats to ints by truncation toward zero. Same dtype: a byte copy.
 */
final class Convert {
    private Convert() {
    }

    static void copy(Parallel par, NativeBuffer dst, DType dstType, NativeBuffer src, DType srcType, int n) {
        if (dstType == srcType) {
            if (dst != src) dst.bytes.put(0, src.bytes, 0, n * dstType.bytes());
            return;
        }
        if (srcType == DType.BF16 && dstType == DType.FP32) {
            bf16ToFloat(par, dst, src, n);
        } else if (srcType == DType.FP32 && dstType == DType.BF16) {
            floatToBf16(par, dst, src, n);
        } else {
            par.range(n, Elementwise.GRAIN, (lo, hi) -> {
                for (int i = lo; i < hi; i++) write(dst, dstType, i, read(src, srcType, i));
            });
        }
    }

    static float read(NativeBuffer b, DType type, int i) {
        switch (type) {
            case FP32:
                return b.floats.get(i);
            case BF16:
                return BFloat16.toFloat(b.shorts.get(i));
            default:
                return b.ints.get(i);
        }
    }

    static void write(NativeBuffer b, DType type, int i, float v) {
        switch (type) {
            case FP32:
                b.floats.put(i, v);
                break;
            case BF16:
                b.shorts.put(i, BFloat16.fromFloat(v));
                break;
            default:
                b.ints.put(i, (int) v);
        }
    }

    static void bf16ToFloat(Parallel par, NativeBuffer dst, NativeBuffer src, int n) {
        par.range(n, Elementwise.GRAIN, (lo, hi) -> bf16ToFloat(dst, lo, src, lo, hi - lo));
    }

    static void floatToBf16(Parallel par, NativeBuffer dst, NativeBuffer src, int n) {
        par.range(n, Elementwise.GRAIN, (lo, hi) -> floatToBf16(dst, lo, src, lo, hi - lo));
    }

    /** {@code n} bf16 values from element {@code srcOff} of src widened into dst from element {@code dstOff}. One thread. */
    static void bf16ToFloat(NativeBuffer dst, int dstOff, NativeBuffer src, int srcOff, int n) {
        if (n <= 0) return;
        if (CpuNative.active()) {
            long o = bounded(dst, 4L * (dstOff + n)), x = bounded(src, 2L * (srcOff + n));
            CpuNative.ttpipe_cpu_bf16_to_float(o + 4L * dstOff, x + 2L * srcOff, n);
            return;
        }
        for (int i = 0; i < n; i++) dst.floats.put(dstOff + i, BFloat16.toFloat(src.shorts.get(srcOff + i)));
    }

    /** {@code n} fp32 values from element {@code srcOff} of src rounded into dst (bf16) from element {@code dstOff}. One thread. */
    static void floatToBf16(NativeBuffer dst, int dstOff, NativeBuffer src, int srcOff, int n) {
        if (n <= 0) return;
        if (CpuNative.active()) {
            long o = bounded(dst, 2L * (dstOff + n)), x = bounded(src, 4L * (srcOff + n));
            CpuNative.ttpipe_cpu_float_to_bf16(o + 2L * dstOff, x + 4L * srcOff, n);
            return;
        }
        for (int i = 0; i < n; i++) dst.shorts.put(dstOff + i, BFloat16.fromFloat(src.floats.get(srcOff + i)));
    }

    /** fp32 to fp32 rounded to the nearest bf16 value (ties to even). */
    static void roundToBf16(Parallel par, NativeBuffer dst, NativeBuffer src, int n) {
        if (CpuNative.active()) {
            long o = bounded(dst, 4L * n), x = bounded(src, 4L * n);
            par.range(n, Elementwise.GRAIN, (lo, hi) -> CpuNative.ttpipe_cpu_round_to_bf16(o + 4L * lo, x + 4L * lo, hi - lo));
            return;
        }
        par.range(n, Elementwise.GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) dst.floats.put(i, BFloat16.round(src.floats.get(i)));
        });
    }

    /**
     * Rows x cols of fp32 sums at element {@code off} of {@code c} (row stride {@code ld}), plus {@code bias[biasOff + j]}
     * when bias is not null, rounded once to bf16 into the same elements of {@code out}. One thread: a GEMM's tile
     * epilogue.
     */
    static void sumsToBf16(NativeBuffer out, NativeBuffer c, int off, int ld, int rows, int cols, NativeBuffer bias,
                           int biasOff) {
        tileToBf16(out, off, ld, c, off, ld, rows, cols, bias, biasOff);
    }

    /**
     * {@link #sumsToBf16} between two layouts: the sums at element {@code cOff} of {@code c} (row stride {@code ldc}) go to
     * element {@code outOff} of {@code out} (row stride {@code ldo}). One thread.
     */
    static void tileToBf16(NativeBuffer out, int outOff, int ldo, NativeBuffer c, int cOff, int ldc, int rows, int cols,
                           NativeBuffer bias, int biasOff) {
        if (rows <= 0 || cols <= 0) return;
        if (CpuNative.active()) {
            long o = bounded(out, 2 * ((long) outOff + (long) (rows - 1) * ldo + cols));
            long x = bounded(c, 4 * ((long) cOff + (long) (rows - 1) * ldc + cols));
            long b = bias == null ? 0 : bounded(bias, 4L * (biasOff + cols)) + 4L * biasOff;
            CpuNative.ttpipe_cpu_tile_to_bf16(o + 2L * outOff, ldo, x + 4L * cOff, ldc, rows, cols, b);
            return;
        }
        for (int i = 0; i < rows; i++) {
            int r = cOff + i * ldc, w = outOff + i * ldo;
            for (int j = 0; j < cols; j++) {
                float v = bias == null ? c.floats.get(r + j) : c.floats.get(r + j) + bias.floats.get(biasOff + j);
                out.shorts.put(w + j, BFloat16.fromFloat(v));
            }
        }
    }

    /** The buffer's address after checking it holds {@code bytes}: the native kernels do not check bounds. */
    private static long bounded(NativeBuffer b, long bytes) {
        if (bytes < 0 || bytes > b.capacity) {
            throw new IndexOutOfBoundsException(bytes + " bytes in a buffer of " + b.capacity);
        }
        return b.address;
    }
}

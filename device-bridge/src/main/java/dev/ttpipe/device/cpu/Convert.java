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
        par.range(n, Elementwise.GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) write(dst, dstType, i, read(src, srcType, i));
        });
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
        par.range(n, Elementwise.GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) dst.floats.put(i, BFloat16.toFloat(src.shorts.get(i)));
        });
    }

    static void floatToBf16(Parallel par, NativeBuffer dst, NativeBuffer src, int n) {
        par.range(n, Elementwise.GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) dst.shorts.put(i, BFloat16.fromFloat(src.floats.get(i)));
        });
    }

    /** fp32 to fp32 rounded to the nearest bf16 value (ties to even). */
    static void roundToBf16(Parallel par, NativeBuffer dst, NativeBuffer src, int n) {
        par.range(n, Elementwise.GRAIN, (lo, hi) -> {
            for (int i = lo; i < hi; i++) dst.floats.put(i, BFloat16.round(src.floats.get(i)));
        });
    }
}

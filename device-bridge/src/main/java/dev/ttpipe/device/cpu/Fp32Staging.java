package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DType;

import java.util.ArrayList;
import java.util.List;

/**
 * Gives kernels fp32 pieces whatever the storage dtype: an FP32 piece is used directly; a BF16
 * piece is converted into a scratch buffer from the device's cache (and, when written, converted
 * back by {@link #finish}). One per submesh: ops on a submesh are issued by one thread at a time.
 * The all-FP32 path records nothing and allocates nothing. Also gives bf16 matmul operands
 * ({@link #bf16Operand}).
 */
final class Fp32Staging {
    private record Pending(NativeBuffer scratch, NativeAllocator owner, CpuTensor target, int device, int n) {
    }

    private final Parallel parallel;
    private final List<Pending> pending = new ArrayList<>();

    Fp32Staging(Parallel parallel) {
        this.parallel = parallel;
    }

    /** Device {@code d}'s piece of {@code t} as fp32, to read. */
    NativeBuffer read(CpuTensor t, int d) {
        if (t.dtype() == DType.FP32) return t.piece(d);
        NativeBuffer s = scratch(t, d, null);
        Convert.bf16ToFloat(parallel, s, t.piece(d), (int) t.localNumel());
        return s;
    }

    /** Device {@code d}'s piece of {@code t} as fp32, to overwrite entirely (contents undefined). */
    NativeBuffer write(CpuTensor t, int d) {
        if (t.dtype() == DType.FP32) return t.piece(d);
        return scratch(t, d, t);
    }

    /** Device {@code d}'s piece of {@code t} as fp32, to update in place. */
    NativeBuffer update(CpuTensor t, int d) {
        if (t.dtype() == DType.FP32) return t.piece(d);
        NativeBuffer s = scratch(t, d, t);
        Convert.bf16ToFloat(parallel, s, t.piece(d), (int) t.localNumel());
        return s;
    }

    /**
     * Device {@code d}'s piece of {@code t} as a bf16 matmul operand ({@link Bf16Gemm}), to read:
     * {@code packed}, as bf16 (a BF16 piece directly, an FP32 one rounded into scratch); otherwise as
     * fp32 holding bf16 values (a BF16 piece widened, an FP32 one rounded to nearest even).
     */
    NativeBuffer bf16Operand(CpuTensor t, int d, boolean packed) {
        int n = (int) t.localNumel();
        if (packed) {
            if (t.dtype() == DType.BF16) return t.piece(d);
            NativeBuffer s = scratch(t, d, null, 2L * n);
            Convert.floatToBf16(parallel, s, t.piece(d), n);
            return s;
        }
        if (t.dtype() == DType.BF16) return read(t, d);
        NativeBuffer s = scratch(t, d, null, 4L * n);
        Convert.roundToBf16(parallel, s, t.piece(d), n);
        return s;
    }

    /** Converts written scratch back into its tensor and returns all scratch to the caches. */
    void finish() {
        if (pending.isEmpty()) return;
        try {
            for (Pending p : pending) {
                if (p.target() != null && !p.target().isClosed()) {
                    Convert.floatToBf16(parallel, p.target().piece(p.device()), p.scratch(), p.n());
                }
            }
        } finally {
            for (Pending p : pending) p.owner().give(p.scratch());
            pending.clear();
        }
    }

    private NativeBuffer scratch(CpuTensor t, int d, CpuTensor target) {
        if (t.dtype() != DType.BF16) throw new IllegalStateException(t.dtype() + " tensor staged as fp32");
        return scratch(t, d, target, 4L * t.localNumel());
    }

    private NativeBuffer scratch(CpuTensor t, int d, CpuTensor target, long bytes) {
        NativeAllocator a = t.device(d).allocator();
        int n = (int) t.localNumel();
        NativeBuffer s = a.take(bytes);
        pending.add(new Pending(s, a, target, d, n));
        return s;
    }
}

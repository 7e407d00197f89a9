package dev.ttpipe.transport;

import dev.ttpipe.device.BFloat16;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.spi.LocalPieces;
import dev.ttpipe.device.spi.LocalPiecesOps;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * A tensor's per-device pieces as raw little-endian element bytes, and back: through the backend's
 * {@link LocalPieces} / {@link LocalPiecesOps} where it offers them (the cpu backend: a view of its
 * native memory out, one memcpy per device in), else through fp32 host arrays
 * ({@code toHostLocal} / {@code fromHostLocal}), which costs a conversion per element and, for INT32,
 * is exact only up to 2^24.
 */
final class TensorBytes {
    private TensorBytes() {
    }

    /** A read-only view of device {@code d}'s piece (position 0, limit its length), or null if the backend has none. */
    static ByteBuffer hostView(Tensor t, int d) {
        return t instanceof LocalPieces lp ? lp.hostView(d) : null;
    }

    /** Copies device {@code d}'s piece into {@code dst} at its position (which advances); little-endian elements. */
    static void copyPiece(Tensor t, int d, ByteBuffer dst) {
        if (t instanceof LocalPieces lp) {
            lp.copyLocalTo(d, dst);
            return;
        }
        float[] values = t.toHostLocal(d);
        ByteBuffer le = dst.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        switch (t.dtype()) {
            case FP32 -> {
                for (float v : values) le.putFloat(v);
            }
            case BF16 -> {
                for (float v : values) le.putShort(BFloat16.fromFloat(v));
            }
            case INT32 -> {
                for (float v : values) le.putInt((int) v);
            }
        }
        dst.position(le.position());
    }

    /** A tensor on {@code dst} from pieces back to back in {@code src} (position to limit, left unchanged). */
    static Tensor toTensor(Submesh dst, ByteBuffer src, Shape shape, Layout layout, DType dtype) {
        Ops ops = dst.ops();
        if (ops instanceof LocalPiecesOps raw) return raw.fromLocalBytes(src, shape, layout, dtype);
        int n = dst.shape().size();
        int pieceBytes = src.remaining() / Math.max(1, n);
        int elements = pieceBytes / dtype.bytes();
        ByteBuffer le = src.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        float[][] pieces = new float[n][elements];
        for (int d = 0; d < n; d++) {
            for (int i = 0; i < elements; i++) {
                pieces[d][i] = switch (dtype) {
                    case FP32 -> le.getFloat();
                    case BF16 -> BFloat16.toFloat(le.getShort());
                    case INT32 -> le.getInt();
                };
            }
        }
        if (dtype != DType.INT32) return ops.fromHostLocal(pieces, shape, layout, dtype);
        try (Tensor fp32 = ops.fromHostLocal(pieces, shape, layout, DType.FP32)) {
            return ops.typecast(fp32, DType.INT32);
        }
    }
}

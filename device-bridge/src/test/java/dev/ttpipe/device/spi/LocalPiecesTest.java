package dev.ttpipe.device.spi;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Placement;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Raw per-device bytes out of a tensor and back onto another submesh: the byte transports' path. */
class LocalPiecesTest {
    private static MeshDevice open(String backend) {
        return Backends.open(backend, new MeshShape(1, 4), MeshOptions.defaults().withMemoryPerDevice(64L << 20));
    }

    private static float[] ramp(int n) {
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = i * 0.25f - 3;
        return x;
    }

    private static ByteBuffer bytesOf(Tensor t) {
        int n = t.submesh().shape().size();
        ByteBuffer all = ByteBuffer.allocateDirect((int) t.bytesPerDevice() * n).order(ByteOrder.nativeOrder());
        for (int d = 0; d < n; d++) ((LocalPieces) t).copyLocalTo(d, all);
        return all.flip();
    }

    @Test
    void shardedFp32PiecesRoundTripThroughBytesOntoAnotherSubmesh() {
        try (MeshDevice mesh = open("cpu")) {
            List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 2));
            Tensor x = subs.get(0).ops().fromHost(ramp(24), Shape.of(4, 6), Layout.shard(1, 1), DType.FP32);
            ByteBuffer bytes = bytesOf(x);
            assertEquals(2 * 4 * 3 * 4, bytes.remaining());
            assertEquals(x.toHostLocal(1)[2], bytes.getFloat(4 * 3 * 4 + 2 * 4));
            Tensor y = ((LocalPiecesOps) subs.get(1).ops()).fromLocalBytes(bytes, x.shape(), x.layout(), x.dtype());
            assertEquals(0, bytes.position(), "src position untouched");
            assertEquals(subs.get(1), y.submesh());
            assertEquals(x.layout(), y.layout());
            assertArrayEquals(x.toHost(), y.toHost());
            x.close();
            y.close();
        }
    }

    @Test
    void hostViewIsThePieceItselfReadOnly() {
        try (MeshDevice mesh = open("cpu")) {
            Tensor x = mesh.asSubmesh().ops().fromHost(ramp(8), Shape.of(8), Layout.shard(0, 1), DType.FP32);
            ByteBuffer v = ((LocalPieces) x).hostView(3);
            assertTrue(v.isReadOnly() && v.isDirect());
            assertEquals(8, v.remaining());
            assertEquals(x.toHostLocal(3)[1], v.getFloat(4));
            x.close();
        }
    }

    @Test
    void allocateLocalIsFilledInPlaceThroughWritableViews() {
        try (MeshDevice mesh = open("cpu")) {
            Submesh s = mesh.createSubmeshes(new MeshShape(1, 2)).get(1);
            Tensor t = ((LocalPiecesOps) s.ops()).allocateLocal(Shape.of(2, 3), Layout.shard(0, 1), DType.FP32);
            assertEquals(3 * 4, s.maxInUse(), "charged like any tensor");
            for (int d = 0; d < 2; d++) {
                ByteBuffer v = ((LocalPieces) t).writableView(d);
                assertTrue(v.isDirect() && !v.isReadOnly());
                assertEquals(12, v.remaining());
                for (int i = 0; i < 3; i++) v.putFloat(4 * i, 10 * d + i);
            }
            assertArrayEquals(new float[] {0, 1, 2, 10, 11, 12}, t.toHost());
            t.close();
            assertEquals(0, s.maxInUse());
            assertThrows(DeviceException.class, () -> ((LocalPieces) t).writableView(0));
            assertThrows(DeviceException.class, () -> ((LocalPiecesOps) s.ops()).allocateLocal(Shape.of(4),
                    new Layout(Placement.REPLICATE, Placement.PARTIAL), DType.INT32));
        }
    }

    @Test
    void allocateLocalFromAnotherThreadWhileTheSubmeshComputes() throws Exception {
        try (MeshDevice mesh = open("cpu")) {
            Submesh s = mesh.createSubmeshes(new MeshShape(1, 2)).get(0);
            LocalPiecesOps raw = (LocalPiecesOps) s.ops();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            Thread receiver = new Thread(() -> {
                try {
                    for (int i = 0; i < 2000; i++) raw.allocateLocal(Shape.of(64 + 2 * (i % 7), 32), Layout.shard(0, 1), DType.FP32).close();
                } catch (Throwable e) {
                    failure.set(e);
                }
            });
            receiver.start();
            try (Tensor x = s.ops().full(Shape.of(64, 32), Layout.shard(0, 1), DType.FP32, 1f)) {
                while (receiver.isAlive()) s.ops().copy(x).close();
                assertEquals(64 * 32 * 4 / 2, s.maxInUse(), "only x is left");
            }
            receiver.join();
            assertNull(failure.get());
            assertEquals(0, s.maxInUse());
        }
    }

    @Test
    void bf16AndInt32KeepTheirRawBytes() {
        try (MeshDevice mesh = open("cpu")) {
            Submesh s = mesh.asSubmesh();
            Tensor b = s.ops().fromHost(ramp(16), Shape.of(2, 8), Layout.shard(0, 0).with(1, Placement.shard(1)), DType.BF16);
            ByteBuffer bb = bytesOf(b);
            assertEquals(2 * 16, bb.remaining());
            Tensor b2 = ((LocalPiecesOps) s.ops()).fromLocalBytes(bb, b.shape(), b.layout(), DType.BF16);
            assertArrayEquals(b.toHost(), b2.toHost());

            int[] ids = {7, 1 << 30, -5, 0, 123456789, 42, 3, 9};
            Tensor i = s.ops().fromHostInts(ids, Shape.of(8), Layout.shard(0, 1));
            Tensor i2 = ((LocalPiecesOps) s.ops()).fromLocalBytes(bytesOf(i), i.shape(), i.layout(), DType.INT32);
            assertArrayEquals(ids, i2.toHostInts());
            for (Tensor t : List.of(b, b2, i, i2)) t.close();
        }
    }

    @Test
    void partialAddendsComeBackPerDevice() {
        try (MeshDevice mesh = open("cpu")) {
            Submesh s = mesh.asSubmesh();
            float[][] pieces = {ramp(4), ramp(4), ramp(4), ramp(4)};
            Layout partial = new Layout(Placement.REPLICATE, Placement.PARTIAL);
            Tensor p = s.ops().fromHostLocal(pieces, Shape.of(4), partial, DType.FP32);
            Tensor q = ((LocalPiecesOps) s.ops()).fromLocalBytes(bytesOf(p), p.shape(), partial, DType.FP32);
            for (int d = 0; d < 4; d++) assertArrayEquals(p.toHostLocal(d), q.toHostLocal(d));
            p.close();
            q.close();
        }
    }

    @Test
    void rejectsAByteCountThatDoesNotMatchTheLayout() {
        try (MeshDevice mesh = open("cpu")) {
            Submesh s = mesh.asSubmesh();
            ByteBuffer wrong = ByteBuffer.allocateDirect(4 * 8);  // 8 floats, but replicated [8] on 4 devices needs 128 bytes
            DeviceException e = assertThrows(DeviceException.class,
                    () -> ((LocalPiecesOps) s.ops()).fromLocalBytes(wrong, Shape.of(8), Layout.REPLICATED, DType.FP32));
            assertTrue(e.getMessage().contains("fromLocalBytes: 32 bytes") && e.getMessage().contains("needs 128"),
                    e.getMessage());
            assertEquals(0, s.maxInUse(), "nothing left allocated");
            assertThrows(DeviceException.class, () -> ((LocalPiecesOps) s.ops()).fromLocalBytes(
                    ByteBuffer.allocateDirect(16 * 4), Shape.of(4), new Layout(Placement.REPLICATE, Placement.PARTIAL),
                    DType.INT32));
        }
    }

    @Test
    void simPiecesAreZerosWithoutAView() {
        try (MeshDevice mesh = open("sim")) {
            Submesh s = mesh.asSubmesh();
            Tensor x = s.ops().zeros(Shape.of(4, 4), Layout.shard(0, 1), DType.FP32);
            assertNull(((LocalPieces) x).hostView(0));
            assertNull(((LocalPieces) x).writableView(0));
            assertNull(((LocalPiecesOps) s.ops()).allocateLocal(x.shape(), x.layout(), DType.FP32));
            ByteBuffer bytes = bytesOf(x);
            assertEquals(4 * 16, bytes.remaining());
            Tensor y = ((LocalPiecesOps) s.ops()).fromLocalBytes(bytes, x.shape(), x.layout(), DType.FP32);
            assertEquals(x.localShape(), y.localShape());
            x.close();
            y.close();
        }
    }
}

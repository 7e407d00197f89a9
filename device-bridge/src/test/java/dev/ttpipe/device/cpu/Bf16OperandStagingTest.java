package dev.ttpipe.device.cpu;

import dev.ttpipe.device.BFloat16;
import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;

/**
 * The operands {@link Fp32Staging#bf16Operand} hands a bf16 matmul: packed (for {@code sbgemm}, which
 * this machine's OpenBLAS lacks, so the tests of the kernel itself cannot reach it) a BF16 piece as it
 * is and an FP32 one as its rounded bf16 bits; unpacked, fp32 values that are bf16-representable.
 */
class Bf16OperandStagingTest {
    @Test
    void operandsAreBf16BitsWhenPackedAndBf16ValuesInFp32Otherwise() {
        float[] x = {1.0f, 1.00390625f, 1.01171875f, -3.3f, 0.1f, 1e-30f, 65504.5f};
        try (CpuMeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(1));
             Tensor f = mesh.asSubmesh().ops().fromHost(x, Shape.of(x.length), Layout.REPLICATED, DType.FP32);
             Tensor h = mesh.asSubmesh().ops().fromHost(x, Shape.of(x.length), Layout.REPLICATED, DType.BF16)) {
            Fp32Staging staging = new Fp32Staging(mesh.parallel());
            CpuTensor ft = (CpuTensor) f, ht = (CpuTensor) h;
            assertSame(ht.piece(0), staging.bf16Operand(ht, 0, true), "a BF16 piece goes to sbgemm as it is");
            NativeBuffer packed = staging.bf16Operand(ft, 0, true);
            NativeBuffer widened = staging.bf16Operand(ft, 0, false);
            NativeBuffer fromBf16 = staging.bf16Operand(ht, 0, false);
            for (int i = 0; i < x.length; i++) {
                assertEquals(BFloat16.fromFloat(x[i]), packed.shorts.get(i), "packed element " + i);
                assertEquals(BFloat16.round(x[i]), widened.floats.get(i), "rounded element " + i);
                assertEquals(BFloat16.round(x[i]), fromBf16.floats.get(i), "widened element " + i);
            }
            assertEquals(x[3], ft.piece(0).floats.get(3), "the FP32 tensor itself is left alone");
            staging.finish();
        }
    }
}

package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.Test;

import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

/** The pure-JVM matmul kernel, as the mesh uses it (what runs where OpenBLAS does not load). */
class JavaKernelOpsTest {
    @Test
    void meshesOnTheJavaKernelComputeWhatOpenBlasComputes() {
        Random rnd = new Random(3);
        float[] a = new float[2 * 13 * 17];
        float[] b = new float[2 * 11 * 17];
        for (int i = 0; i < a.length; i++) a[i] = rnd.nextFloat() - 0.5f;
        for (int i = 0; i < b.length; i++) b[i] = rnd.nextFloat() - 0.5f;
        float[][] results = new float[2][];
        String[] kernels = {"java", "blas"};
        for (int i = 0; i < 2; i++) {
            try (CpuMeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults().withThreads(2), kernels[i])) {
                assertEquals(kernels[i], mesh.matmulKernel());
                Ops ops = mesh.asSubmesh().ops();
                try (Tensor ta = ops.fromHost(a, Shape.of(2, 13, 17), Layout.shard(0, 1), DType.FP32);
                     Tensor tb = ops.fromHost(b, Shape.of(2, 11, 17), Layout.shard(0, 1), DType.FP32);
                     Tensor c = ops.matmul(ta, tb, false, true)) {
                    results[i] = c.toHost();
                }
            }
        }
        assertArrayEquals(results[1], results[0], 1e-5f);
    }

    @Test
    void theSystemPropertySelectsTheJavaKernel() {
        String before = System.getProperty("ttpipe.blas");
        System.setProperty("ttpipe.blas", "java");
        try (CpuMeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults())) {
            assertEquals("java", mesh.matmulKernel());
        } finally {
            if (before == null) System.clearProperty("ttpipe.blas");
            else System.setProperty("ttpipe.blas", before);
        }
    }
}

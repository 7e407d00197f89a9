package dev.ttpipe.device.cpu;

import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** What a bf16 matmul runs on the cpu backend, and that it says so (docs/backends-bf16.md). */
class Bf16GemmTest {
    @Test
    void withTheBundledOpenBlasBf16MatmulsWidenTheirOperandsToFp32AndRunSgemm() {
        try (CpuMeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(1), "blas")) {
            Assumptions.assumeTrue(OpenBlas.isBundled(), "the bundled OpenBLAS is not the one loaded here: " + OpenBlas.loadedFrom());
            Bf16Gemm g = mesh.bf16Gemm();
            assertFalse(g.packedOperands(), "cblas_sbgemm was bound from a library that does not export it");
            assertEquals("sgemm on bf16 operands widened to fp32", g.kind());
            String d = mesh.bf16MatmulKernel();
            assertTrue(d.startsWith("bf16 operands widened to fp32, then the fp32 sgemm (blas kernel), fp32 accumulation;"
                    + " no bf16 GEMM runs ("), d);
            assertTrue(d.contains("does not export cblas_sbgemm: the bundled org.bytedeco build is compiled without"
                    + " BUILD_BFLOAT16"), d);
            assertEquals(MachinePeak.hasBf16Dot(), !d.contains("this CPU has no avx512_bf16"), d);
        }
    }

    @Test
    void withTheJvmKernelTheDescriptionNamesIt() {
        try (CpuMeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(1), "java")) {
            assertFalse(mesh.bf16Gemm().packedOperands());
            assertTrue(mesh.bf16MatmulKernel().contains("the fp32 kernel is java, not OpenBLAS"), mesh.bf16MatmulKernel());
        }
    }
}

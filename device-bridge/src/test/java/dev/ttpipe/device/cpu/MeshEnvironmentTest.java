package dev.ttpipe.device.cpu;

import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A mesh's environment (a job's global_env) is what the cpu backend reads its TTPIPE_* settings from,
 * over the process's own: TTPIPE_BLAS=java given there picks the JVM matmul where OpenBLAS loads.
 */
class MeshEnvironmentTest {
    @Test
    void theMeshsEnvironmentChoosesTheMatmulKernel() {
        assumeTrue(System.getProperty("ttpipe.blas") == null && System.getenv("TTPIPE_BLAS") == null,
                "TTPIPE_BLAS or -Dttpipe.blas is set for this JVM");
        assumeTrue(OpenBlas.load(), "OpenBLAS does not load here: " + OpenBlas.failure());
        try (CpuMeshDevice plain = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(1));
             CpuMeshDevice withEnv = CpuMeshDevice.open(new MeshShape(1, 1), MeshOptions.defaults().withThreads(1)
                     .withEnvironment(Map.of("TTPIPE_BLAS", "java")))) {
            assertEquals(Dnnl.load() ? "dnnl" : "blas", plain.matmulKernel());
            assertEquals("java", withEnv.matmulKernel());
        }
    }

    @Test
    void getenvTakesTheGivenValueOverTheProcesssAndFallsBackToIt() {
        String path = System.getenv("PATH");
        MeshOptions o = MeshOptions.defaults().withEnvironment(Map.of("PATH", "/given", "TTPIPE_ONLY_GIVEN", "1"));
        assertEquals("/given", o.getenv("PATH"));
        assertEquals("1", o.getenv("TTPIPE_ONLY_GIVEN"));
        assertEquals(path, MeshOptions.defaults().getenv("PATH"));
        assertNull(MeshOptions.defaults().getenv("TTPIPE_ONLY_GIVEN"));
    }
}

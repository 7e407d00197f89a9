package dev.ttpipe.device.cpu;

import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.OpsContractTest;

/** The cpu backend against the backend contract (matmul on the default kernel, OpenBLAS where it loads). */
class CpuOpsTest extends OpsContractTest {
    @Override
    protected MeshDevice open(MeshShape shape, MeshOptions options) {
        return CpuMeshDevice.open(shape, options);
    }
}

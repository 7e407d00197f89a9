package dev.ttpipe.device.cpu;

import dev.ttpipe.device.Device;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.spi.SubmeshBase;

import java.util.List;

/** A submesh of the cpu backend. Its ops run synchronously on the caller's thread (plus the mesh's pool). */
final class CpuSubmesh extends SubmeshBase {
    private final CpuMeshDevice mesh;
    private final CpuDevice[] devices;
    private final CpuOps ops;

    CpuSubmesh(CpuMeshDevice mesh, int index, MeshShape shape, List<CpuDevice> devices) {
        super(mesh, index, shape, List.<Device>copyOf(devices));
        this.mesh = mesh;
        this.devices = devices.toArray(new CpuDevice[0]);
        this.ops = new CpuOps(this);
    }

    CpuMeshDevice cpuMesh() {
        return mesh;
    }

    CpuDevice cpuDevice(int index) {
        return devices[index];
    }

    CpuDevice[] cpuDevices() {
        return devices;
    }

    CpuOps cpuOps() {
        return ops;
    }

    @Override
    public Ops ops() {
        return ops;
    }

    @Override
    public void synchronize() {
        // every op has finished when it returns
    }
}

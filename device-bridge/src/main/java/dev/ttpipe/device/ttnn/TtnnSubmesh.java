package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.Device;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.spi.SubmeshBase;

import java.util.List;

/** A submesh of the ttnn backend: a native submesh handle (owned by the mesh) and its ops. */
final class TtnnSubmesh extends SubmeshBase {
    private final TtnnMeshDevice mesh;
    private final long handle;
    private final TtnnOps ops;

    TtnnSubmesh(TtnnMeshDevice mesh, int index, MeshShape shape, List<Device> devices, long handle) {
        super(mesh, index, shape, devices);
        this.mesh = mesh;
        this.handle = handle;
        this.ops = new TtnnOps(this);
    }

    TtnnMeshDevice ttnnMesh() {
        return mesh;
    }

    long handle() {
        return handle;
    }

    TtnnOps ttnnOps() {
        return ops;
    }

    @Override
    public Ops ops() {
        return ops;
    }

    @Override
    public void synchronize() {
        mesh.requireOpen();
        Bridge.check(NativeBridge.ttpipe_submesh_synchronize(handle), "ttpipe_submesh_synchronize");
    }
}

package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.MeshCoord;
import dev.ttpipe.device.spi.AccountedDevice;

/** A device of a ttnn mesh: Java accounting, with the library's high-water mark reset alongside. */
final class TtnnDevice extends AccountedDevice {
    private final TtnnMeshDevice mesh;

    TtnnDevice(TtnnMeshDevice mesh, int id, MeshCoord coord, long capacity) {
        super("ttnn", id, coord, capacity);
        this.mesh = mesh;
    }

    @Override
    public void resetPeak() {
        super.resetPeak();
        if (!mesh.isClosed()) Bridge.check(NativeBridge.ttpipe_device_reset_peak(mesh.handle(), id()), "ttpipe_device_reset_peak");
    }
}

package dev.ttpipe.device.cpu;

import dev.ttpipe.device.spi.DeviceMemory;
import dev.ttpipe.device.spi.Storage;

import java.util.List;

/** A tensor's native buffers, one per device of its submesh; freed buffers go back to each device's cache. */
final class CpuStorage extends Storage {
    private final CpuMeshDevice mesh;
    private final CpuDevice[] devices;
    private final NativeBuffer[] pieces;

    CpuStorage(CpuMeshDevice mesh, CpuDevice[] devices, List<DeviceMemory> memories, long bytesPerDevice,
               NativeBuffer[] pieces) {
        super(memories, bytesPerDevice);
        this.mesh = mesh;
        this.devices = devices;
        this.pieces = pieces;
    }

    NativeBuffer piece(int device) {
        return pieces[device];
    }

    @Override
    protected void freeBuffers() {
        if (mesh.isClosed()) return; // the allocators already freed everything
        for (int i = 0; i < pieces.length; i++) devices[i].allocator().give(pieces[i]);
    }
}

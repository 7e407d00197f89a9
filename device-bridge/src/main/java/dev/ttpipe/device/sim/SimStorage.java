package dev.ttpipe.device.sim;

import dev.ttpipe.device.spi.DeviceMemory;
import dev.ttpipe.device.spi.Storage;

import java.util.List;

/** A sim tensor's memory: accounting only, no buffers. */
final class SimStorage extends Storage {
    SimStorage(List<DeviceMemory> memories, long bytesPerDevice) {
        super(memories, bytesPerDevice);
    }

    @Override
    protected void freeBuffers() {
    }
}

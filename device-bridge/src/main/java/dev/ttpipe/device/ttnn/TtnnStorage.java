package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.spi.DeviceMemory;
import dev.ttpipe.device.spi.Storage;

import java.util.List;

/**
 * The Java accounting of a ttnn tensor's pieces, shared by the tensor and its views. The pieces
 * themselves belong to the library, which frees them when the last native handle to them is freed
 * (each {@link TtnnTensor} frees its own), so there is nothing to free here.
 */
final class TtnnStorage extends Storage {
    TtnnStorage(List<DeviceMemory> memories, long bytesPerDevice) {
        super(memories, bytesPerDevice);
    }

    @Override
    protected void freeBuffers() {
    }
}

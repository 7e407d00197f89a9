package dev.ttpipe.device.cpu;

import dev.ttpipe.device.MeshCoord;
import dev.ttpipe.device.spi.AccountedDevice;

/** One emulated device: its memory accounting and its own caching allocator of native memory. */
final class CpuDevice extends AccountedDevice {
    private final NativeAllocator allocator;

    CpuDevice(int id, MeshCoord coord, long capacity) {
        super("cpu", id, coord, capacity);
        this.allocator = new NativeAllocator(toString(), capacity);
    }

    NativeAllocator allocator() {
        return allocator;
    }
}

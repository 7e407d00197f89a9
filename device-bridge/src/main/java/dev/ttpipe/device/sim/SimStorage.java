package dev.ttpipe.device.sim;

import dev.ttpipe.device.spi.DeviceMemory;
import dev.ttpipe.device.spi.Storage;

import java.util.List;

/**
 * A sim tensor's memory: accounting only, no buffers, and when the last op that touched it will have
 * run on its submesh's modeled queue (what another submesh that adopts it waits for).
 */
final class SimStorage extends Storage {
    /** System.nanoTime scale; 0: no op touched it. Written by the issuing thread, read by an adopting one. */
    private volatile long readyAt;

    SimStorage(List<DeviceMemory> memories, long bytesPerDevice) {
        super(memories, bytesPerDevice);
    }

    long readyAt() {
        return readyAt;
    }

    /** An op that touches this memory ends at {@code end}. */
    void touchedUntil(long end) {
        if (end > readyAt) readyAt = end;
    }

    @Override
    protected void freeBuffers() {
    }
}

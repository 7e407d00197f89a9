package dev.ttpipe.device.spi;

import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The memory behind a tensor and its views, one piece per device of a submesh, charged to those
 * devices' {@link DeviceMemory} while any tensor refers to it (reference counted: a tensor and
 * each reshape view hold one reference). The subclass owns the actual buffers (native memory on
 * cpu, nothing on sim, device buffers on ttnn). Thread-safe.
 */
public abstract class Storage {
    private volatile List<DeviceMemory> memories;
    private final long bytesPerDevice;
    private final AtomicInteger refs = new AtomicInteger(1);

    /** Takes over {@code bytesPerDevice} already charged to each of {@code memories}. */
    protected Storage(List<DeviceMemory> memories, long bytesPerDevice) {
        this.memories = memories;
        this.bytesPerDevice = bytesPerDevice;
    }

    public final long bytesPerDevice() {
        return bytesPerDevice;
    }

    /** Adds a reference (a new view). */
    public final void retain() {
        if (refs.getAndIncrement() <= 0) {
            refs.decrementAndGet();
            throw new IllegalStateException("storage already freed");
        }
    }

    /** Drops a reference; the last one frees the buffers and refunds the devices. */
    public final void release() {
        int left = refs.decrementAndGet();
        if (left == 0) {
            try {
                freeBuffers();
            } finally {
                DeviceMemory.freeAll(memories, bytesPerDevice);
            }
        } else if (left < 0) {
            refs.incrementAndGet();
        }
    }

    /**
     * Moves the accounting to {@code to} (another submesh's devices, for backends whose devices
     * share host memory) if exactly one tensor refers to this storage: charges {@code to} first
     * (all or nothing; out of memory changes nothing), then refunds the old devices. Returns false,
     * changing nothing, if views share the storage.
     */
    public final synchronized boolean moveAccounting(List<DeviceMemory> to) {
        if (refs.get() != 1) return false;
        DeviceMemory.allocateAll(to, bytesPerDevice);
        DeviceMemory.freeAll(memories, bytesPerDevice);
        memories = to;
        return true;
    }

    public final boolean isFreed() {
        return refs.get() <= 0;
    }

    /** Gives the per-device buffers back to the backend (called once, by the last {@link #release}). */
    protected abstract void freeBuffers();
}

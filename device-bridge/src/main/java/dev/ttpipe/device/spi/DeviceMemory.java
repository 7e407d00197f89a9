package dev.ttpipe.device.spi;

import dev.ttpipe.device.DeviceOutOfMemoryException;
import dev.ttpipe.device.MemoryStats;

import java.util.List;

/**
 * The memory accounting of one device: bytes held by live tensors, the high-water mark and the
 * capacity. An allocation past the capacity throws {@link DeviceOutOfMemoryException} and changes
 * nothing. Every backend charges its tensors here, so out-of-memory behaves the same on all of
 * them. Thread-safe.
 */
public final class DeviceMemory {
    private final String device;
    private final long capacity;
    private long inUse;
    private long peak;

    /** @param device the name used in error messages, e.g. {@code cpu device 3 (0, 3)} */
    public DeviceMemory(String device, long capacity) {
        if (capacity < 0) throw new IllegalArgumentException(device + ": negative capacity " + capacity);
        this.device = device;
        this.capacity = capacity;
    }

    public String device() {
        return device;
    }

    public long capacity() {
        return capacity;
    }

    /** Charges {@code bytes}, or throws {@link DeviceOutOfMemoryException} leaving the accounting unchanged. */
    public synchronized void allocate(long bytes) {
        if (bytes < 0) throw new IllegalArgumentException(device + ": negative allocation " + bytes);
        if (bytes > capacity - inUse) throw new DeviceOutOfMemoryException(device, bytes, inUse, capacity);
        inUse += bytes;
        if (inUse > peak) peak = inUse;
    }

    /** Returns {@code bytes} charged by {@link #allocate}. */
    public synchronized void free(long bytes) {
        if (bytes < 0 || bytes > inUse) {
            throw new IllegalStateException(device + ": freeing " + bytes + " bytes with " + inUse + " in use");
        }
        inUse -= bytes;
    }

    public synchronized MemoryStats stats() {
        return new MemoryStats(inUse, peak, capacity);
    }

    public synchronized long inUse() {
        return inUse;
    }

    public synchronized void resetPeak() {
        peak = inUse;
    }

    /**
     * Charges {@code bytes} on every device of {@code memories}, all or nothing: if one device is
     * out of memory, the ones already charged are refunded before the exception propagates.
     */
    public static void allocateAll(List<DeviceMemory> memories, long bytes) {
        long[] peaks = new long[memories.size()];
        int done = 0;
        try {
            for (DeviceMemory m : memories) {
                peaks[done] = m.stats().peak();
                m.allocate(bytes);
                done++;
            }
        } catch (RuntimeException e) {
            for (int i = 0; i < done; i++) memories.get(i).refund(bytes, peaks[i]);
            throw e;
        }
    }

    /** Undoes an {@link #allocate} of a failed all-or-nothing charge, high-water mark included. */
    private synchronized void refund(long bytes, long peakBefore) {
        inUse -= bytes;
        peak = Math.max(peakBefore, inUse);
    }

    /** Refunds {@code bytes} on every device of {@code memories}. */
    public static void freeAll(List<DeviceMemory> memories, long bytes) {
        for (DeviceMemory m : memories) m.free(bytes);
    }

    @Override
    public String toString() {
        MemoryStats s = stats();
        return device + ": " + s.inUse() + " of " + s.capacity() + " bytes in use (peak " + s.peak() + ")";
    }
}

package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DeviceException;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;

/**
 * The caching allocator of one emulated device: a freed buffer goes to a free list by size class
 * (8 classes per power of two, so at most 12.5% slack) and the next request of that class reuses
 * it, so a training step in steady state mallocs nothing. Native memory is given back for real
 * when the cache would push the device's native footprint past its soft limit (its capacity),
 * and all of it when the mesh closes. Thread-safe.
 *
 * <p>Pieces are limited to {@link #MAX_BYTES} (a Java buffer view is int-indexed).
 */
final class NativeAllocator {
    static final int MIN_BYTES = 64;
    /** The largest size class below 2 GiB. */
    static final int MAX_BYTES = (1 << 30) + (7 << 27);

    private final String device;
    private final long softLimit;
    private final List<ArrayDeque<NativeBuffer>> free = new ArrayList<>();
    private final Set<NativeBuffer> owned = Collections.newSetFromMap(new IdentityHashMap<>());
    private long reserved;
    private long cached;
    private long mallocs;
    private boolean closed;

    NativeAllocator(String device, long softLimit) {
        this.device = device;
        this.softLimit = softLimit;
        for (int c = 0; c <= classIndex(MAX_BYTES); c++) free.add(new ArrayDeque<>());
    }

    /** A buffer of at least {@code bytes} bytes, contents undefined. */
    synchronized NativeBuffer take(long bytes) {
        if (closed) throw new DeviceException(device + ": the mesh is closed");
        if (bytes > MAX_BYTES) {
            throw new DeviceException(device + ": a piece of " + bytes + " bytes exceeds the cpu backend's limit of "
                    + MAX_BYTES + " bytes per tensor per device; shard the tensor over more devices");
        }
        int size = classSize(bytes);
        int c = classIndex(size);
        ArrayDeque<NativeBuffer> list = free.get(c);
        if (!list.isEmpty()) {
            cached -= size;
            return list.pop();
        }
        if (reserved + size > softLimit && cached > 0) trim();
        NativeBuffer b = NativeBuffer.malloc(size);
        mallocs++;
        reserved += size;
        owned.add(b);
        return b;
    }

    /** Returns a buffer from {@link #take} to the cache. */
    synchronized void give(NativeBuffer b) {
        if (closed) return;
        free.get(classIndex(b.capacity)).push(b);
        cached += b.capacity;
    }

    /** How many times this allocator called malloc (the counter the steady-state test watches). */
    synchronized long mallocCount() {
        return mallocs;
    }

    /** Native bytes held, live and cached. */
    synchronized long reservedBytes() {
        return reserved;
    }

    synchronized long cachedBytes() {
        return cached;
    }

    /** Frees every cached buffer for real. */
    synchronized void trim() {
        for (ArrayDeque<NativeBuffer> list : free) {
            for (NativeBuffer b; (b = list.poll()) != null; ) {
                owned.remove(b);
                reserved -= b.capacity;
                b.free();
            }
        }
        cached = 0;
    }

    /** Frees everything, live buffers included (the mesh is closing; its tensors are dead). */
    synchronized void close() {
        if (closed) return;
        closed = true;
        for (NativeBuffer b : owned) b.free();
        owned.clear();
        for (ArrayDeque<NativeBuffer> list : free) list.clear();
        reserved = 0;
        cached = 0;
    }

    /** Rounds up to the size class: a multiple of 1/8 of the power of two below it. */
    static int classSize(long bytes) {
        if (bytes <= MIN_BYTES) return MIN_BYTES;
        int e = 63 - Long.numberOfLeadingZeros(bytes - 1); // 2^e < bytes <= 2^(e+1), e >= 6
        long step = 1L << (e - 3);                         // 8 classes in (2^e, 2^(e+1)]
        return (int) ((bytes + step - 1) / step * step);
    }

    static int classIndex(int classSize) {
        if (classSize <= MIN_BYTES) return 0;
        int e = 63 - Long.numberOfLeadingZeros(classSize - 1L); // 2^e < size <= 2^(e+1)
        int k = (classSize >> (e - 3)) - 8;               // 1..8 within (2^e, 2^(e+1)]
        return 1 + (e - 6) * 8 + k - 1;
    }
}

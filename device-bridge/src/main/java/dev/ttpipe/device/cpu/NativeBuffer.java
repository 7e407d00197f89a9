package dev.ttpipe.device.cpu;

import com.sun.jna.Native;
import com.sun.jna.Pointer;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.ShortBuffer;

/**
 * One block of native memory (64-byte aligned) with typed views over it. Kernels use the
 * views' absolute get/put (bounds-checked: a kernel bug throws instead of corrupting memory);
 * BLAS gets {@link #address}. The views are stateless as used (absolute access only), so one
 * buffer may be read by several threads. Owned by a {@link NativeAllocator}.
 */
final class NativeBuffer {
    static final int ALIGNMENT = 64;

    private final long raw;
    final long address;
    final int capacity;
    final ByteBuffer bytes;
    final FloatBuffer floats;
    final ShortBuffer shorts;
    final IntBuffer ints;

    private NativeBuffer(long raw, int capacity) {
        this.raw = raw;
        this.address = (raw + ALIGNMENT - 1) & -ALIGNMENT;
        this.capacity = capacity;
        this.bytes = new Pointer(address).getByteBuffer(0, capacity).order(ByteOrder.nativeOrder());
        this.floats = bytes.asFloatBuffer();
        this.shorts = bytes.asShortBuffer();
        this.ints = bytes.asIntBuffer();
    }

    /** Mallocs {@code capacity} bytes (plus alignment slack); throws OutOfMemoryError if malloc fails. */
    static NativeBuffer malloc(int capacity) {
        long raw = Native.malloc((long) capacity + ALIGNMENT);
        if (raw == 0) throw new OutOfMemoryError("malloc of " + capacity + " bytes failed");
        return new NativeBuffer(raw, capacity);
    }

    void free() {
        Native.free(raw);
    }
}

package dev.ttpipe.device;

/**
 * An allocation that would exceed a device's capacity. The device stays usable: nothing was
 * allocated and its accounting is unchanged.
 */
public final class DeviceOutOfMemoryException extends DeviceException {
    private final long requested;
    private final long inUse;
    private final long capacity;

    public DeviceOutOfMemoryException(String device, long requested, long inUse, long capacity) {
        super(device + ": out of memory: cannot allocate " + requested + " bytes with " + inUse
                + " bytes in use of " + capacity + " (" + (capacity - inUse) + " free)");
        this.requested = requested;
        this.inUse = inUse;
        this.capacity = capacity;
    }

    public long requested() {
        return requested;
    }

    public long inUse() {
        return inUse;
    }

    public long capacity() {
        return capacity;
    }
}

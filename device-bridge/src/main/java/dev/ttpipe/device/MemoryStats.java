package dev.ttpipe.device;

/** A device's memory at one moment: bytes held by live tensors, the high-water mark, and the capacity. */
public record MemoryStats(long inUse, long peak, long capacity) {
}

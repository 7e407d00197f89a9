package dev.ttpipe.device;

/**
 * One device of a mesh (a Wormhole chip on hardware, an emulated device elsewhere): its position,
 * its memory capacity and accounting. Thread-safe.
 */
public interface Device {
    /** Id unique within its mesh (row-major position). */
    int id();

    /** Position in the whole mesh. */
    MeshCoord coord();

    long capacity();

    MemoryStats memory();

    /** Forgets the high-water mark (peak becomes the current use). */
    void resetPeak();
}

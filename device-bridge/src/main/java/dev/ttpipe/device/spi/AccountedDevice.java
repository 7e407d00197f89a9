package dev.ttpipe.device.spi;

import dev.ttpipe.device.Device;
import dev.ttpipe.device.MeshCoord;
import dev.ttpipe.device.MemoryStats;

/** A {@link Device} whose memory is tracked by a {@link DeviceMemory}: what every emulated or modeled device is. */
public class AccountedDevice implements Device {
    private final int id;
    private final MeshCoord coord;
    private final DeviceMemory memory;

    public AccountedDevice(String backend, int id, MeshCoord coord, long capacity) {
        this.id = id;
        this.coord = coord;
        this.memory = new DeviceMemory(backend + " device " + id + " " + coord, capacity);
    }

    @Override
    public int id() {
        return id;
    }

    @Override
    public MeshCoord coord() {
        return coord;
    }

    @Override
    public long capacity() {
        return memory.capacity();
    }

    @Override
    public MemoryStats memory() {
        return memory.stats();
    }

    @Override
    public void resetPeak() {
        memory.resetPeak();
    }

    /** The accounting, for backends that charge tensors to this device. */
    public DeviceMemory accounting() {
        return memory;
    }

    @Override
    public String toString() {
        return memory.device();
    }
}

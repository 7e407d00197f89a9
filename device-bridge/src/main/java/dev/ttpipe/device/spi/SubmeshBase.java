package dev.ttpipe.device.spi;

import dev.ttpipe.device.Device;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Submesh;

import java.util.ArrayList;
import java.util.List;

/** What every backend's {@link Submesh} shares: its place in the mesh and its devices. */
public abstract class SubmeshBase implements Submesh {
    private final MeshDevice mesh;
    private final int index;
    private final MeshShape shape;
    private final List<Device> devices;

    protected SubmeshBase(MeshDevice mesh, int index, MeshShape shape, List<Device> devices) {
        this.mesh = mesh;
        this.index = index;
        this.shape = shape;
        this.devices = List.copyOf(devices);
    }

    @Override
    public final MeshDevice mesh() {
        return mesh;
    }

    @Override
    public final int index() {
        return index;
    }

    @Override
    public final MeshShape shape() {
        return shape;
    }

    @Override
    public final List<Device> devices() {
        return devices;
    }

    /** The accounting of every device, row-major (what a tensor on this submesh is charged to). */
    /** Without a stream: the runtime asks for it at every action it records. */
    @Override
    public long maxInUse() {
        long max = 0;
        for (Device d : devices) max = Math.max(max, d.memory().inUse());
        return max;
    }

    @Override
    public long maxPeak() {
        long max = 0;
        for (Device d : devices) max = Math.max(max, d.memory().peak());
        return max;
    }

    public final List<DeviceMemory> accounting() {
        List<DeviceMemory> out = new ArrayList<>(devices.size());
        for (Device d : devices) out.add(((AccountedDevice) d).accounting());
        return out;
    }

    @Override
    public String describe() {
        StringBuilder ids = new StringBuilder();
        for (Device d : devices) ids.append(ids.length() == 0 ? "" : ", ").append(d.id());
        return "submesh " + index + " " + shape + " devices [" + ids + "]";
    }

    @Override
    public String toString() {
        return mesh.backend() + " " + describe();
    }

    /**
     * Tiles a mesh with submeshes of {@code sub}, row-major (TTNN's create_submeshes): element i
     * lists submesh i's devices, row-major within it.
     */
    public static <D extends Device> List<List<D>> tile(MeshShape mesh, List<D> all, MeshShape sub) {
        if (sub == null || mesh.rows() % sub.rows() != 0 || mesh.cols() % sub.cols() != 0) {
            throw new DeviceException("createSubmeshes: submesh shape " + sub + " does not tile the mesh " + mesh
                    + " (the mesh's sizes must be multiples of the submesh's)");
        }
        List<List<D>> out = new ArrayList<>();
        for (int r0 = 0; r0 < mesh.rows(); r0 += sub.rows()) {
            for (int c0 = 0; c0 < mesh.cols(); c0 += sub.cols()) {
                List<D> devs = new ArrayList<>();
                for (int r = 0; r < sub.rows(); r++) {
                    for (int c = 0; c < sub.cols(); c++) devs.add(all.get((r0 + r) * mesh.cols() + c0 + c));
                }
                out.add(devs);
            }
        }
        return out;
    }
}

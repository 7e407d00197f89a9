package dev.ttpipe.device.sim;

import dev.ttpipe.device.Device;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.MeshCoord;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.MeshSocket;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.spi.AccountedDevice;
import dev.ttpipe.device.spi.MeshDeviceBase;
import dev.ttpipe.device.spi.SubmeshBase;

import java.util.ArrayList;
import java.util.List;

/**
 * The sim backend: a mesh whose ops do no math. Tensors carry shapes, layouts and dtypes and are
 * charged to their devices' memory exactly as on cpu (out-of-memory included); every op takes the
 * time {@link SimCosts} models for it on its submesh's queue ({@link SimSubmesh}). Shape and
 * layout checks are the cpu backend's (both extend {@link dev.ttpipe.device.spi.CheckedOps}).
 * Values read back are placeholders: {@code toHost} gives zeros, {@code sumSquares} NaN,
 * {@code crossEntropy} a NaN sum over every target (ids are not stored, so none is ignored and
 * none is range-checked). This is what runs a 64-stage pipeline on a laptop.
 */
public final class SimMeshDevice extends MeshDeviceBase {
    private final List<AccountedDevice> devices;
    private final SimCosts costs;

    private SimMeshDevice(MeshShape shape, MeshOptions options) {
        super("sim", shape);
        if (options.memoryPerDevice() <= 0) {
            throw new DeviceException("sim mesh: memoryPerDevice " + options.memoryPerDevice() + " must be > 0");
        }
        SimCosts c = options.simCosts() == null ? SimCosts.defaults() : options.simCosts();
        if (!(c.gflops() > 0 && c.memoryGbps() > 0 && c.linkGbps() > 0 && c.opLatencyUs() >= 0 && c.timeScale() >= 0)) {
            throw new DeviceException("sim mesh: cost model " + c + " needs positive rates and non-negative latency and scale");
        }
        this.costs = c;
        List<AccountedDevice> devs = new ArrayList<>();
        for (int i = 0; i < shape.size(); i++) {
            devs.add(new AccountedDevice("sim", i, new MeshCoord(i / shape.cols(), i % shape.cols()),
                    options.memoryPerDevice()));
        }
        this.devices = List.copyOf(devs);
    }

    /** Opens a modeled mesh ({@code options} null: defaults). */
    public static SimMeshDevice open(MeshShape shape, MeshOptions options) {
        if (shape == null) throw new DeviceException("sim mesh: shape is null");
        return new SimMeshDevice(shape, options == null ? MeshOptions.defaults() : options);
    }

    /**
     * The modeled time of all work queued on {@code submesh} so far: the difference across a call is
     * exactly what the cost model charges for it, however late the issuing thread ran.
     */
    public static double modeledSeconds(Submesh submesh) {
        if (!(submesh instanceof SimSubmesh s)) throw new IllegalArgumentException(submesh.describe() + " is not a sim submesh");
        return s.modeledSeconds();
    }

    @Override
    public List<Device> devices() {
        return List.copyOf(devices);
    }

    SimCosts costs() {
        return costs;
    }

    @Override
    protected List<Submesh> newSubmeshes(MeshShape submeshShape) {
        List<List<AccountedDevice>> tiles = SubmeshBase.tile(shape(), devices, submeshShape);
        List<Submesh> out = new ArrayList<>();
        for (int i = 0; i < tiles.size(); i++) {
            out.add(new SimSubmesh(this, i, submeshShape, List.<Device>copyOf(tiles.get(i))));
        }
        return out;
    }

    @Override
    public MeshSocket openSocket(Submesh from, Submesh to) {
        requireOpen();
        return new SimMeshSocket(this, from, to);
    }

    /** Nothing to free: a sim mesh's tensors are accounting only, which closing the mesh ends. */
    @Override
    protected void freeResources() {
    }

    @Override
    public String toString() {
        return "sim mesh " + shape() + " (" + costs + ")";
    }
}

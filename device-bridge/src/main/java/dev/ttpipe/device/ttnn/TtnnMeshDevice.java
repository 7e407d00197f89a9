package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.Device;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.MemoryStats;
import dev.ttpipe.device.MeshCoord;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.MeshSocket;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.spi.MeshDeviceBase;
import dev.ttpipe.device.spi.SubmeshBase;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * The ttnn backend: a mesh opened through the native bridge library ({@link BridgeLibrary}), the
 * TTNN implementation on Tenstorrent hardware or the reference one (fp32 C, emulated devices)
 * everywhere else. Ops are checked in Java exactly as on the cpu and sim backends
 * ({@link dev.ttpipe.device.spi.CheckedOps}), then each runs as one native call on the pieces.
 *
 * <p>Ownership: the mesh owns its native handle and frees it on {@link #close} (the library then
 * frees every submesh, tensor and socket of the mesh); each Java tensor owns one native tensor
 * handle and frees it on {@code close()}. Memory is accounted in Java per device
 * ({@link Device#memory()}, capacity {@link MeshOptions#memoryPerDevice()}, out-of-memory before
 * anything is allocated) and by the library ({@link #nativeMemory}); the two agree on the
 * reference library.
 *
 * <p>Thread-safe as {@link MeshDevice} requires. Closing waits for native calls in progress on
 * other threads; their ops then fail with a {@link DeviceException}.
 */
public final class TtnnMeshDevice extends MeshDeviceBase {
    private final long handle;
    private final List<TtnnDevice> devices;
    private final Path library;
    private final String implementation;

    private TtnnMeshDevice(long handle, MeshShape shape, long capacity, BridgeLibrary.Loaded lib) {
        super("ttnn", shape);
        this.handle = handle;
        this.library = lib.path();
        this.implementation = lib.implementation();
        List<TtnnDevice> devs = new ArrayList<>();
        for (int i = 0; i < shape.size(); i++) {
            devs.add(new TtnnDevice(this, i, new MeshCoord(i / shape.cols(), i % shape.cols()), capacity));
        }
        this.devices = List.copyOf(devs);
    }

    /**
     * Opens a mesh through the bridge library named by {@link MeshOptions#bridgeLibrary()} (null:
     * the search of {@link BridgeLibrary}). {@code options} null: defaults.
     *
     * @throws BridgeLoadException when the library cannot be found, loaded or bound
     */
    public static TtnnMeshDevice open(MeshShape shape, MeshOptions options) {
        if (shape == null) throw new DeviceException("ttnn mesh: shape is null");
        MeshOptions o = options == null ? MeshOptions.defaults() : options;
        if (o.memoryPerDevice() <= 0) {
            throw new DeviceException("ttnn mesh: memoryPerDevice " + o.memoryPerDevice() + " must be > 0");
        }
        NativeEnvironment.export(o.environment());             // TTNN reads its settings (TT_METAL_*, ...) there
        BridgeLibrary.Loaded lib = BridgeLibrary.ensureLoaded(o.bridgeLibrary(), o::getenv);
        long[] out = new long[1];
        Bridge.check(NativeBridge.ttpipe_mesh_open(shape.rows(), shape.cols(), o.memoryPerDevice(), out),
                "ttpipe_mesh_open");
        return new TtnnMeshDevice(out[0], shape, o.memoryPerDevice(), lib);
    }

    @Override
    public List<Device> devices() {
        return List.copyOf(devices);
    }

    /** The bridge library this mesh runs on. */
    public Path library() {
        return library;
    }

    /** The library's own description (reference or TTNN, with its version). */
    public String implementation() {
        return implementation;
    }

    /** The library makes the native submeshes, all of one shape in one call. */
    @Override
    protected List<Submesh> newSubmeshes(MeshShape s) {
        List<List<TtnnDevice>> tiles = SubmeshBase.tile(shape(), devices, s);
        long[] handles = new long[tiles.size()];
        int[] count = new int[1];
        Bridge.check(NativeBridge.ttpipe_mesh_create_submeshes(handle, s.rows(), s.cols(), handles, handles.length,
                count), "ttpipe_mesh_create_submeshes");
        if (count[0] != tiles.size()) {
            throw new DeviceException("ttpipe_mesh_create_submeshes: the library made " + count[0]
                    + " submeshes of " + s + ", expected " + tiles.size());
        }
        List<Submesh> out = new ArrayList<>();
        for (int i = 0; i < tiles.size(); i++) {
            out.add(new TtnnSubmesh(this, i, s, List.<Device>copyOf(tiles.get(i)), handles[i]));
        }
        return out;
    }

    @Override
    public MeshSocket openSocket(Submesh from, Submesh to) {
        requireOpen();
        return new TtnnMeshSocket(this, from, to);
    }

    /** The library's accounting of device {@code id} (row-major in the mesh). */
    public MemoryStats nativeMemory(int id) {
        requireOpen();
        long[] out = new long[3];
        Bridge.check(NativeBridge.ttpipe_device_memory(handle, id, out), "ttpipe_device_memory");
        return new MemoryStats(out[0], out[1], out[2]);
    }

    /** Handles the library holds over the whole process (meshes, submeshes, tensors, sockets). */
    public static long liveNativeHandles() {
        BridgeLibrary.ensureLoaded(null);
        return NativeBridge.ttpipe_live_handles();
    }

    /** Host bytes the library holds for emulated device memory over the whole process (0 on hardware). */
    public static long nativeHostBytes() {
        BridgeLibrary.ensureLoaded(null);
        return NativeBridge.ttpipe_host_bytes();
    }

    long handle() {
        return handle;
    }

    /** The library frees everything of the mesh: submeshes, tensors, sockets. */
    @Override
    protected void freeResources() {
        Bridge.check(NativeBridge.ttpipe_mesh_close(handle), "ttpipe_mesh_close");
    }

    @Override
    public String toString() {
        return "ttnn mesh " + shape() + " (" + implementation + ", " + library + ")";
    }
}

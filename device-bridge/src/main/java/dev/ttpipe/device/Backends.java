package dev.ttpipe.device;

import dev.ttpipe.device.cpu.CpuMeshDevice;
import dev.ttpipe.device.sim.SimMeshDevice;
import dev.ttpipe.device.ttnn.TtnnMeshDevice;

import java.util.List;
import java.util.Locale;

/**
 * Opens meshes by backend name: {@code cpu} (emulated devices, real math), {@code sim} (cost model, no
 * math), {@code ttnn} (the native bridge library: TTNN on hardware, the reference C build elsewhere;
 * see {@link dev.ttpipe.device.ttnn.BridgeLibrary} for where it is looked for).
 */
public final class Backends {
    public static final List<String> NAMES = List.of("cpu", "sim", "ttnn");

    private Backends() {
    }

    public static MeshDevice open(String backend, MeshShape shape, MeshOptions options) {
        switch (backend.toLowerCase(Locale.ROOT)) {
            case "cpu":
                return CpuMeshDevice.open(shape, options);
            case "sim":
                return SimMeshDevice.open(shape, options);
            case "ttnn":
                return TtnnMeshDevice.open(shape, options);
            default:
                throw new DeviceException("unknown backend '" + backend + "', expected one of " + NAMES);
        }
    }
}

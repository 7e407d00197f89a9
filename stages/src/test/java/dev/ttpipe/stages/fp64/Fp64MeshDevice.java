package dev.ttpipe.stages.fp64;

import dev.ttpipe.device.Device;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.MeshCoord;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.MeshSocket;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.spi.AccountedDevice;
import dev.ttpipe.device.spi.MeshDeviceBase;
import dev.ttpipe.device.spi.SubmeshBase;

import java.util.List;

/**
 * A one-device mesh whose floating tensors hold doubles and whose ops compute in double: the fp64
 * path of the model-level gradient checks. Every float tensor (FP32 or BF16 by its label) is stored
 * as a {@code double[]}, so the stages run unchanged and a central difference with a step of 1e-5
 * is exact to about 1e-10. Tests reach the doubles through {@link Fp64Ops#data}.
 *
 * <p>Test scope only: one device (no collectives to emulate), no sockets, plain loops.
 */
public final class Fp64MeshDevice extends MeshDeviceBase {
    private final AccountedDevice device = new AccountedDevice("fp64", 0, new MeshCoord(0, 0), Long.MAX_VALUE / 4);

    private Fp64MeshDevice() {
        super("fp64", new MeshShape(1, 1));
    }

    public static Fp64MeshDevice open() {
        return new Fp64MeshDevice();
    }

    @Override
    public List<Device> devices() {
        return List.of(device);
    }

    @Override
    protected List<Submesh> newSubmeshes(MeshShape submeshShape) {
        List<List<AccountedDevice>> tiles = SubmeshBase.tile(shape(), List.of(device), submeshShape);
        return List.of(new Fp64Submesh(this, submeshShape, tiles.get(0)));
    }

    @Override
    public MeshSocket openSocket(Submesh from, Submesh to) {
        throw new DeviceException("fp64 mesh: no sockets (one device)");
    }

    @Override
    protected void freeResources() {
        // plain Java arrays: the garbage collector frees them
    }

    /** The only submesh: the whole one-device mesh. */
    static final class Fp64Submesh extends SubmeshBase {
        private final Fp64Ops ops;

        Fp64Submesh(MeshDevice mesh, MeshShape shape, List<AccountedDevice> devices) {
            super(mesh, 0, shape, List.<Device>copyOf(devices));
            this.ops = new Fp64Ops(this);
        }

        @Override
        public Ops ops() {
            return ops;
        }

        @Override
        public void synchronize() {
            // every op has finished when it returns
        }
    }
}

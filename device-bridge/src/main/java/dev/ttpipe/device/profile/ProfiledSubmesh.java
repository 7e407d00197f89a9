package dev.ttpipe.device.profile;

import dev.ttpipe.device.Device;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Submesh;

import java.util.List;

/**
 * A submesh whose {@link #ops()} record into an {@link OpProfile}; everything else is the wrapped
 * submesh's. Tensors made through it live on the wrapped submesh.
 */
public final class ProfiledSubmesh implements Submesh {
    private final Submesh sub;
    private final Ops ops;

    public ProfiledSubmesh(Submesh sub, OpProfile profile) {
        this.sub = sub;
        this.ops = new ProfiledOps(sub.ops(), this, profile);
    }

    @Override
    public MeshDevice mesh() {
        return sub.mesh();
    }

    @Override
    public int index() {
        return sub.index();
    }

    @Override
    public MeshShape shape() {
        return sub.shape();
    }

    @Override
    public List<Device> devices() {
        return sub.devices();
    }

    @Override
    public Ops ops() {
        return ops;
    }

    @Override
    public void synchronize() {
        sub.synchronize();
    }

    @Override
    public String describe() {
        return sub.describe();
    }
}

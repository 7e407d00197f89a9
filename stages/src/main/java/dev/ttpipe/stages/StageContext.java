package dev.ttpipe.stages;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;

import java.util.ArrayList;
import java.util.List;

/** What the layers of one stage share: the submesh, the parallel layout, the seed, and the parameter list. */
final class StageContext {
    final Submesh submesh;
    final Ops ops;
    final Parallelism par;
    final ModelSpec spec;
    final long seed;
    final List<Param> params = new ArrayList<>();

    StageContext(Submesh submesh, Parallelism par, ModelSpec spec, long seed) {
        this.submesh = submesh;
        this.ops = submesh.ops();
        this.par = par;
        this.spec = spec;
        this.seed = seed;
    }

    /** Creates a parameter initialised from (seed, name) with the given host values, laid out per {@code layout}. */
    Param param(String name, Shape shape, Layout layout, float[] init, boolean decay) {
        Tensor value = ops.fromHost(init, shape, layout, DType.FP32);
        Param p = new Param(name, value, par.gradient(layout), decay);
        params.add(p);
        return p;
    }

    Param normal(String name, Shape shape, Layout layout, double std) {
        return param(name, shape, layout, ParamInit.normal(seed, name, (int) shape.numel(), std), true);
    }

    Param constant(String name, Shape shape, Layout layout, float value) {
        return param(name, shape, layout, ParamInit.constant((int) shape.numel(), value), false);
    }

    /** An alias of {@code t} that keeps its memory alive until closed (how layers stash activations without copying). */
    Tensor keep(Tensor t) {
        return ops.reshape(t, t.shape());
    }
}

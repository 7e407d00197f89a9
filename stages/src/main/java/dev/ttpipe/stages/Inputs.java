package dev.ttpipe.stages;

import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;

/** Puts token ids and targets on a stage's submesh, sharded over its DDP axis. */
public final class Inputs {
    private Inputs() {
    }

    /** INT32 [b, T] laid out like the stage's activations (batch over DDP). */
    public static Tensor ids(Ops ops, Parallelism par, int[] tokens, int batch, int seqLen) {
        if (par.ddp() && batch % par.ddpSize() != 0) {
            throw new StagesException("training_config.batch_size: a microbatch of " + batch
                    + " sequences cannot be split over " + par.ddpSize() + " data-parallel devices, expected a multiple of "
                    + par.ddpSize());
        }
        return ops.fromHostInts(tokens, Shape.of(batch, seqLen), par.activations());
    }
}

package dev.ttpipe.device.sim;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.device.SimProfile;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The sim backend's bf16 costs: memory-bound ops and link transfers are charged bf16's bytes (half
 * of fp32's), and matmuls the profile's flops, whose figure is the chip's bf16 peak
 * ({@link SimProfile#tflopsBf16}): the same for either dtype, since the model has no fp32 rate.
 */
class SimBf16CostsTest {
    /** 1 GB/s memory and link, 1 GFLOP/s, no latency: a modeled second is a GB or a GFLOP. */
    private static final SimCosts COSTS = new SimCosts(1.0, 1.0, 0.0, 1.0, 1.0);

    @Test
    void memoryBoundOpsAndTransfersCostHalfInBf16AndMatmulsTheSame() {
        for (String what : new String[]{"gelu", "allGather", "matmul"}) {
            double[] seconds = new double[2];
            DType[] dtypes = {DType.FP32, DType.BF16};
            for (int i = 0; i < 2; i++) {
                DType dtype = dtypes[i];
                try (MeshDevice mesh = SimMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults().withSimCosts(COSTS))) {
                    Submesh sub = mesh.asSubmesh();
                    Ops ops = sub.ops();
                    try (Tensor x = ops.zeros(Shape.of(64, 1024), Layout.shard(0, 1), dtype);
                         Tensor w = ops.zeros(Shape.of(1024, 256), Layout.REPLICATED, dtype)) {
                        double before = SimMeshDevice.modeledSeconds(sub);
                        Tensor y = switch (what) {
                            case "gelu" -> ops.gelu(x);
                            case "allGather" -> ops.allGather(x, 0, 1);
                            default -> ops.matmul(x, w, false, false);
                        };
                        seconds[i] = SimMeshDevice.modeledSeconds(sub) - before;
                        y.close();
                    }
                }
            }
            double expected = what.equals("matmul") ? 1.0 : 0.5;
            assertEquals(expected, seconds[1] / seconds[0], 1e-12, what + ": bf16 / fp32 modeled time");
        }
    }
}

package dev.ttpipe.device.spi;

import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Placement;
import dev.ttpipe.device.Shape;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class LayoutRulesTest {
    private static final Placement R = Placement.REPLICATE;
    private static final Placement P = Placement.PARTIAL;
    private static final MeshShape MESH = new MeshShape(2, 4);

    private static Placement s(int d) {
        return Placement.shard(d);
    }

    private static Layout l(Placement a0, Placement a1) {
        return new Layout(a0, a1);
    }

    private static void rejects(Runnable r, String... fragments) {
        DeviceException e = assertThrows(DeviceException.class, r::run);
        for (String f : fragments) assertTrue(e.getMessage().contains(f), e.getMessage() + " should contain " + f);
    }

    @Test
    void normalizeMakesShardDimsNonNegativeAndChecksDivisibility() {
        Shape shape = Shape.of(4, 6, 8);
        assertEquals(l(s(0), s(2)), LayoutRules.normalize("op", shape, l(s(0), s(-1)), MESH));
        rejects(() -> LayoutRules.normalize("op", shape, l(R, s(1)), MESH), "op", "dim 1", "size 6", "mesh axis 1 size 4");
        rejects(() -> LayoutRules.normalize("op", shape, l(R, s(3)), MESH), "out of range");
        rejects(() -> LayoutRules.normalize("op", shape, l(s(2), s(2)), MESH), "both mesh axes");
    }

    @Test
    void matmulPerAxisRules() {
        Shape a = Shape.of(8, 16);
        Shape b = Shape.of(16, 12);
        assertEquals(l(s(0), R), LayoutRules.matmul("mm", a, l(s(0), R), false, b, l(R, R), false), "S(M) x R");
        assertEquals(l(R, s(1)), LayoutRules.matmul("mm", a, l(R, R), false, b, l(R, s(1)), false), "R x S(N)");
        assertEquals(l(R, P), LayoutRules.matmul("mm", a, l(R, s(1)), false, b, l(R, s(0)), false), "S(K) x S(K)");
        assertEquals(l(P, R), LayoutRules.matmul("mm", a, l(P, R), false, b, l(R, R), false), "P x R");
        assertEquals(l(R, P), LayoutRules.matmul("mm", a, l(R, R), false, b, l(R, P), false), "R x P");
        assertEquals(l(s(0), s(1)), LayoutRules.matmul("mm", a, l(s(0), R), false, b, l(R, s(1)), false), "2D");
        // transposes: a^T [K, M] stored; S(1) of a^T is M
        assertEquals(l(s(0), R), LayoutRules.matmul("mm", Shape.of(16, 8), l(s(1), R), true, b, l(R, R), false));
        // dW = dy^T x with both batch-sharded: K sharded on both -> Partial
        assertEquals(l(P, R), LayoutRules.matmul("mm", Shape.of(32, 5), l(s(0), R), true, Shape.of(32, 7), l(s(0), R), false));
        // w stored [out, in], transposed: S(0) is N
        assertEquals(l(R, s(1)), LayoutRules.matmul("mm", a, l(R, R), false, Shape.of(12, 16), l(R, s(0)), true));
        // batched with the same batch shard on both
        Shape q = Shape.of(2, 8, 5, 3);
        assertEquals(l(R, s(1)), LayoutRules.matmul("mm", q, l(R, s(1)), false, q, l(R, s(1)), true));
        rejects(() -> LayoutRules.matmul("mm", a, l(R, s(1)), false, b, l(R, R), false), "mm", "[R, S(1)]", "[R, R]", "K");
        rejects(() -> LayoutRules.matmul("mm", a, l(P, R), false, b, l(P, R), false), "mm");
        rejects(() -> LayoutRules.matmul("mm", q, l(R, s(1)), false, q, l(R, R), true), "batch");
    }

    @Test
    void broadcastOperandFollowsTheDimsItCovers() {
        Shape x = Shape.of(4, 8);
        Shape bias = Shape.of(8);
        assertEquals(l(s(0), R), LayoutRules.broadcast("add", x, l(s(0), R), bias, l(R, R), false));
        assertEquals(l(R, s(1)), LayoutRules.broadcast("add", x, l(R, s(1)), bias, l(R, s(0)), false));
        rejects(() -> LayoutRules.broadcast("add", x, l(R, s(1)), bias, l(R, R), false), "add", "S(0)");
        assertEquals(l(R, P), LayoutRules.broadcast("add", x, l(R, P), x, l(R, P), false), "P + P");
        assertEquals(l(R, P), LayoutRules.broadcast("mul", x, l(R, P), x, l(R, R), true), "P * R");
        rejects(() -> LayoutRules.broadcast("mul", x, l(R, P), x, l(R, P), true), "mul");
        rejects(() -> LayoutRules.broadcast("add", x, l(R, P), bias, l(R, R), false), "add");
    }

    @Test
    void reshapeKeepsShardsWhosePrefixIsPreserved() {
        MeshShape m = new MeshShape(1, 2);
        assertEquals(l(R, s(0)), LayoutRules.reshape("r", Shape.of(4, 3, 10), l(R, s(0)), Shape.of(12, 10), m));
        assertEquals(l(R, s(2)), LayoutRules.reshape("r", Shape.of(4, 3, 10), l(R, s(2)), Shape.of(4, 3, 2, 5), m));
        assertEquals(l(R, s(2)), LayoutRules.reshape("r", Shape.of(4, 3, 10), l(R, s(1)), Shape.of(4, 1, 3, 10),
                new MeshShape(1, 1)), "prefers the dim with size > 1");
        rejects(() -> LayoutRules.reshape("r", Shape.of(4, 3, 10), l(R, s(2)), Shape.of(120), m), "r", "sharded dim 2");
        rejects(() -> LayoutRules.reshape("r", Shape.of(4, 3, 10), l(R, s(2)), Shape.of(4, 3, 5, 2), new MeshShape(1, 2))
                , "r");
    }

    @Test
    void reductionsOverAShardedDimArePartial() {
        assertEquals(l(P, R), LayoutRules.sumRows(Shape.of(4, 8), l(s(0), R)));
        assertEquals(l(R, s(0)), LayoutRules.sumRows(Shape.of(4, 8), l(R, s(1))));
        assertEquals(l(P, s(1)), LayoutRules.reduceDim(l(s(1), s(2)), 1, false));
        assertEquals(l(P, s(2)), LayoutRules.reduceDim(l(s(1), s(2)), 1, true));
        assertEquals(l(s(2), R), LayoutRules.permute(l(s(1), R), new int[]{0, 2, 1, 3}));
    }

    @Test
    void collectivesChangeOneAxis() {
        Shape x = Shape.of(8, 8);
        assertEquals(l(s(0), R), LayoutRules.allGather("ag", x, l(s(0), s(1)), 1, 1));
        rejects(() -> LayoutRules.allGather("ag", x, l(s(0), R), 1, 1), "ag", "S(1)");
        assertEquals(l(s(0), s(1)), LayoutRules.reduceScatter("rs", x, l(s(0), P), 1, 1, MESH));
        rejects(() -> LayoutRules.reduceScatter("rs", x, l(s(0), R), 1, 1, MESH), "rs", "Partial");
        rejects(() -> LayoutRules.reduceScatter("rs", x, l(s(0), P), 0, 1, MESH), "both mesh axes");
        assertEquals(l(s(0), R), LayoutRules.allReduce("ar", x, l(s(0), P), 1));
        assertEquals(l(s(0), R), LayoutRules.allReduce("ar", x, l(s(0), R), 1));
        rejects(() -> LayoutRules.allReduce("ar", x, l(s(0), R), 0), "ar", "sharded");
    }

    @Test
    void rowWiseAndNonlinearOpsRejectSplitRowsAndPartials() {
        rejects(() -> LayoutRules.requireWholeLastDim("softmax", Shape.of(4, 8), l(R, s(1))), "softmax", "last dim");
        rejects(() -> LayoutRules.requireNoPartial("gelu", l(P, R)), "gelu", "Partial");
        LayoutRules.requireWholeLastDim("softmax", Shape.of(4, 8), l(s(0), R));
    }

    @Test
    void embeddingLayouts() {
        Shape ids = Shape.of(4, 6);
        Shape table = Shape.of(10, 8);
        assertEquals(l(s(0), R), LayoutRules.embedding("e", ids, l(s(0), R), table, l(R, R)));
        assertEquals(l(R, s(2)), LayoutRules.embedding("e", ids, l(R, R), table, l(R, s(1))));
        assertEquals(l(R, P), LayoutRules.embedding("e", ids, l(R, R), table, l(R, s(0))));
        rejects(() -> LayoutRules.embedding("e", ids, l(R, s(0)), table, l(R, s(1))), "e", "mesh axis 1");
        LayoutRules.embeddingBackward("eb", ids, l(s(0), R), l(s(0), R), l(P, R));
        rejects(() -> LayoutRules.embeddingBackward("eb", ids, l(s(0), R), l(s(0), R), l(R, R)), "eb");
    }
}

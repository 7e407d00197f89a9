package dev.ttpipe.device;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.ToDoubleFunction;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The behaviour every backend with real math must show: each op's forward against a
 * double-precision {@link Reference}, each backward against central finite differences of that
 * reference, collectives against single-device math, layouts, errors. A backend passes by
 * subclassing this and opening its meshes; nothing here knows a backend's internals.
 */
public abstract class OpsContractTest {
    /** Opens a mesh of this backend. */
    protected abstract MeshDevice open(MeshShape shape, MeshOptions options);

    private final List<MeshDevice> opened = new ArrayList<>();
    protected final Random rnd = new Random(42);

    protected MeshDevice mesh(int rows, int cols) {
        return mesh(rows, cols, MeshOptions.defaults().withThreads(2));
    }

    protected MeshDevice mesh(int rows, int cols, MeshOptions options) {
        MeshDevice m = open(new MeshShape(rows, cols), options);
        opened.add(m);
        return m;
    }

    protected Ops ops(int rows, int cols) {
        return mesh(rows, cols).asSubmesh().ops();
    }

    @AfterEach
    void closeMeshes() {
        for (MeshDevice m : opened) m.close();
        opened.clear();
    }

    // ---- helpers -------------------------------------------------------------------------------------

    protected double[] random(int n) {
        double[] x = new double[n];
        for (int i = 0; i < n; i++) x[i] = (float) rnd.nextGaussian(); // exactly representable in fp32
        return x;
    }

    protected static int numel(int... dims) {
        int n = 1;
        for (int d : dims) n *= d;
        return n;
    }

    protected static Tensor put(Ops ops, double[] x, Shape shape, Layout layout) {
        return ops.fromHost(Reference.toFloat(x), shape, layout, DType.FP32);
    }

    protected static Tensor put(Ops ops, double[] x, int... dims) {
        return put(ops, x, Shape.of(dims), Layout.REPLICATED);
    }

    protected static void assertClose(double[] expected, float[] actual, double atol, double rtol, String what) {
        assertEquals(expected.length, actual.length, what + ": length");
        double worst = 0;
        int at = -1;
        for (int i = 0; i < expected.length; i++) {
            double err = Math.abs(expected[i] - actual[i]) - (atol + rtol * Math.abs(expected[i]));
            if (Double.isNaN(actual[i]) || err > worst) {
                worst = Double.isNaN(actual[i]) ? Double.POSITIVE_INFINITY : err;
                at = i;
            }
        }
        if (at >= 0) {
            throw new AssertionError(what + ": element " + at + " expected " + expected[at] + " got " + actual[at]
                    + " (tolerance " + atol + " + " + rtol + " * |expected|)");
        }
    }

    protected static void assertClose(double[] expected, float[] actual, String what) {
        assertClose(expected, actual, 1e-4, 1e-4, what);
    }

    /** Compares a backend's backward (given) with the finite-difference gradient of the double reference L(x). */
    protected static void assertGradient(ToDoubleFunction<double[]> loss, double[] x, float[] analytic, String what) {
        double[] fd = Reference.gradient(loss, x, 1e-5);
        assertClose(fd, analytic, 2e-4, 2e-3, what + " vs finite differences");
    }

    private static DeviceException expectError(Runnable r, String... fragments) {
        DeviceException e = assertThrows(DeviceException.class, r::run);
        for (String f : fragments) {
            assertTrue(e.getMessage().contains(f), "message '" + e.getMessage() + "' should contain '" + f + "'");
        }
        return e;
    }

    // ---- creation, transfer, views --------------------------------------------------------------------

    @ParameterizedTest(name = "mesh [{0}, {1}] layout axis0={2} axis1={3}")
    @CsvSource({"1,1,R,R", "1,2,R,S1", "2,1,S0,R", "2,4,S0,S2", "2,4,R,S1", "2,4,S2,R", "1,8,R,S0"})
    void fromHostThenToHostRoundTripsEveryLayout(int rows, int cols, String p0, String p1) {
        Ops ops = ops(rows, cols);
        Layout layout = new Layout(placement(p0), placement(p1));
        Shape shape = Shape.of(8, 4, 16);
        double[] x = random(numel(8, 4, 16));
        try (Tensor t = put(ops, x, shape, layout)) {
            assertClose(x, t.toHost(), 0, 1e-7, "round trip");
            assertEquals(shape, t.shape());
            Shape local = t.localShape();
            assertEquals(local.numel() * 4, t.bytesPerDevice());
            assertEquals(shape.numel() * (rows * cols) / layoutParts(layout, rows, cols), local.numel() * (rows * cols));
        }
    }

    private static int layoutParts(Layout l, int rows, int cols) {
        int parts = 1;
        if (l.axis0() instanceof Placement.Shard) parts *= rows;
        if (l.axis1() instanceof Placement.Shard) parts *= cols;
        return parts;
    }

    protected static Placement placement(String s) {
        if (s.equals("R")) return Placement.REPLICATE;
        if (s.equals("P")) return Placement.PARTIAL;
        return Placement.shard(Integer.parseInt(s.substring(1)));
    }

    @Test
    void shardedPiecesAreTheSlicesOfTheLogicalTensor() {
        Ops ops = ops(1, 4);
        double[] x = new double[8 * 2];
        for (int i = 0; i < x.length; i++) x[i] = i;
        try (Tensor t = put(ops, x, Shape.of(8, 2), Layout.shard(0, 1));
             Tensor r = put(ops, x, Shape.of(8, 2), Layout.REPLICATED)) {
            assertEquals(Shape.of(2, 2), t.localShape());
            assertArrayEquals(new float[]{4, 5, 6, 7}, t.toHostLocal(1));
            assertArrayEquals(new float[]{12, 13, 14, 15}, t.toHostLocal(3));
            for (int d = 0; d < 4; d++) assertArrayEquals(Reference.toFloat(x), r.toHostLocal(d), "replica " + d);
        }
    }

    @Test
    void lastDimShardCutsEveryRow() {
        Ops ops = ops(1, 2);
        double[] x = {0, 1, 2, 3, 4, 5, 6, 7};
        try (Tensor t = put(ops, x, Shape.of(2, 4), Layout.shard(-1, 1))) {
            assertEquals(Layout.shard(1, 1), t.layout());
            assertArrayEquals(new float[]{0, 1, 4, 5}, t.toHostLocal(0));
            assertArrayEquals(new float[]{2, 3, 6, 7}, t.toHostLocal(1));
        }
    }

    @Test
    void partialPiecesAreSummedOnTheWayBack() {
        Ops ops = ops(1, 3);
        float[][] pieces = {{1, 2}, {10, 20}, {100, 200}};
        try (Tensor t = ops.fromHostLocal(pieces, Shape.of(2), new Layout(Placement.REPLICATE, Placement.PARTIAL), DType.FP32)) {
            assertArrayEquals(new float[]{111, 222}, t.toHost());
            assertArrayEquals(new float[]{10, 20}, t.toHostLocal(1));
        }
    }

    @Test
    void bf16TensorsStoreRoundedValues() {
        Ops ops = ops(1, 2);
        float[] x = {1.0f, 1.00390625f, 1.01171875f, -3.3f, 65504f, 1e-30f};
        try (Tensor t = ops.fromHost(x, Shape.of(6), Layout.REPLICATED, DType.BF16)) {
            assertEquals(DType.BF16, t.dtype());
            assertEquals(12, t.bytesPerDevice());
            float[] back = t.toHost();
            for (int i = 0; i < x.length; i++) assertEquals(BFloat16.round(x[i]), back[i], "element " + i);
        }
    }

    @Test
    void intTensorsRoundTrip() {
        Ops ops = ops(2, 1);
        int[] ids = {3, 1, 4, 1, 5, 9};
        try (Tensor t = ops.fromHostInts(ids, Shape.of(2, 3), Layout.shard(0, 0))) {
            assertArrayEquals(ids, t.toHostInts());
            assertArrayEquals(new float[]{1, 5, 9}, t.toHostLocal(1));
        }
    }

    @Test
    void zerosFullCopyAndTypecast() {
        Ops ops = ops(1, 2);
        try (Tensor z = ops.zeros(Shape.of(3, 4), Layout.shard(1, 1), DType.FP32);
             Tensor f = ops.full(Shape.of(3, 4), Layout.REPLICATED, DType.BF16, 1.1f);
             Tensor c = ops.copy(f);
             Tensor t = ops.typecast(f, DType.FP32);
             Tensor back = ops.typecast(ops.full(Shape.of(2), Layout.REPLICATED, DType.FP32, 2.7f), DType.BF16)) {
            assertArrayEquals(new float[12], z.toHost());
            float[] expect = new float[12];
            Arrays.fill(expect, BFloat16.round(1.1f));
            assertArrayEquals(expect, c.toHost());
            assertEquals(DType.FP32, t.dtype());
            assertArrayEquals(expect, t.toHost());
            assertArrayEquals(new float[]{BFloat16.round(2.7f), BFloat16.round(2.7f)}, back.toHost());
        }
    }

    @Test
    void copyIntoConvertsAndOverwrites() {
        Ops ops = ops(1, 1);
        double[] x = random(10);
        try (Tensor src = put(ops, x, 10); Tensor dst = ops.zeros(Shape.of(10), Layout.REPLICATED, DType.BF16)) {
            ops.copyInto(dst, src);
            float[] got = dst.toHost();
            for (int i = 0; i < 10; i++) assertEquals(BFloat16.round((float) x[i]), got[i]);
        }
    }

    @Test
    void reshapeIsAViewThatSharesMemory() {
        Ops ops = ops(1, 1);
        double[] x = random(12);
        Tensor t = put(ops, x, 3, 4);
        Tensor v = ops.reshape(t, Shape.of(2, 6));
        assertEquals(Shape.of(2, 6), v.shape());
        ops.scaleInPlace(v, 2f);
        double[] twice = Arrays.stream(x).map(d -> 2 * (float) d).toArray();
        assertClose(twice, t.toHost(), 0, 1e-7, "base sees the view's write");
        long inUse = ops.submesh().maxInUse();
        t.close();
        assertEquals(inUse, ops.submesh().maxInUse(), "the view keeps the memory");
        assertClose(twice, v.toHost(), 0, 1e-7, "view after base closed");
        v.close();
        assertEquals(0, ops.submesh().maxInUse());
    }

    @Test
    void permuteReordersDims() {
        Ops ops = ops(1, 1);
        int a = 3, b = 5, c = 7, d = 2;
        double[] x = random(numel(a, b, c, d));
        try (Tensor t = put(ops, x, a, b, c, d); Tensor p = ops.permute(t, 2, 0, 3, 1)) {
            assertEquals(Shape.of(c, a, d, b), p.shape());
            double[] expect = new double[x.length];
            for (int i = 0; i < a; i++)
                for (int j = 0; j < b; j++)
                    for (int k = 0; k < c; k++)
                        for (int l = 0; l < d; l++)
                            expect[((k * a + i) * d + l) * b + j] = x[((i * b + j) * c + k) * d + l];
            assertClose(expect, p.toHost(), 0, 0, "permute");
        }
    }

    @Test
    void permuteMovesTheShardAndWorksOnBf16() {
        Ops ops = ops(1, 2);
        double[] x = random(numel(2, 4, 6, 2));
        try (Tensor t = ops.fromHost(Reference.toFloat(x), Shape.of(2, 4, 6, 2), Layout.shard(2, 1), DType.BF16);
             Tensor p = ops.permute(t, 0, 2, 1, 3)) {
            assertEquals(Layout.shard(1, 1), p.layout());
            try (Tensor r = ops.permute(p, 0, 2, 1, 3)) {
                assertArrayEquals(t.toHost(), r.toHost());
            }
        }
    }

    // ---- matmul ---------------------------------------------------------------------------------------

    @ParameterizedTest(name = "transposeA={0} transposeB={1}")
    @CsvSource({"false,false", "false,true", "true,false", "true,true"})
    void matmulMatchesReferenceOnOddShapes(boolean ta, boolean tb) {
        Ops ops = ops(1, 1);
        int m = 13, k = 17, n = 11;
        double[] a = random(m * k);
        double[] b = random(k * n);
        try (Tensor ta_ = put(ops, a, ta ? new int[]{k, m} : new int[]{m, k});
             Tensor tb_ = put(ops, b, tb ? new int[]{n, k} : new int[]{k, n});
             Tensor c = ops.matmul(ta_, tb_, ta, tb)) {
            assertEquals(Shape.of(m, n), c.shape());
            assertClose(Reference.matmul(a, b, 1, m, n, k, ta, tb, false), c.toHost(), "matmul");
        }
    }

    @Test
    void batchedMatmulWithSharedAndPerBatchB() {
        Ops ops = ops(1, 1);
        int batch = 3, m = 5, k = 7, n = 4;
        double[] a = random(batch * m * k);
        double[] b2 = random(k * n);
        double[] b3 = random(batch * n * k);
        try (Tensor ta = put(ops, a, batch, m, k); Tensor tb2 = put(ops, b2, k, n); Tensor tb3 = put(ops, b3, batch, n, k);
             Tensor c2 = ops.matmul(ta, tb2, false, false); Tensor c3 = ops.matmul(ta, tb3, false, true)) {
            assertEquals(Shape.of(batch, m, n), c2.shape());
            assertClose(Reference.matmul(a, b2, batch, m, n, k, false, false, false), c2.toHost(), "shared b");
            assertClose(Reference.matmul(a, b3, batch, m, n, k, false, true, true), c3.toHost(), "batched b");
        }
    }

    @Test
    void batchedMatmulWithTransposedA() {
        Ops ops = ops(1, 1);
        int batch = 2, m = 3, k = 5, n = 6;
        double[] a = random(batch * k * m);
        double[] b = random(batch * k * n);
        try (Tensor ta = put(ops, a, batch, k, m); Tensor tb = put(ops, b, batch, k, n); Tensor c = ops.matmul(ta, tb, true, false)) {
            assertClose(Reference.matmul(a, b, batch, m, n, k, true, false, true), c.toHost(), "a^T b");
        }
    }

    @Test
    void matmulIntoScalesAndAccumulates() {
        Ops ops = ops(1, 1);
        double[] a = random(4 * 6);
        double[] b = random(6 * 5);
        double[] c0 = random(4 * 5);
        try (Tensor ta = put(ops, a, 4, 6); Tensor tb = put(ops, b, 6, 5); Tensor c = put(ops, c0, 4, 5)) {
            ops.matmulInto(c, ta, tb, false, false, 0.5f, 2f);
            double[] ab = Reference.matmul(a, b, 1, 4, 5, 6, false, false, false);
            double[] expect = new double[20];
            for (int i = 0; i < 20; i++) expect[i] = 0.5 * ab[i] + 2 * (float) c0[i];
            assertClose(expect, c.toHost(), "alpha ab + beta c");
            ops.matmulInto(c, ta, tb, false, false, 1f, 0f);
            assertClose(ab, c.toHost(), "beta 0 overwrites");
        }
    }

    @Test
    void linearAddsBias() {
        Ops ops = ops(1, 1);
        int rows = 2 * 3, in = 9, out = 5;
        double[] x = random(rows * in);
        double[] w = random(out * in);
        double[] bias = random(out);
        try (Tensor tx = put(ops, x, 2, 3, in); Tensor tw = put(ops, w, out, in); Tensor tbias = put(ops, bias, out);
             Tensor y = ops.linear(tx, tw, tbias)) {
            assertEquals(Shape.of(2, 3, out), y.shape());
            double[] expect = Reference.matmul(x, w, 1, rows, out, in, false, true, false);
            for (int r = 0; r < rows; r++) for (int j = 0; j < out; j++) expect[r * out + j] += bias[j];
            assertClose(expect, y.toHost(), "linear");
        }
    }

    @Test
    void bf16MatmulComputesInFp32FromRoundedInputs() {
        Ops ops = ops(1, 1);
        double[] a = random(6 * 8);
        double[] b = random(8 * 3);
        try (Tensor ta = ops.fromHost(Reference.toFloat(a), Shape.of(6, 8), Layout.REPLICATED, DType.BF16);
             Tensor tb = ops.fromHost(Reference.toFloat(b), Shape.of(8, 3), Layout.REPLICATED, DType.BF16);
             Tensor c = ops.matmul(ta, tb, false, false)) {
            assertEquals(DType.BF16, c.dtype());
            double[] ar = Reference.toDouble(ta.toHost());
            double[] br = Reference.toDouble(tb.toHost());
            double[] expect = Reference.matmul(ar, br, 1, 6, 3, 8, false, false, false);
            assertClose(expect, c.toHost(), 0, 8e-3, "bf16 matmul within bf16 output rounding");
        }
    }

    // ---- embedding ------------------------------------------------------------------------------------

    @Test
    void embeddingPicksRowsAndBackwardScatterAdds() {
        Ops ops = ops(1, 1);
        int v = 7, d = 5;
        int[] ids = {3, 0, 3, 6, 2, 3};
        double[] table = random(v * d);
        double[] dOut = random(ids.length * d);
        try (Tensor tids = ops.fromHostInts(ids, Shape.of(2, 3), Layout.REPLICATED);
             Tensor tt = put(ops, table, v, d);
             Tensor out = ops.embedding(tids, tt);
             Tensor tdo = put(ops, dOut, 2, 3, d);
             Tensor grad = ops.full(Shape.of(v, d), Layout.REPLICATED, DType.FP32, 7f)) {
            assertEquals(Shape.of(2, 3, d), out.shape());
            double[] expect = new double[ids.length * d];
            double[] dTable = new double[v * d];
            for (int r = 0; r < ids.length; r++) {
                for (int j = 0; j < d; j++) {
                    expect[r * d + j] = table[ids[r] * d + j];
                    dTable[ids[r] * d + j] += dOut[r * d + j];
                }
            }
            assertClose(expect, out.toHost(), 0, 0, "lookup");
            ops.embeddingBackward(tids, tdo, grad, false);
            assertClose(dTable, grad.toHost(), "scatter-add overwrites");
            ops.embeddingBackward(tids, tdo, grad, true);
            assertClose(Arrays.stream(dTable).map(x -> 2 * x).toArray(), grad.toHost(), "scatter-add accumulates");
        }
    }

    @Test
    void vocabParallelEmbeddingGivesPartialSums() {
        Ops ops = ops(1, 2);
        int v = 6, d = 3;
        int[] ids = {0, 5, 2, 3};
        double[] table = random(v * d);
        try (Tensor tids = ops.fromHostInts(ids, Shape.of(4), Layout.REPLICATED);
             Tensor tt = put(ops, table, Shape.of(v, d), Layout.shard(0, 1));
             Tensor out = ops.embedding(tids, tt)) {
            assertEquals(new Layout(Placement.REPLICATE, Placement.PARTIAL), out.layout());
            double[] expect = new double[ids.length * d];
            for (int r = 0; r < ids.length; r++) for (int j = 0; j < d; j++) expect[r * d + j] = table[ids[r] * d + j];
            assertClose(expect, out.toHost(), 0, 0, "sum of the devices' rows");
        }
    }

    @Test
    void embeddingRejectsIdsOutOfRangeNamingTheIdAndV() {
        Ops ops = ops(1, 1);
        try (Tensor tids = ops.fromHostInts(new int[]{1, 9}, Shape.of(2), Layout.REPLICATED);
             Tensor neg = ops.fromHostInts(new int[]{-1}, Shape.of(1), Layout.REPLICATED);
             Tensor tt = ops.zeros(Shape.of(4, 2), Layout.REPLICATED, DType.FP32);
             Tensor dOut = ops.zeros(Shape.of(2, 2), Layout.REPLICATED, DType.FP32)) {
            long before = ops.submesh().maxInUse();
            expectError(() -> ops.embedding(tids, tt), "embedding", "id 9", "[0, 4)");
            expectError(() -> ops.embedding(neg, tt), "id -1");
            expectError(() -> ops.embeddingBackward(tids, dOut, tt, true), "embeddingBackward", "id 9");
            assertEquals(before, ops.submesh().maxInUse(), "a failed op leaves nothing allocated");
            assertArrayEquals(new float[8], tt.toHost(), "nothing written");
        }
    }

    // ---- normalisation --------------------------------------------------------------------------------

    @Test
    void layerNormForwardAndBackward() {
        Ops ops = ops(1, 1);
        int rows = 3 * 5, d = 7;
        double[] x = random(rows * d);
        double[] g = random(d);
        double[] b = random(d);
        double[] w = random(rows * d);
        double eps = 1e-5;
        try (Tensor tx = put(ops, x, 3, 5, d); Tensor tg = put(ops, g, d); Tensor tb = put(ops, b, d);
             NormOutput o = ops.layerNorm(tx, tg, tb, (float) eps); Tensor dy = put(ops, w, 3, 5, d);
             Tensor dx = ops.layerNormBackwardInput(dy, tx, tg, o.mean(), o.rstd());
             Tensor dg = ops.zeros(Shape.of(d), Layout.REPLICATED, DType.FP32);
             Tensor db = ops.zeros(Shape.of(d), Layout.REPLICATED, DType.FP32)) {
            assertEquals(Shape.of(3, 5), o.mean().shape());
            assertClose(Reference.layerNorm(x, g, b, rows, d, eps), o.y().toHost(), "forward");
            assertGradient(xx -> Reference.dot(w, Reference.layerNorm(xx, g, b, rows, d, eps)), x, dx.toHost(), "dx");
            ops.layerNormBackwardWeight(dy, tx, o.mean(), o.rstd(), dg, db, false);
            assertGradient(gg -> Reference.dot(w, Reference.layerNorm(x, gg, b, rows, d, eps)), g, dg.toHost(), "dgamma");
            assertGradient(bb -> Reference.dot(w, Reference.layerNorm(x, g, bb, rows, d, eps)), b, db.toHost(), "dbeta");
            float[] once = dg.toHost();
            ops.layerNormBackwardWeight(dy, tx, o.mean(), o.rstd(), dg, null, true);
            float[] twice = dg.toHost();
            for (int j = 0; j < d; j++) assertEquals(2 * once[j], twice[j], 1e-5, "accumulate");
        }
    }

    @Test
    void rmsNormForwardAndBackward() {
        Ops ops = ops(1, 1);
        int rows = 13, d = 17;
        double[] x = random(rows * d);
        double[] g = random(d);
        double[] w = random(rows * d);
        double eps = 1e-6;
        try (Tensor tx = put(ops, x, rows, d); Tensor tg = put(ops, g, d); NormOutput o = ops.rmsNorm(tx, tg, (float) eps);
             Tensor dy = put(ops, w, rows, d); Tensor dx = ops.rmsNormBackwardInput(dy, tx, tg, o.rstd());
             Tensor dg = ops.zeros(Shape.of(d), Layout.REPLICATED, DType.FP32)) {
            assertEquals(null, o.mean());
            assertClose(Reference.rmsNorm(x, g, rows, d, eps), o.y().toHost(), "forward");
            assertGradient(xx -> Reference.dot(w, Reference.rmsNorm(xx, g, rows, d, eps)), x, dx.toHost(), "dx");
            ops.rmsNormBackwardWeight(dy, tx, o.rstd(), dg, false);
            assertGradient(gg -> Reference.dot(w, Reference.rmsNorm(x, gg, rows, d, eps)), g, dg.toHost(), "dgamma");
        }
    }

    @Test
    void normsOnBatchShardedRowsGivePartialWeightGradients() {
        Ops ops = ops(2, 1);
        int rows = 6, d = 5;
        double[] x = random(rows * d);
        double[] g = random(d);
        double[] w = random(rows * d);
        Layout rowsSharded = Layout.shard(0, 0);
        Layout partial = new Layout(Placement.PARTIAL, Placement.REPLICATE);
        try (Tensor tx = put(ops, x, Shape.of(rows, d), rowsSharded); Tensor tg = put(ops, g, d);
             NormOutput o = ops.rmsNorm(tx, tg, 1e-5f); Tensor dy = put(ops, w, Shape.of(rows, d), rowsSharded);
             Tensor dg = ops.zeros(Shape.of(d), partial, DType.FP32)) {
            assertEquals(rowsSharded, o.y().layout());
            assertClose(Reference.rmsNorm(x, g, rows, d, 1e-5), o.y().toHost(), "forward on shards");
            ops.rmsNormBackwardWeight(dy, tx, o.rstd(), dg, false);
            assertGradient(gg -> Reference.dot(w, Reference.rmsNorm(x, gg, rows, d, 1e-5)), g, dg.toHost(),
                    "partial dgamma summed");
            try (Tensor replicated = ops.zeros(Shape.of(d), Layout.REPLICATED, DType.FP32)) {
                expectError(() -> ops.rmsNormBackwardWeight(dy, tx, o.rstd(), replicated, false), "rmsNormBackwardWeight",
                        "layout");
            }
        }
    }

    // ---- softmax, activations, rope -------------------------------------------------------------------

    @ParameterizedTest(name = "causal={0} tq={1} tk={2}")
    @CsvSource({"false,5,7", "true,6,6", "true,3,7", "true,7,3"})
    void softmaxForwardAndBackward(boolean causal, int tq, int tk) {
        Ops ops = ops(1, 1);
        int b = 2;
        int rows = b * tq;
        double scale = 0.7;
        double[] x = random(rows * tk);
        double[] w = random(rows * tk);
        try (Tensor tx = put(ops, x, b, tq, tk); Tensor y = ops.softmax(tx, (float) scale, causal);
             Tensor dy = put(ops, w, b, tq, tk); Tensor dx = ops.softmaxBackward(y, dy, (float) scale)) {
            assertClose(Reference.softmax(x, rows, tk, scale, causal, tq), y.toHost(), "forward");
            assertGradient(xx -> Reference.dot(w, Reference.softmax(xx, rows, tk, scale, causal, tq)), x, dx.toHost(), "dx");
        }
    }

    @Test
    void causalSoftmaxWithQueriesShardedAcrossDevices() {
        Ops ops = ops(1, 2);
        int tq = 4, tk = 4;
        double[] x = random(2 * tq * tk);
        try (Tensor tx = put(ops, x, Shape.of(2, tq, tk), Layout.shard(1, 1)); Tensor y = ops.softmax(tx, 1f, true)) {
            assertClose(Reference.softmax(x, 2 * tq, tk, 1, true, tq), y.toHost(), "each device masks its own queries");
        }
    }

    @Test
    void softmaxIsStableForLargeInputs() {
        Ops ops = ops(1, 1);
        double[] x = {1000, 1001, 999, -1000};
        try (Tensor tx = put(ops, x, 1, 4); Tensor y = ops.softmax(tx, 1f, false)) {
            assertClose(Reference.softmax(x, 1, 4, 1, false, 1), y.toHost(), "no overflow");
        }
    }

    @Test
    void geluAndSiluForwardAndBackward() {
        Ops ops = ops(1, 1);
        double[] x = random(3 * 5 * 7);
        for (int i = 0; i < 6; i++) x[i] *= 6;
        double[] w = random(x.length);
        try (Tensor tx = put(ops, x, 3, 5, 7); Tensor dy = put(ops, w, 3, 5, 7);
             Tensor g = ops.gelu(tx); Tensor dg = ops.geluBackward(dy, tx);
             Tensor s = ops.silu(tx); Tensor ds = ops.siluBackward(dy, tx)) {
            assertClose(Arrays.stream(x).map(Reference::gelu).toArray(), g.toHost(), "gelu");
            assertClose(Arrays.stream(x).map(Reference::silu).toArray(), s.toHost(), "silu");
            assertGradient(xx -> Reference.dot(w, Arrays.stream(xx).map(Reference::gelu).toArray()), x, dg.toHost(), "gelu'");
            assertGradient(xx -> Reference.dot(w, Arrays.stream(xx).map(Reference::silu).toArray()), x, ds.toHost(), "silu'");
        }
    }

    @Test
    void geluHandlesLargeMagnitudes() {
        Ops ops = ops(1, 1);
        double[] x = {-1e4, -100, -20, -10, 10, 20, 100, 1e4, 0};
        try (Tensor tx = put(ops, x, x.length); Tensor g = ops.gelu(tx);
             Tensor ones = ops.full(Shape.of(x.length), Layout.REPLICATED, DType.FP32, 1f);
             Tensor dg = ops.geluBackward(ones, tx)) {
            assertClose(Arrays.stream(x).map(Reference::gelu).toArray(), g.toHost(), 1e-6, 1e-6, "gelu tails");
            float[] d = dg.toHost();
            for (float v : d) assertFalse(Float.isNaN(v) || Float.isInfinite(v), "finite derivative");
            assertEquals(0f, d[0], 1e-6);
            assertEquals(1f, d[7], 1e-6);
        }
    }

    @Test
    void ropeRotatesPairsAndInverseUndoesIt() {
        Ops ops = ops(1, 1);
        int b = 2, h = 3, t = 5, hd = 8;
        double[] x = random(numel(b, h, t, hd));
        try (Tensor tx = put(ops, x, b, h, t, hd); Tensor r = ops.rope(tx, 10000f, false); Tensor back = ops.rope(r, 10000f, true)) {
            assertClose(Reference.rope(x, b * h, t, hd, 10000, false), r.toHost(), "rope");
            assertClose(x, back.toHost(), "inverse");
        }
    }

    /** Whether this backend applies Llama 3.1's scaled frequencies (the ttnn bridge's rope takes theta only). */
    protected boolean appliesScaledRope() {
        return true;
    }

    @Test
    void ropeWithLlama3ScalingTurnsByTheRescaledFrequencies() {
        Ops ops = ops(1, 1);
        int b = 1, h = 2, t = 40, hd = 8;
        double[] x = random(numel(b, h, t, hd));
        // wavelengths 6.3, 63, 628 and 6283 positions against 128 / 4 and 128 / 1: kept, blended, slowed, slowed
        RopeFrequencies f = new RopeFrequencies(10000f, new RopeFrequencies.Llama3Scaling(4, 1, 4, 128));
        double[] invFreq = Reference.llama3InverseFrequencies(10000, hd, 4, 1, 4, 128);
        try (Tensor tx = put(ops, x, b, h, t, hd)) {
            if (!appliesScaledRope()) {
                DeviceException e = assertThrows(DeviceException.class, () -> ops.rope(tx, f, false).close());
                assertTrue(e.getMessage().contains("rope_scaling"), e.getMessage());
                return;
            }
            try (Tensor r = ops.rope(tx, f, false); Tensor back = ops.rope(r, f, true); Tensor plain = ops.rope(tx, 10000f, false)) {
                assertClose(Reference.rope(x, b * h, t, hd, invFreq, false), r.toHost(), "scaled rope");
                assertClose(x, back.toHost(), "inverse of the scaled rope");
                double moved = 0;
                float[] scaled = r.toHost(), unscaled = plain.toHost();
                for (int i = 0; i < scaled.length; i++) moved = Math.max(moved, Math.abs(scaled[i] - unscaled[i]));
                assertTrue(moved > 0.1, "the scaling changes the rotation (max difference " + moved + ")");
            }
        }
    }

    @Test
    void inverseRopeAndSumGroupsAreTheAdjointsTheirBackwardsNeed() {
        Ops ops = ops(1, 1);
        int b = 2, h = 4, t = 5, hd = 6, r = 2;
        double[] x = random(numel(b, h, t, hd));
        double[] w = random(x.length);
        double[] wr = random(numel(b, h * r, t, hd));
        try (Tensor tx = put(ops, x, b, h, t, hd); Tensor tw = put(ops, w, b, h, t, hd); Tensor twr = put(ops, wr, b, h * r, t, hd);
             Tensor fx = ops.rope(tx, 100f, false); Tensor bw = ops.rope(tw, 100f, true);
             Tensor rep = ops.repeatInterleave(tx, 1, r); Tensor grp = ops.sumGroups(twr, 1, r)) {
            // <f(x), w> = <x, f^T(w)>: the backward of rope is the inverse rotation, of repeat the group sum
            assertEquals(Reference.dot(Reference.toDouble(fx.toHost()), w), Reference.dot(x, Reference.toDouble(bw.toHost())), 1e-4);
            assertEquals(Reference.dot(Reference.toDouble(rep.toHost()), wr), Reference.dot(x, Reference.toDouble(grp.toHost())), 1e-4);
        }
    }

    @Test
    void ropeWithSequenceShardedUsesGlobalPositions() {
        Ops ops = ops(1, 2);
        int b = 1, h = 2, t = 6, hd = 4;
        double[] x = random(numel(b, h, t, hd));
        try (Tensor tx = put(ops, x, Shape.of(b, h, t, hd), Layout.shard(2, 1)); Tensor r = ops.rope(tx, 500f, false)) {
            assertClose(Reference.rope(x, b * h, t, hd, 500, false), r.toHost(), "rope on sequence shards");
        }
    }

    // ---- elementwise and reductions ---------------------------------------------------------------------

    @Test
    void addAndMulBroadcastTrailingDims() {
        Ops ops = ops(1, 1);
        double[] a = random(3 * 5 * 7);
        double[] b = random(5 * 7);
        double[] c = random(3 * 5 * 7);
        try (Tensor ta = put(ops, a, 3, 5, 7); Tensor tb = put(ops, b, 5, 7); Tensor tc = put(ops, c, 3, 5, 7);
             Tensor sum = ops.add(ta, tb); Tensor prod = ops.mul(ta, tb); Tensor full = ops.add(ta, tc)) {
            double[] es = new double[a.length];
            double[] ep = new double[a.length];
            double[] ef = new double[a.length];
            for (int i = 0; i < a.length; i++) {
                es[i] = a[i] + b[i % b.length];
                ep[i] = a[i] * b[i % b.length];
                ef[i] = a[i] + c[i];
            }
            assertClose(es, sum.toHost(), "add");
            assertClose(ep, prod.toHost(), "mul");
            assertClose(ef, full.toHost(), "add same shape");
        }
    }

    @Test
    void scaleAddInPlaceAndScaleInPlace() {
        Ops ops = ops(1, 1);
        double[] a = random(11);
        double[] b = random(11);
        try (Tensor ta = put(ops, a, 11); Tensor tb = put(ops, b, 11); Tensor s = ops.scale(ta, -2f)) {
            assertClose(Arrays.stream(a).map(x -> -2 * x).toArray(), s.toHost(), "scale");
            ops.addInPlace(ta, tb, 0.5f);
            double[] e = new double[11];
            for (int i = 0; i < 11; i++) e[i] = a[i] + 0.5 * b[i];
            assertClose(e, ta.toHost(), "addInPlace");
            ops.scaleInPlace(ta, 3f);
            assertClose(Arrays.stream(e).map(x -> 3 * x).toArray(), ta.toHost(), "scaleInPlace");
        }
    }

    @Test
    void sumRowsSumAndSumSquares() {
        Ops ops = ops(1, 1);
        int a = 3, b = 5, c = 7;
        double[] x = random(a * b * c);
        try (Tensor tx = put(ops, x, a, b, c); Tensor out = ops.full(Shape.of(c), Layout.REPLICATED, DType.FP32, 9f);
             Tensor s1 = ops.sum(tx, 1, false); Tensor s0 = ops.sum(tx, 0, true); Tensor s2 = ops.sum(tx, -1, false)) {
            double[] rows = new double[c];
            double[] e1 = new double[a * c];
            double[] e0 = new double[b * c];
            double[] e2 = new double[a * b];
            double sq = 0;
            for (int i = 0; i < a; i++)
                for (int j = 0; j < b; j++)
                    for (int k = 0; k < c; k++) {
                        double v = x[(i * b + j) * c + k];
                        rows[k] += v;
                        e1[i * c + k] += v;
                        e0[j * c + k] += v;
                        e2[i * b + j] += v;
                        sq += v * v;
                    }
            ops.sumRows(tx, out, false);
            assertClose(rows, out.toHost(), "sumRows");
            ops.sumRows(tx, out, true);
            assertClose(Arrays.stream(rows).map(v -> 2 * v).toArray(), out.toHost(), "sumRows accumulates");
            assertEquals(Shape.of(a, c), s1.shape());
            assertClose(e1, s1.toHost(), "sum dim 1");
            assertEquals(Shape.of(1, b, c), s0.shape());
            assertClose(e0, s0.toHost(), "sum dim 0 keepDim");
            assertClose(e2, s2.toHost(), "sum last dim");
            assertEquals(sq, ops.sumSquares(tx), 1e-9 * sq + 1e-9);
        }
    }

    @Test
    void sumSquaresCountsShardsOnceAndReplicasOnce() {
        Ops ops = ops(2, 2);
        double[] x = random(8 * 3);
        double sq = Arrays.stream(x).map(v -> (float) v * (double) (float) v).sum();
        try (Tensor s = put(ops, x, Shape.of(8, 3), Layout.shard(0, 1)); Tensor r = put(ops, x, Shape.of(8, 3), Layout.REPLICATED)) {
            assertEquals(sq, ops.sumSquares(s), 1e-9);
            assertEquals(sq, ops.sumSquares(r), 1e-9);
        }
    }

    @Test
    void sumOverAShardedDimIsPartialAndSumsRight() {
        Ops ops = ops(1, 4);
        double[] x = random(3 * 8);
        try (Tensor t = put(ops, x, Shape.of(3, 8), Layout.shard(1, 1)); Tensor s = ops.sum(t, 1, false);
             Tensor rows = ops.zeros(Shape.of(8), Layout.shard(0, 1), DType.FP32);
             Tensor bt = put(ops, x, Shape.of(8, 3), Layout.shard(0, 1));
             Tensor cols = ops.zeros(Shape.of(3), new Layout(Placement.REPLICATE, Placement.PARTIAL), DType.FP32)) {
            assertEquals(new Layout(Placement.REPLICATE, Placement.PARTIAL), s.layout());
            double[] e = new double[3];
            double[] ec = new double[8];
            double[] eb = new double[3];
            for (int i = 0; i < 3; i++) for (int j = 0; j < 8; j++) {
                e[i] += x[i * 8 + j];
                ec[j] += x[i * 8 + j];
            }
            for (int i = 0; i < 8; i++) for (int j = 0; j < 3; j++) eb[j] += x[i * 3 + j];
            assertClose(e, s.toHost(), "partial sums add up");
            ops.sumRows(t, rows, false);
            assertClose(ec, rows.toHost(), "sumRows of a last-dim shard stays sharded");
            ops.sumRows(bt, cols, false);
            assertClose(eb, cols.toHost(), "sumRows of row shards is Partial");
        }
    }

    @Test
    void repeatInterleaveAndSumGroupsAreAdjoint() {
        Ops ops = ops(1, 1);
        int b = 2, h = 3, t = 4, r = 2;
        double[] x = random(numel(b, h, t));
        double[] w = random(numel(b, h * r, t));
        try (Tensor tx = put(ops, x, b, h, t); Tensor rep = ops.repeatInterleave(tx, 1, r);
             Tensor tw = put(ops, w, b, h * r, t); Tensor g = ops.sumGroups(tw, 1, r)) {
            double[] er = new double[w.length];
            double[] eg = new double[x.length];
            for (int i = 0; i < b; i++)
                for (int k = 0; k < h * r; k++)
                    for (int j = 0; j < t; j++) {
                        er[(i * h * r + k) * t + j] = x[(i * h + k / r) * t + j];
                        eg[(i * h + k / r) * t + j] += w[(i * h * r + k) * t + j];
                    }
            assertClose(er, rep.toHost(), 0, 0, "repeatInterleave");
            assertClose(eg, g.toHost(), "sumGroups");
        }
    }

    // ---- loss -------------------------------------------------------------------------------------------

    @Test
    void crossEntropyForwardAndBackwardWithIgnoreIndex() {
        Ops ops = ops(1, 1);
        int n = 6, v = 11;
        double[] logits = random(n * v);
        int[] targets = {3, -100, 10, 0, -100, 7};
        float scale = 0.25f;
        try (Tensor tl = put(ops, logits, 2, 3, v); Tensor tt = ops.fromHostInts(targets, Shape.of(2, 3), Layout.REPLICATED);
             Tensor dl = ops.crossEntropyBackward(tl, tt, -100, scale)) {
            LossOutput loss = ops.crossEntropy(tl, tt, -100);
            assertEquals(4, loss.count());
            double expect = Reference.crossEntropy(logits, targets, v, -100);
            assertEquals(expect, loss.sum(), 1e-4 * Math.abs(expect));
            assertEquals(expect / 4, loss.mean(), 1e-4);
            assertGradient(l -> scale * Reference.crossEntropy(l, targets, v, -100), logits, dl.toHost(), "dlogits");
            float[] g = dl.toHost();
            for (int j = 0; j < v; j++) assertEquals(0f, g[v + j], "ignored row is zero");
        }
    }

    @Test
    void crossEntropyIsStableAndRejectsBadTargets() {
        Ops ops = ops(1, 1);
        double[] logits = {1000, -1000, 0, 500};
        try (Tensor tl = put(ops, logits, 1, 4); Tensor tt = ops.fromHostInts(new int[]{1}, Shape.of(1), Layout.REPLICATED);
             Tensor bad = ops.fromHostInts(new int[]{4}, Shape.of(1), Layout.REPLICATED)) {
            assertEquals(2000.0, ops.crossEntropy(tl, tt, -100).sum(), 1e-3);
            expectError(() -> ops.crossEntropy(tl, bad, -100), "crossEntropy", "target 4", "[0, 4)");
            expectError(() -> ops.crossEntropyBackward(tl, bad, -100, 1f), "crossEntropyBackward", "target 4");
        }
    }

    @Test
    void crossEntropyOverBatchShardsSumsEachTokenOnce() {
        Ops ops = ops(2, 2);
        int n = 4, v = 5;
        double[] logits = random(n * v);
        int[] targets = {1, 2, -100, 4};
        try (Tensor tl = put(ops, logits, Shape.of(n, v), Layout.shard(0, 0));
             Tensor tt = ops.fromHostInts(targets, Shape.of(n), Layout.shard(0, 0))) {
            LossOutput loss = ops.crossEntropy(tl, tt, -100);
            assertEquals(3, loss.count());
            assertEquals(Reference.crossEntropy(logits, targets, v, -100), loss.sum(), 1e-4);
        }
    }

    // ---- dropout ------------------------------------------------------------------------------------------

    @Test
    void dropoutMaskDependsOnlyOnSeedAndLogicalIndex() {
        double[] x = random(8 * 12);
        float[] whole;
        Ops one = ops(1, 1);
        try (Tensor t = put(one, x, 8, 12); Tensor y = one.dropout(t, 0.3f, 1234L, 0)) {
            whole = y.toHost();
        }
        Ops four = ops(1, 4);
        try (Tensor t = put(four, x, Shape.of(8, 12), Layout.shard(0, 1)); Tensor y = four.dropout(t, 0.3f, 1234L, 0);
             Tensor tl = put(four, x, Shape.of(8, 12), Layout.shard(1, 1)); Tensor yl = four.dropout(tl, 0.3f, 1234L, 0)) {
            assertArrayEquals(whole, y.toHost(), "batch-sharded");
            assertArrayEquals(whole, yl.toHost(), "last-dim-sharded");
        }
        // two microbatches of 4 rows with element offsets draw the batch's mask
        try (Tensor a = put(one, Arrays.copyOfRange(x, 0, 48), 4, 12); Tensor b = put(one, Arrays.copyOfRange(x, 48, 96), 4, 12);
             Tensor ya = one.dropout(a, 0.3f, 1234L, 0); Tensor yb = one.dropout(b, 0.3f, 1234L, 48)) {
            assertArrayEquals(Arrays.copyOfRange(whole, 0, 48), ya.toHost());
            assertArrayEquals(Arrays.copyOfRange(whole, 48, 96), yb.toHost());
        }
        int zeros = 0;
        for (int i = 0; i < whole.length; i++) {
            if (whole[i] == 0f) zeros++;
            else assertEquals(x[i] / 0.7, whole[i], 1e-5, "kept values are scaled by 1/(1-p)");
        }
        assertTrue(zeros > 12 && zeros < 45, "about 30% dropped: " + zeros);
    }

    @Test
    void dropoutBackwardAppliesTheSameMaskAndOtherSeedsDiffer() {
        Ops ops = ops(1, 1);
        double[] x = random(1000);
        try (Tensor t = put(ops, x, 1000); Tensor y = ops.dropout(t, 0.5f, 7L, 0); Tensor dy = ops.dropoutBackward(t, 0.5f, 7L, 0);
             Tensor other = ops.dropout(t, 0.5f, 8L, 0); Tensor none = ops.dropout(t, 0f, 7L, 0)) {
            assertArrayEquals(y.toHost(), dy.toHost());
            assertFalse(Arrays.equals(y.toHost(), other.toHost()));
            assertArrayEquals(t.toHost(), none.toHost(), "p = 0 is the identity");
            expectError(() -> ops.dropout(t, 1f, 7L, 0), "dropout", "[0, 1)");
        }
    }

    // ---- optimizers -----------------------------------------------------------------------------------------

    @Test
    void adamwMatchesTorchSemantics() {
        Ops ops = ops(1, 2);
        int n = 10;
        double[] p = random(n);
        double[] m = random(n);
        double[] v = Arrays.stream(random(n)).map(Math::abs).toArray();
        double[] g = random(n);
        AdamWParams a = new AdamWParams(1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f);
        try (Tensor tp = put(ops, p, Shape.of(n), Layout.shard(0, 1)); Tensor tg = put(ops, g, Shape.of(n), Layout.shard(0, 1));
             Tensor tm = put(ops, m, Shape.of(n), Layout.shard(0, 1)); Tensor tv = put(ops, v, Shape.of(n), Layout.shard(0, 1))) {
            ops.adamw(tp, tg, tm, tv, a);
            double[] ep = new double[n];
            double[] em = new double[n];
            double[] ev = new double[n];
            for (int i = 0; i < n; i++) {
                double gi = g[i] * 0.5;
                em[i] = 0.9 * m[i] + 0.1 * gi;
                ev[i] = 0.95 * v[i] + 0.05 * gi * gi;
                double mh = em[i] / (1 - Math.pow(0.9, 3));
                double vh = ev[i] / (1 - Math.pow(0.95, 3));
                ep[i] = p[i] * (1 - 1e-2 * 0.1) - 1e-2 * mh / (Math.sqrt(vh) + 1e-8);
            }
            assertClose(em, tm.toHost(), "exp_avg");
            assertClose(ev, tv.toHost(), "exp_avg_sq");
            assertClose(ep, tp.toHost(), 1e-5, 1e-4, "param");
        }
    }

    @ParameterizedTest(name = "nesterov={0}")
    @ValueSource(booleans = {false, true})
    void sgdWithMomentumMatchesTorchSemantics(boolean nesterov) {
        Ops ops = ops(1, 1);
        int n = 7;
        double[] p = random(n);
        double[] g1 = random(n);
        double[] g2 = random(n);
        float lr = 0.1f, mu = 0.9f, damp = nesterov ? 0f : 0.2f, wd = 0.01f;
        try (Tensor tp = put(ops, p, n); Tensor tg1 = put(ops, g1, n); Tensor tg2 = put(ops, g2, n);
             Tensor buf = ops.zeros(Shape.of(n), Layout.REPLICATED, DType.FP32)) {
            ops.sgd(tp, tg1, buf, new SgdParams(lr, mu, damp, wd, nesterov, 1, 1f));
            ops.sgd(tp, tg2, buf, new SgdParams(lr, mu, damp, wd, nesterov, 2, 2f));
            double[] ep = p.clone();
            double[] eb = new double[n];
            double[][] gs = {g1, g2};
            double[] scales = {1, 2};
            for (int s = 0; s < 2; s++) {
                for (int i = 0; i < n; i++) {
                    double d = gs[s][i] * scales[s] + wd * ep[i];
                    eb[i] = s == 0 ? d : mu * eb[i] + (1 - damp) * d;
                    d = nesterov ? d + mu * eb[i] : eb[i];
                    ep[i] -= lr * d;
                }
            }
            assertClose(eb, buf.toHost(), "momentum buffer");
            assertClose(ep, tp.toHost(), "param");
        }
    }

    @Test
    void plainSgdNeedsNoBuffer() {
        Ops ops = ops(1, 1);
        try (Tensor tp = put(ops, new double[]{1, 2}, 2); Tensor tg = put(ops, new double[]{10, 20}, 2)) {
            ops.sgd(tp, tg, null, new SgdParams(0.1f, 0f, 0f, 0f, false, 5, 1f));
            assertClose(new double[]{0, 0}, tp.toHost(), 1e-6, 0, "p - lr g");
            expectError(() -> ops.sgd(tp, tg, null, new SgdParams(0.1f, 0.9f, 0f, 0f, false, 5, 1f)), "sgd", "momentum");
        }
    }

    // ---- collectives ------------------------------------------------------------------------------------------

    @ParameterizedTest(name = "mesh [{0}, {1}] axis {2}")
    @CsvSource({"1,1,1", "1,2,1", "1,4,1", "1,8,1", "2,1,0", "4,1,0", "8,1,0", "2,4,1", "2,4,0"})
    void allGatherConcatenatesShards(int rows, int cols, int axis) {
        Ops ops = ops(rows, cols);
        int n = axis == 0 ? rows : cols;
        int a = 3, b = 2 * 8, c = 5;
        double[] x = random(a * b * c);
        try (Tensor t = put(ops, x, Shape.of(a, b, c), Layout.shard(1, axis)); Tensor g = ops.allGather(t, 1, axis)) {
            assertEquals(Layout.REPLICATED, g.layout());
            for (int d = 0; d < rows * cols; d++) assertClose(x, g.toHostLocal(d), 0, 0, "device " + d + " of " + n);
        }
    }

    @ParameterizedTest(name = "mesh [{0}, {1}] axis {2}")
    @CsvSource({"1,1,1", "1,2,1", "1,4,1", "1,8,1", "2,1,0", "4,1,0", "8,1,0", "2,4,1", "2,4,0"})
    void reduceScatterAndAllReduceSumPartialAddends(int rows, int cols, int axis) {
        MeshDevice mesh = mesh(rows, cols);
        Ops ops = mesh.asSubmesh().ops();
        int n = axis == 0 ? rows : cols;
        int devices = rows * cols;
        int len = 8 * 3;
        float[][] pieces = new float[devices][];
        Layout partial = Layout.REPLICATED.with(axis, Placement.PARTIAL);
        // replicas along the other axis must hold equal addends: piece depends on the position along axis only
        double[][] addends = new double[n][];
        for (int j = 0; j < n; j++) addends[j] = random(len);
        for (int d = 0; d < devices; d++) {
            int j = axis == 0 ? d / cols : d % cols;
            pieces[d] = Reference.toFloat(addends[j]);
        }
        double[] sum = new double[len];
        for (int j = 0; j < n; j++) for (int i = 0; i < len; i++) sum[i] += (float) addends[j][i];
        try (Tensor p = ops.fromHostLocal(pieces, Shape.of(8, 3), partial, DType.FP32);
             Tensor rs = ops.reduceScatter(p, 0, axis);
             Tensor ar = ops.allReduce(p, axis, ReduceOp.SUM);
             Tensor mean = ops.allReduce(p, axis, ReduceOp.MEAN)) {
            assertEquals(Layout.shard(0, axis), rs.layout());
            assertClose(sum, rs.toHost(), "reduce_scatter");
            assertClose(sum, ar.toHost(), "all_reduce");
            for (int d = 0; d < devices; d++) assertArrayEquals(ar.toHostLocal(0), ar.toHostLocal(d), "identical replicas");
            assertClose(Arrays.stream(sum).map(v -> v / n).toArray(), mean.toHost(), "mean");
            ops.allReduceInPlace(p, axis, ReduceOp.SUM);
            assertEquals(Layout.REPLICATED, p.layout());
            assertClose(sum, p.toHost(), "in place");
        }
    }

    @Test
    void allReduceOfReplicatedSumsTheCopies() {
        Ops ops = ops(1, 4);
        double[] x = random(6);
        try (Tensor t = put(ops, x, 6); Tensor s = ops.allReduce(t, 1, ReduceOp.SUM); Tensor m = ops.allReduce(t, 1, ReduceOp.MEAN)) {
            assertClose(Arrays.stream(x).map(v -> 4 * (float) v).toArray(), s.toHost(), "4 copies summed");
            assertClose(x, m.toHost(), "mean of copies");
        }
    }

    @Test
    void collectivesOnOneAxisOfA2x4MeshRunPerRow() {
        Ops ops = ops(2, 4);
        // rows of the mesh shard the batch (axis 0); each row's 4 devices hold different addends (axis 1)
        int b = 2, len = 4;
        float[][] pieces = new float[8][];
        double[] expect = new double[b * len];
        for (int d = 0; d < 8; d++) {
            int row = d / 4;
            pieces[d] = new float[len];
            for (int i = 0; i < len; i++) {
                pieces[d][i] = (float) (100 * row + 10 * (d % 4) + i);
                expect[row * len + i] += pieces[d][i];
            }
        }
        Layout l = new Layout(Placement.shard(0), Placement.PARTIAL);
        try (Tensor p = ops.fromHostLocal(pieces, Shape.of(b, len), l, DType.FP32);
             Tensor r = ops.allReduce(p, 1, ReduceOp.SUM);
             Tensor rs = ops.reduceScatter(p, 1, 1);
             Tensor g = ops.allGather(rs, 1, 1)) {
            assertEquals(new Layout(Placement.shard(0), Placement.REPLICATE), r.layout());
            assertClose(expect, r.toHost(), 0, 0, "all_reduce within each row");
            assertEquals(new Layout(Placement.shard(0), Placement.shard(1)), rs.layout());
            assertClose(expect, rs.toHost(), 0, 0, "reduce_scatter within each row");
            assertClose(expect, g.toHost(), 0, 0, "all_gather within each row");
            assertClose(Arrays.copyOfRange(expect, 4, 8), g.toHostLocal(6), 0, 0, "row 1 device");
        }
    }

    @Test
    void bf16AllReduceRoundsOnce() {
        Ops ops = ops(1, 2);
        float[][] pieces = {{1f, 2f}, {0.00390625f, 3f}};
        try (Tensor p = ops.fromHostLocal(pieces, Shape.of(2), new Layout(Placement.REPLICATE, Placement.PARTIAL), DType.BF16);
             Tensor r = ops.allReduce(p, 1, ReduceOp.SUM)) {
            assertEquals(DType.BF16, r.dtype());
            assertArrayEquals(new float[]{BFloat16.round(1.00390625f), 5f}, r.toHost());
        }
    }

    // ---- layouts: DDP and Megatron TP against the unsharded result -------------------------------------------

    @Test
    void ddpPatternGivesPartialWeightGradientsThatAllReduceToTheFullGradient() {
        Ops ops = ops(1, 4);
        int batch = 8, in = 6, out = 5;
        double[] x = random(batch * in);
        double[] w = random(out * in);
        double[] dy = random(batch * out);
        Layout data = Layout.shard(0, 1);
        try (Tensor tx = put(ops, x, Shape.of(batch, in), data); Tensor tw = put(ops, w, out, in);
             Tensor y = ops.linear(tx, tw, null); Tensor tdy = put(ops, dy, Shape.of(batch, out), data);
             Tensor dw = ops.matmul(tdy, tx, true, false); Tensor full = ops.allReduce(dw, 1, ReduceOp.SUM)) {
            assertEquals(data, y.layout());
            assertClose(Reference.matmul(x, w, 1, batch, out, in, false, true, false), y.toHost(), "y");
            assertEquals(new Layout(Placement.REPLICATE, Placement.PARTIAL), dw.layout());
            assertEquals(Layout.REPLICATED, full.layout());
            assertClose(Reference.matmul(dy, x, 1, out, in, batch, true, false, false), full.toHost(), "dW");
        }
    }

    @Test
    void megatronColumnThenRowParallelMatchesTheUnshardedMlp() {
        Ops ops = ops(1, 4);
        int rows = 6, d = 8, hidden = 16;
        double[] x = random(rows * d);
        double[] w1 = random(hidden * d);
        double[] b1 = random(hidden);
        double[] w2 = random(d * hidden);
        try (Tensor tx = put(ops, x, rows, d);
             Tensor tw1 = put(ops, w1, Shape.of(hidden, d), Layout.shard(0, 1));
             Tensor tb1 = put(ops, b1, Shape.of(hidden), Layout.shard(0, 1));
             Tensor tw2 = put(ops, w2, Shape.of(d, hidden), Layout.shard(1, 1));
             Tensor h = ops.linear(tx, tw1, tb1); Tensor g = ops.gelu(h);
             Tensor partial = ops.linear(g, tw2, null); Tensor y = ops.allReduce(partial, 1, ReduceOp.SUM)) {
            assertEquals(Layout.shard(1, 1), h.layout());
            assertEquals(new Layout(Placement.REPLICATE, Placement.PARTIAL), partial.layout());
            double[] eh = Reference.matmul(x, w1, 1, rows, hidden, d, false, true, false);
            for (int r = 0; r < rows; r++) for (int j = 0; j < hidden; j++) eh[r * hidden + j] = Reference.gelu(eh[r * hidden + j] + b1[j]);
            double[] ey = Reference.matmul(eh, w2, 1, rows, d, hidden, false, true, false);
            assertClose(ey, y.toHost(), 1e-4, 1e-3, "TP MLP");
        }
    }

    @Test
    void headParallelAttentionScoresStayShardedOnHeads() {
        Ops ops = ops(1, 2);
        int b = 1, h = 4, t = 3, hd = 2;
        double[] q = random(numel(b, h, t, hd));
        double[] k = random(numel(b, h, t, hd));
        Layout heads = Layout.shard(1, 1);
        try (Tensor tq = put(ops, q, Shape.of(b, h, t, hd), heads); Tensor tk = put(ops, k, Shape.of(b, h, t, hd), heads);
             Tensor s = ops.matmul(tq, tk, false, true)) {
            assertEquals(heads, s.layout());
            assertClose(Reference.matmul(q, k, b * h, t, t, hd, false, true, true), s.toHost(), "scores");
        }
    }

    @Test
    void reshapeKeepsShardsWhenThePrefixIsPreserved() {
        Ops ops = ops(1, 2);
        int b = 4, t = 3, heads = 2, hd = 5;
        double[] x = random(numel(b, t, heads * hd));
        try (Tensor batch = put(ops, x, Shape.of(b, t, heads * hd), Layout.shard(0, 1));
             Tensor flat = ops.reshape(batch, Shape.of(b * t, heads * hd));
             Tensor last = put(ops, x, Shape.of(b, t, heads * hd), Layout.shard(2, 1));
             Tensor split = ops.reshape(last, Shape.of(b, t, heads, hd))) {
            assertEquals(Layout.shard(0, 1), flat.layout());
            assertClose(x, flat.toHost(), 0, 0, "flattened batch shards");
            assertEquals(Layout.shard(2, 1), split.layout());
            assertClose(x, split.toHost(), 0, 0, "split heads");
            expectError(() -> ops.reshape(last, Shape.of(b * t * heads * hd)), "reshape", "sharded dim 2");
        }
    }

    // ---- bad input ----------------------------------------------------------------------------------------------

    @Test
    void shapeMismatchNamesTheOpAndBothShapes() {
        Ops ops = ops(1, 1);
        try (Tensor a = ops.zeros(Shape.of(3, 5), Layout.REPLICATED, DType.FP32);
             Tensor b = ops.zeros(Shape.of(4, 7), Layout.REPLICATED, DType.FP32);
             Tensor c = ops.zeros(Shape.of(3, 4), Layout.REPLICATED, DType.FP32)) {
            expectError(() -> ops.matmul(a, b, false, false), "matmul", "[3, 5]", "[4, 7]");
            expectError(() -> ops.add(a, b), "add", "[3, 5]", "[4, 7]");
            expectError(() -> ops.addInPlace(a, c, 1f), "addInPlace", "[3, 5]", "[3, 4]");
            expectError(() -> ops.softmaxBackward(a, c, 1f), "softmaxBackward", "[3, 5]", "[3, 4]");
            expectError(() -> ops.matmulInto(c, a, a, false, true, 1f, 0f), "matmulInto", "[3, 4]", "[3, 3]");
            expectError(() -> ops.reshape(a, Shape.of(4, 4)), "reshape", "[3, 5]", "[4, 4]");
            expectError(() -> ops.permute(a, 0, 0), "permute", "[3, 5]");
            expectError(() -> ops.fromHost(new float[5], Shape.of(2, 3), Layout.REPLICATED, DType.FP32), "fromHost", "[2, 3]");
        }
    }

    @Test
    void shardedDimNotDivisibleByTheAxisSizeIsRejected() {
        Ops ops = ops(1, 4);
        expectError(() -> ops.fromHost(new float[6 * 2], Shape.of(6, 2), Layout.shard(0, 1), DType.FP32),
                "fromHost", "dim 0", "size 6", "mesh axis 1 size 4");
        expectError(() -> ops.zeros(Shape.of(6), Layout.shard(1, 1), DType.FP32), "zeros", "out of range");
        expectError(() -> ops.zeros(Shape.of(8, 8), new Layout(Placement.shard(0), Placement.shard(0)), DType.FP32),
                "both mesh axes");
        assertEquals(0, ops.submesh().maxInUse());
    }

    @Test
    void incompatibleLayoutsAreRejectedWithTheLayouts() {
        Ops ops = ops(1, 2);
        try (Tensor a = ops.zeros(Shape.of(4, 6), Layout.shard(1, 1), DType.FP32);
             Tensor b = ops.zeros(Shape.of(6, 4), Layout.REPLICATED, DType.FP32);
             Tensor r = ops.zeros(Shape.of(4, 6), Layout.REPLICATED, DType.FP32);
             Tensor p = ops.zeros(Shape.of(4, 6), new Layout(Placement.REPLICATE, Placement.PARTIAL), DType.FP32)) {
            expectError(() -> ops.matmul(a, b, false, false), "matmul", "[R, S(1)]", "[R, R]");
            expectError(() -> ops.add(a, r), "add", "[R, S(1)]", "[R, R]");
            expectError(() -> ops.gelu(p), "gelu", "Partial");
            expectError(() -> ops.softmax(a, 1f, false), "softmax", "last dim");
            expectError(() -> ops.allGather(r, 0, 1), "allGather", "S(0)");
            expectError(() -> ops.reduceScatter(r, 0, 1), "reduceScatter", "Partial");
            expectError(() -> ops.allReduce(a, 1, ReduceOp.SUM), "allReduce", "sharded");
            expectError(() -> ops.allReduce(r, 2, ReduceOp.SUM), "allReduce", "mesh axis 2");
        }
    }

    @Test
    void closedTensorsAreRejected() {
        Ops ops = ops(1, 1);
        Tensor a = ops.zeros(Shape.of(2, 2), Layout.REPLICATED, DType.FP32);
        Tensor b = ops.zeros(Shape.of(2, 2), Layout.REPLICATED, DType.FP32);
        a.close();
        a.close(); // idempotent
        assertTrue(a.isClosed());
        expectError(() -> ops.matmul(a, b, false, false), "matmul", "closed");
        expectError(() -> ops.addInPlace(b, a, 1f), "addInPlace", "closed");
        expectError(a::toHost, "closed");
        b.close();
        assertEquals(0, ops.submesh().maxInUse());
    }

    @Test
    void tensorsOfAClosedMeshAreClosed() {
        MeshDevice mesh = open(new MeshShape(1, 1), MeshOptions.defaults());
        Ops ops = mesh.asSubmesh().ops();
        Tensor t = ops.zeros(Shape.of(4), Layout.REPLICATED, DType.FP32);
        mesh.close();
        assertTrue(t.isClosed());
        expectError(t::toHost, "closed");
        expectError(() -> ops.scale(t, 2f), "closed");
        t.close();
    }

    @Test
    void closingTheMeshWhileAnotherThreadRunsOpsFailsThoseOpsCleanly() throws Exception {
        MeshDevice mesh = open(new MeshShape(1, 2), MeshOptions.defaults().withThreads(2));
        Ops ops = mesh.asSubmesh().ops();
        Tensor x = ops.full(Shape.of(256, 256), Layout.shard(0, 1), DType.FP32, 0.5f);
        Tensor w = ops.full(Shape.of(256, 256), Layout.REPLICATED, DType.FP32, 0.01f);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch running = new CountDownLatch(1);
        Thread worker = new Thread(() -> {
            try {
                for (int i = 0; ; i++) {
                    try (Tensor h = ops.matmul(x, w, false, false); Tensor g = ops.gelu(h)) {
                        g.toHost();
                    }
                    if (i == 2) running.countDown();
                }
            } catch (Throwable t) {
                failure.set(t);
            }
        });
        worker.start();
        running.await();
        mesh.close();
        worker.join(10_000);
        assertFalse(worker.isAlive());
        assertTrue(failure.get() instanceof DeviceException, "the worker stops with a DeviceException: " + failure.get());
        assertTrue(x.isClosed());
    }

    @Test
    void tensorsFromAnotherSubmeshAreRejected() {
        MeshDevice mesh = mesh(1, 2);
        List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 1));
        assertEquals(2, subs.size());
        assertTrue(subs == mesh.createSubmeshes(new MeshShape(1, 1)) || subs.equals(mesh.createSubmeshes(new MeshShape(1, 1))));
        try (Tensor a = subs.get(0).ops().zeros(Shape.of(2), Layout.REPLICATED, DType.FP32);
             Tensor b = subs.get(1).ops().zeros(Shape.of(2), Layout.REPLICATED, DType.FP32)) {
            expectError(() -> subs.get(0).ops().add(a, b), "add", "submesh 1");
        }
        expectError(() -> mesh.createSubmeshes(new MeshShape(1, 3)), "[1, 3]");
    }

    @Test
    void wrongDtypesAreRejected() {
        Ops ops = ops(1, 1);
        try (Tensor ids = ops.fromHostInts(new int[]{0, 1}, Shape.of(2), Layout.REPLICATED);
             Tensor x = ops.zeros(Shape.of(2, 3), Layout.REPLICATED, DType.FP32)) {
            expectError(() -> ops.gelu(ids), "gelu", "INT32");
            expectError(() -> ops.embedding(x, x), "embedding", "ids", "FP32", "INT32");
            expectError(() -> ops.fromHost(new float[2], Shape.of(2), Layout.REPLICATED, DType.INT32), "fromHost", "INT32");
        }
    }

    // ---- memory ---------------------------------------------------------------------------------------------------

    @Test
    @SuppressWarnings("try")
    void outOfMemoryNamesTheDeviceRequestInUseAndCapacityAndChangesNothing() {
        MeshDevice mesh = mesh(1, 2, MeshOptions.defaults().withMemoryPerDevice(1000).withThreads(1));
        Ops ops = mesh.asSubmesh().ops();
        Tensor a = ops.zeros(Shape.of(100), Layout.REPLICATED, DType.FP32); // 400 bytes per device
        Tensor b = ops.zeros(Shape.of(100), Layout.shard(0, 1), DType.FP32); // 200 bytes per device
        assertEquals(List.of(600L, 600L), mesh.devices().stream().map(d -> d.memory().inUse()).toList());
        DeviceOutOfMemoryException e = assertThrows(DeviceOutOfMemoryException.class,
                () -> ops.zeros(Shape.of(101), Layout.REPLICATED, DType.FP32));
        assertEquals(404, e.requested());
        assertEquals(600, e.inUse());
        assertEquals(1000, e.capacity());
        assertTrue(e.getMessage().contains("device 0") && e.getMessage().contains("404") && e.getMessage().contains("600")
                && e.getMessage().contains("1000"), e.getMessage());
        assertEquals(List.of(600L, 600L), mesh.devices().stream().map(d -> d.memory().inUse()).toList(), "unchanged");
        try (Tensor c = ops.zeros(Shape.of(50), Layout.REPLICATED, DType.FP32)) {
            assertThrows(DeviceOutOfMemoryException.class, () -> ops.scale(a, 2f), "an op's output is charged too");
            assertEquals(800, mesh.devices().get(0).memory().inUse());
        }
        a.close();
        try (Tensor c = ops.zeros(Shape.of(101), Layout.REPLICATED, DType.FP32)) {
            assertEquals(604, mesh.devices().get(1).memory().inUse());
        }
        b.close();
        assertEquals(0, mesh.asSubmesh().maxInUse());
        assertEquals(1000, mesh.devices().get(0).capacity());
        assertEquals(800, mesh.asSubmesh().maxPeak());
        mesh.devices().forEach(Device::resetPeak);
        assertEquals(0, mesh.asSubmesh().maxPeak());
    }

    @Test
    @SuppressWarnings("try")
    void replicatedTensorsCostEveryDeviceAndShardsASlice() {
        MeshDevice mesh = mesh(2, 2);
        Ops ops = mesh.asSubmesh().ops();
        try (Tensor r = ops.zeros(Shape.of(8, 4), Layout.REPLICATED, DType.FP32);
             Tensor s = ops.zeros(Shape.of(8, 4), new Layout(Placement.shard(0), Placement.shard(1)), DType.BF16)) {
            for (Device d : mesh.devices()) assertEquals(128 + 16, d.memory().inUse());
        }
    }

    // ---- moving tensors between submeshes ------------------------------------------------------------------------

    @Test
    void socketCopiesTensorsFifoBetweenSubmeshes() throws InterruptedException {
        MeshDevice mesh = mesh(1, 4);
        List<Submesh> stages = mesh.createSubmeshes(new MeshShape(1, 2));
        Ops first = stages.get(0).ops();
        double[] x = random(8);
        try (MeshSocket socket = mesh.openSocket(stages.get(0), stages.get(1));
             Tensor a = put(first, x, Shape.of(8), Layout.shard(0, 1));
             Tensor b = first.full(Shape.of(3), Layout.REPLICATED, DType.BF16, 2f)) {
            assertEquals(null, socket.recv(0));
            socket.send(a);
            socket.send(b);
            assertFalse(a.isClosed(), "send does not consume");
            try (Tensor ra = socket.recv(1000); Tensor rb = socket.recv(1000)) {
                assertEquals(stages.get(1), ra.submesh());
                assertEquals(a.layout(), ra.layout());
                assertClose(x, ra.toHost(), 0, 0, "first");
                assertArrayEquals(new float[]{2, 2, 2}, rb.toHost(), "second");
                assertEquals(DType.BF16, rb.dtype());
                assertEquals(16 + 6, mesh.devices().get(2).memory().inUse(), "charged to the receiver");
                Tensor sum = stages.get(1).ops().scale(ra, 2f);
                sum.close();
            }
        }
    }

    @Test
    void adoptMovesATensorAndItsAccountingToAnotherSubmesh() {
        MeshDevice mesh = mesh(1, 2);
        List<Submesh> stages = mesh.createSubmeshes(new MeshShape(1, 1));
        double[] x = random(6);
        Tensor t = put(stages.get(0).ops(), x, 2, 3);
        Tensor moved = stages.get(1).ops().adopt(t);
        assertTrue(t.isClosed());
        assertEquals(stages.get(1), moved.submesh());
        assertClose(x, moved.toHost(), 0, 0, "values");
        assertEquals(0, mesh.devices().get(0).memory().inUse());
        assertEquals(24, mesh.devices().get(1).memory().inUse());
        // with a live view the tensor is copied instead
        Tensor view = stages.get(1).ops().reshape(moved, Shape.of(6));
        Tensor back = stages.get(0).ops().adopt(moved);
        assertClose(x, back.toHost(), 0, 0, "copied");
        assertClose(x, view.toHost(), 0, 0, "view intact");
        view.close();
        back.close();
        assertEquals(0, mesh.devices().get(0).memory().inUse() + mesh.devices().get(1).memory().inUse());
    }
}

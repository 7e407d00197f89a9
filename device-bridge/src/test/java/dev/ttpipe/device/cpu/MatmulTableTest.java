package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DeviceException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A matmul table: written and read back, every malformed line one message naming the file and line, and a cpu
 * mesh following it shape by shape (a shape it sends to oneDNN has oneDNN's bits, the others OpenBLAS's).
 */
class MatmulTableTest {
    private static final MatmulShapes.Shape TO_DNNL = new MatmulShapes.Shape(false, false, 96, 384, 80);
    private static final MatmulShapes.Shape TO_BLAS = new MatmulShapes.Shape(false, true, 96, 384, 80);
    private static final MatmulShapes.Shape UNLISTED = new MatmulShapes.Shape(true, false, 96, 384, 80);

    @Test
    void aWrittenTableReadsBackRowForRow(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("t.matmul");
        List<MatmulTable.Row> rows = List.of(new MatmulTable.Row(TO_DNNL, "dnnl", 100.5, 120.25),
                new MatmulTable.Row(TO_BLAS, "blas", 90, 80));
        MatmulTable.write(file, List.of("a comment"), rows);
        MatmulTable t = MatmulTable.read(file);
        assertEquals(2, t.rows().size());
        assertEquals(TO_DNNL, t.rows().get(0).shape());
        assertEquals("blas", t.rows().get(1).engine());
        assertEquals("dnnl", t.engine(false, false, 96, 80, 384));
        assertEquals("blas", t.engine(false, true, 96, 80, 384), "a blas row");
        assertNull(t.engine(true, false, 96, 80, 384), "a shape the table does not list");
        assertEquals(1, t.dnnlShapes());
        assertEquals(12, t.sha256().length());
    }

    @Test
    void eachMalformedTableIsOneMessageNamingTheFileAndLine(@TempDir Path dir) throws Exception {
        String head = MatmulTable.MAGIC + "\n# comment\n";
        Map<String, String> bad = Map.of(
                "not a table\n", ":1: 'not a table' given, expected the first line",
                head + "N N 8x8x8 dnnl 1.0\n", ":3: 'N N 8x8x8 dnnl 1.0' given, expected 'opA opB MxKxN",
                head + "X N 8x8x8 dnnl 1 2\n", ":3: 'X N 8x8x8 dnnl 1 2' given",
                head + "N N 8x0x8 dnnl 1 2\n", ":3: shape '8x0x8' given, expected MxKxN",
                head + "N N 8x8x8 mkl 1 2\n", ":3: engine 'mkl' given, expected blas or dnnl",
                head + "N N 8x8x8 dnnl 1 NaN\n", ":3: dnnl GFLOP/s 'NaN' given, expected a number >= 0",
                head + "N N 8x8x8 dnnl 1 2\n\nN N 8x8x8 blas 1 2\n", ":5: shape N N 8x8x8 given twice");
        int i = 0;
        for (Map.Entry<String, String> e : bad.entrySet()) {
            Path file = dir.resolve("bad" + i++ + ".matmul");
            Files.writeString(file, e.getKey());
            DeviceException ex = assertThrows(DeviceException.class, () -> MatmulTable.read(file));
            assertTrue(ex.getMessage().startsWith("matmul table " + file + e.getValue()), ex.getMessage());
            assertFalse(ex.getMessage().contains("\n"), ex.getMessage());
        }
        DeviceException missing = assertThrows(DeviceException.class, () -> MatmulTable.read(dir.resolve("none")));
        assertTrue(missing.getMessage().contains("cannot read it (NoSuchFileException"), missing.getMessage());
    }

    @Test
    void aMeshFollowsTheTableShapeByShape(@TempDir Path dir) throws Exception {
        assumeTrue(OpenBlas.load(), "OpenBLAS does not load here: " + OpenBlas.failure());
        assumeTrue(Dnnl.load(), "oneDNN does not load here: " + Dnnl.failure());
        assumeTrue(System.getProperty("ttpipe.matmul.table") == null && System.getProperty("ttpipe.blas") == null,
                "-Dttpipe.matmul.table or -Dttpipe.blas is set for this JVM");
        Path file = dir.resolve("t.matmul");
        MatmulTable.write(file, List.of(), List.of(new MatmulTable.Row(TO_DNNL, "dnnl", 1, 2),
                new MatmulTable.Row(TO_BLAS, "blas", 2, 1)));
        try (Parallel par = new Parallel(2)) {
            Gemm blas = GemmChoice.choose("blas", 2, par);
            Gemm dnnl = GemmChoice.choose("dnnl", 2, par);
            Gemm table = GemmChoice.choose("auto", 2, par, name -> name.equals("TTPIPE_MATMUL_TABLE") ? file.toString() : null);
            assertEquals("table", table.kind());
            assertTrue(table.describe().contains("1 of its 2 shapes on oneDNN"), table.describe());
            for (MatmulShapes.Shape s : List.of(TO_DNNL, TO_BLAS, UNLISTED)) {
                float[] viaBlas = product(blas, s), viaDnnl = product(dnnl, s), viaTable = product(table, s);
                assumeTrue(!java.util.Arrays.equals(viaBlas, viaDnnl), "OpenBLAS and oneDNN give the same bits for " + s
                        + " on this CPU, so the table's choice cannot be seen");
                // a shape the table does not list runs on the default engine, oneDNN where it loads
                assertArrayEquals(s == TO_BLAS ? viaBlas : viaDnnl, viaTable, "the table's engine for " + s);
            }
        }
    }

    @Test
    void aTableBesideAKernelAskedForByNameIsRefused(@TempDir Path dir) throws Exception {
        assumeTrue(System.getProperty("ttpipe.matmul.table") == null && System.getProperty("ttpipe.blas") == null,
                "-Dttpipe.matmul.table or -Dttpipe.blas is set for this JVM");
        Path file = dir.resolve("t.matmul");
        MatmulTable.write(file, List.of(), List.of());
        Map<String, String> env = Map.of("TTPIPE_MATMUL_TABLE", file.toString(), "TTPIPE_BLAS", "dnnl");
        try (Parallel par = new Parallel(1)) {
            DeviceException e = assertThrows(DeviceException.class, () -> GemmChoice.choose("auto", 1, par, env::get));
            assertTrue(e.getMessage().contains("and kernel 'dnnl' (ttpipe.blas / TTPIPE_BLAS) both given"), e.getMessage());
        }
    }

    @Test
    void recordingSeesEachShapeOnceLargestFirst() {
        assumeTrue(OpenBlas.load(), "OpenBLAS does not load here: " + OpenBlas.failure());
        try (Parallel par = new Parallel(1)) {
            Gemm blas = GemmChoice.choose("blas", 1, par);
            MatmulShapes.start();
            product(blas, TO_BLAS);
            product(blas, TO_DNNL);
            product(blas, TO_BLAS);
            // equal products: by their text, N N before N T
            assertEquals(List.of(TO_DNNL, TO_BLAS), MatmulShapes.stop());
            assertTrue(MatmulShapes.stop().isEmpty(), "stopped: nothing recorded");
        }
    }

    /** op(A) @ op(B) for {@code s} on random operands (the same for every engine). */
    private static float[] product(Gemm g, MatmulShapes.Shape s) {
        int m = s.m(), k = s.k(), n = s.n();
        NativeBuffer a = NativeBuffer.malloc(4 * m * k), b = NativeBuffer.malloc(4 * k * n), c = NativeBuffer.malloc(4 * m * n);
        try {
            Random rnd = new Random(7);
            for (int i = 0; i < m * k; i++) a.floats.put(i, rnd.nextFloat() - 0.5f);
            for (int i = 0; i < k * n; i++) b.floats.put(i, rnd.nextFloat() - 0.5f);
            g.sgemm(s.transA(), s.transB(), m, n, k, 1f, a, 0, s.transA() ? m : k, b, 0, s.transB() ? k : n, 0f, c, 0, n);
            float[] out = new float[m * n];
            c.floats.get(0, out);
            return out;
        } finally {
            a.free();
            b.free();
            c.free();
        }
    }
}

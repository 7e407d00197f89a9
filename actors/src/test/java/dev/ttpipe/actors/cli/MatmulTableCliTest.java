package dev.ttpipe.actors.cli;

import dev.ttpipe.device.cpu.MatmulTable;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * {@code bench step --write-matmul-table} writes the per-shape table of a config's step; a job given it in
 * global_env follows it (run.json says so), and the pipeline stays bit for bit equal to the reference trainer with
 * every shape sent to oneDNN; a bad table is one line before anything runs.
 */
class MatmulTableCliTest {
    private static final String JOB = CliTest.SMALL.replace("runs_dir: RUNS", "runs_dir: RUNS, eval_every: 0");

    @Test
    void aWrittenTableIsFollowedAndThePipelineStaysExact(@TempDir Path dir) throws Exception {
        assumeTrue(System.getenv("TTPIPE_BLAS") == null && System.getenv("TTPIPE_MATMUL_TABLE") == null,
                "TTPIPE_BLAS or TTPIPE_MATMUL_TABLE is set for the tests");
        Path table = dir.resolve("job.matmul");
        Path plain = CliTest.config(dir, JOB.replace("RUNS", dir.resolve("runs").toString()));
        CliTest.Result w = CliTest.run("bench", "step", plain.toString(), "--write-matmul-table", table.toString());
        assertEquals(0, w.code(), w.err());
        assertTrue(w.out().contains("wrote " + table + ":"), w.out());
        MatmulTable written = MatmulTable.read(table);
        assertTrue(written.rows().size() >= 3, "the step's linears and attention: " + written.rows());
        // batch 8 x 16 tokens in 4 microbatches: the products train and verify run (32 rows), and bench step's (128)
        for (int rows : new int[]{32, 128}) {
            assertTrue(written.rows().stream().anyMatch(r -> !r.shape().transA() && r.shape().m() == rows),
                    rows + " rows in " + written.rows());
        }

        // every shape to oneDNN (where it loads, the engine OpenBLAS is not): the pipeline against the reference
        String allDnnl;
        try (Stream<String> lines = Files.lines(table)) {
            allDnnl = lines.map(l -> l.startsWith("#") ? l : l.replace(" blas ", " dnnl ")).collect(Collectors.joining("\n"));
        }
        Files.writeString(table, allDnnl + "\n");
        Path job = CliTest.config(dir, JOB.replace("RUNS", dir.resolve("runs").toString())
                + "global_env: {TTPIPE_MATMUL_TABLE: " + table + "}\n");
        CliTest.Result v = CliTest.run("verify", job.toString(), "--steps", "2", "--tolerance", "0");
        assertEquals(0, v.code(), v.out() + v.err());

        CliTest.Result t = CliTest.run("train", job.toString(), "--run-dir", dir.resolve("run").toString());
        assertEquals(0, t.code(), t.err());
        String record = Files.readString(dir.resolve("run/run.json"));
        assertTrue(record.contains("per shape from the matmul table " + table), record);
    }

    @Test
    void aBadTableIsOneLineNamingTheKeyAndTheLine(@TempDir Path dir) throws Exception {
        Path table = Files.writeString(dir.resolve("bad.matmul"), "# ttpipe matmul table 1\nN N 8x8x8 mkl 1 2\n");
        Path job = CliTest.config(dir, JOB.replace("RUNS", dir.resolve("runs").toString())
                + "global_env: {TTPIPE_MATMUL_TABLE: " + table + "}\n");
        CliTest.assertOneLineBadInput(CliTest.run("train", job.toString()), "global_env.TTPIPE_MATMUL_TABLE",
                table + ":2: engine 'mkl' given, expected blas or dnnl");
        Path beside = CliTest.config(dir, JOB.replace("RUNS", dir.resolve("runs").toString())
                + "global_env: {TTPIPE_MATMUL_TABLE: " + table + ", TTPIPE_BLAS: java}\n");
        CliTest.assertOneLineBadInput(CliTest.run("verify", beside.toString()), "given beside TTPIPE_BLAS=java, expected one of them");
        // an engine the cpu backend does not know: one line before anything runs, not a failure when the mesh opens
        for (String[] e : new String[][]{{"TTPIPE_BLAS", "mkl", "auto, blas, openblas, dnnl, onednn, java"},
                {"TTPIPE_BF16_GEMM", "amx", "auto, dnnl, dot, sbgemm, fma, sgemm"}}) {
            Path unknown = CliTest.config(dir, JOB.replace("RUNS", dir.resolve("runs").toString())
                    + "global_env: {" + e[0] + ": " + e[1] + "}\n");
            CliTest.assertOneLineBadInput(CliTest.run("train", unknown.toString()), "global_env." + e[0],
                    "'" + e[1] + "' given, expected one of " + e[2]);
        }
        CliTest.assertOneLineBadInput(CliTest.run("bench", "step", job.toString(), "--write-matmul-table", dir.toString()),
                "--write-matmul-table " + dir + ": a folder, expected a file to write");
        for (String flag : new String[]{"--json", "--profile"}) {
            CliTest.assertOneLineBadInput(CliTest.run("bench", "step", job.toString(), "--write-matmul-table",
                    dir.resolve("t.matmul").toString(), flag), flag + " given with --write-matmul-table");
        }
    }
}

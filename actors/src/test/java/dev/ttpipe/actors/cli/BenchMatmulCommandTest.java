package dev.ttpipe.actors.cli;

import org.junit.jupiter.api.Test;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class BenchMatmulCommandTest {
    private final StringWriter out = new StringWriter();
    private final StringWriter err = new StringWriter();

    private int run(String... args) {
        return Main.newCommandLine(new PrintWriter(out, true), new PrintWriter(err, true)).execute(args);
    }

    private static double number(String json, String key) {
        Matcher m = Pattern.compile("\"" + key + "\": ([-0-9.eE]+)").matcher(json);
        assertTrue(m.find(), key + " in " + json);
        return Double.parseDouble(m.group(1));
    }

    @Test
    void jsonReportsThroughputPeakFractionAndKernel() {
        assertEquals(0, run("bench", "matmul", "--size", "48", "--threads", "1", "--kernel", "java", "--json"), err.toString());
        String json = out.toString().trim();
        assertTrue(json.startsWith("{") && json.endsWith("}"), json);
        assertEquals(1, json.lines().count(), "one object on one line");
        assertTrue(json.contains("\"kernel\": \"java\""), json);
        double gflops = number(json, "gflops");
        double peak = number(json, "peak_gflops");
        assertTrue(gflops > 0 && peak > 0, json);
        // gflops and peak are printed to 3 decimals, the fraction to 4: on a loaded machine gflops can be
        // small enough for the rounding to move their ratio by more than 1e-3
        double rounding = gflops / peak * (0.0005 / gflops + 0.0005 / peak) + 0.00005;
        assertEquals(gflops / peak, number(json, "fraction_of_peak"), rounding + 1e-9);
        assertEquals(number(json, "cores") * number(json, "ghz") * number(json, "flops_per_cycle"), peak, 0.01 * peak);
        assertTrue(json.contains("\"peak_how\": \"1 core x "), json);
    }

    @Test
    void tableNamesTheKernelAndHowThePeakWasComputed() {
        assertEquals(0, run("bench", "matmul", "--size", "32", "--threads", "1"), err.toString());
        String text = out.toString();
        assertTrue(text.contains("GFLOP/s"), text);
        assertTrue(text.contains("FLOP/cycle"), text);
        assertTrue(text.contains("% of peak"), text);
        assertTrue(text.contains("kernel"), text);
    }

    @Test
    void badFlagsExitWithCode2AndNameTheFlag() {
        assertEquals(2, run("bench", "matmul", "--size", "0"));
        assertTrue(err.toString().contains("--size 0"), err.toString());
        assertEquals(2, run("bench", "matmul", "--kernel", "cuda"));
        assertTrue(err.toString().contains("--kernel cuda"), err.toString());
        assertEquals(2, run("bench", "matmul", "--kernel", "sgemm"));
        assertTrue(err.toString().contains("--kernel sgemm: expected auto, blas, dnnl or java (dot, fma and sgemm with --dtype bf16)"),
                err.toString());
        assertEquals(2, run("bench", "matmul", "--threads", "-1"));
        assertEquals(2, run("bench", "matmul", "--size", "many"));
    }

    /** With bf16, sgemm times the sgemm engine on the default fp32 engine: what a CPU without avx512_bf16 runs. */
    @Test
    void bf16SgemmTimesTheDefaultFp32EngineOnWidenedOperands() {
        assertEquals(0, run("bench", "matmul", "--size", "64", "--threads", "1", "--dtype", "bf16", "--kernel", "sgemm", "--json"),
                err.toString());
        String json = out.toString().trim();
        assertTrue(json.contains("\"kernel\": \"bf16 operands widened to fp32, then the fp32 sgemm"), json);
        assertTrue(!json.contains("blas kernel"), "the default fp32 engine, not OpenBLAS where oneDNN loads: " + json);
    }

    /** With bf16, fma times ttpipe's GEMM that widens bf16 operands as it packs them, or says in one line why it cannot. */
    @Test
    void bf16FmaTimesTheWideningGemm() {
        int code = run("bench", "matmul", "--size", "64", "--threads", "1", "--dtype", "bf16", "--kernel", "fma", "--json");
        if (code == 2) {
            assertTrue(err.toString().contains("(fma) needs the native kernels"), err.toString());
            return;
        }
        assertEquals(0, code, err.toString());
        String json = out.toString().trim();
        assertTrue(json.contains("\"kernel\": \"ttpipe's bf16-reading GEMM ("), json);
    }

    @Test
    void helpShowsExamples() {
        assertEquals(0, run("bench", "matmul", "--help"));
        assertTrue(out.toString().contains("Examples:"), out.toString());
        assertTrue(out.toString().contains("ttpipe bench matmul --size 512 --threads 1"), out.toString());
    }
}

package dev.ttpipe.device.cpu;

import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The benchmark's bookkeeping (never its figures: benchmarks print, tests do not time). */
class MatmulBenchmarkTest {
    @Test
    void flopsPerCycleComeFromTheIsaFlags() {
        assertEquals(64, MachinePeak.flopsPerCycle("fpu sse avx avx2 fma avx512f"));
        assertEquals(32, MachinePeak.flopsPerCycle("fpu sse avx avx2 fma"));
        assertEquals(16, MachinePeak.flopsPerCycle("fpu sse avx avx2"));
        assertEquals(16, MachinePeak.flopsPerCycle("fpu sse avx"));
        assertEquals(8, MachinePeak.flopsPerCycle("fpu sse sse2"));
        assertEquals("avx2+fma", MachinePeak.isaName("avx2 fma avx"));
    }

    @Test
    void physicalCoresCountDistinctCoreIds() {
        List<String> smt = List.of("processor : 0", "physical id : 0", "core id : 0", "processor : 1", "physical id : 0",
                "core id : 0", "processor : 2", "physical id : 0", "core id : 1", "processor : 3", "physical id : 1",
                "core id : 0");
        assertEquals(3, MachinePeak.physicalCores(smt));
        assertEquals("a b", MachinePeak.flags(List.of("model : x", "flags\t\t: a b")));
    }

    @Test
    void aSmallRunReportsConsistentFigures() {
        MatmulBenchmark.Result r = MatmulBenchmark.run(40, 1, "java");
        assertEquals("java", r.kernel());
        assertEquals(1, r.peak().cores());
        assertTrue(r.peak().ghz() > 0.2 && r.peak().ghz() < 10, "clock " + r.peak().ghz());
        assertEquals(r.peak().cores() * r.peak().ghz() * r.peak().flopsPerCycle(), r.peakGflops(), 1e-9);
        assertEquals(r.gflops() / r.peakGflops(), r.fractionOfPeak(), 1e-12);
        assertEquals(2.0 * 40 * 40 * 40 / r.medianSeconds() / 1e9, r.gflops(), 1e-6 * r.gflops());
        assertTrue(r.repetitions() >= 5);
        assertTrue(r.peakHow().contains("1 core x") && r.peakHow().contains("FLOP/cycle"), r.peakHow());
    }
}

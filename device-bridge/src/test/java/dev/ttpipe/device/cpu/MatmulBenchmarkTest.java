package dev.ttpipe.device.cpu;

import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The benchmark's bookkeeping (never its figures: benchmarks print, tests do not time). */
class MatmulBenchmarkTest {
    @Test
    void isaNamesComeFromTheFlags() {
        assertEquals("avx512f", MachinePeak.isaName("fpu sse avx avx2 fma avx512f"));
        assertEquals("avx2+fma", MachinePeak.isaName("avx2 fma avx"));
        assertEquals("avx", MachinePeak.isaName("fpu sse avx avx2"));
        assertEquals("sse", MachinePeak.isaName("fpu sse sse2"));
        assertEquals("ISA unknown", MachinePeak.isaName(""));
    }

    @Test
    void physicalCoresCountDistinctCoreIds() {
        List<String> smt = List.of("processor : 0", "physical id : 0", "core id : 0", "processor : 1", "physical id : 0",
                "core id : 0", "processor : 2", "physical id : 0", "core id : 1", "processor : 3", "physical id : 1",
                "core id : 0");
        assertEquals(3, MachinePeak.physicalCores(smt));
        assertEquals("a b", MachinePeak.flags(List.of("model : x", "flags\t\t: a b")));
    }

    /**
     * The FLOPs the peak counts are done: every element takes CHAIN_DEPTH FMAs of a b = 1/8 per pass, in
     * the vector loop and in the scalar ends alike (checked again once the measurement has JIT-compiled it).
     */
    @Test
    void fmaChainsDoEveryCountedFma() {
        MachinePeak.measure(1);
        for (int n : new int[]{1, 17, 256, 1000, MachinePeak.CHAIN_FLOATS + 13}) {
            float[] chains = new float[n];
            Arrays.fill(chains, 1f);
            MachinePeak.fmaChains(chains, 0.5f, 0.25f, 3);
            float[] expected = new float[n];
            Arrays.fill(expected, 1f + 3 * MachinePeak.CHAIN_DEPTH * 0.125f);
            assertArrayEquals(expected, chains, "length " + n);
        }
    }

    @Test
    void theMeasuredPeakIsSaneAndCached() {
        MachinePeak p = MachinePeak.measure(1);
        assertSame(p, MachinePeak.measure(1), "measured once per core count");
        assertEquals(1, p.cores());
        assertTrue(p.gflops() > 0 && Double.isFinite(p.gflops()), "peak " + p.gflops());
        assertEquals(p.measuredGflops(), p.gflops());
        assertTrue(p.ghz() > 0.2 && p.ghz() < 10, "clock " + p.ghz());
        assertEquals(p.gflops(), p.cores() * p.ghz() * p.flopsPerCyclePerCore(), 1e-9 * p.gflops());
        assertEquals(Math.round(p.flopsPerCyclePerCore()), p.flopsPerCycle());
        // fp32 vectors of 0 (unknown), 1 to 16 lanes (128 to 512 bits; 32 or 64 bits on a JVM without SIMD)
        assertTrue(p.lanes() >= 0 && p.lanes() <= 16 && Integer.bitCount(p.lanes()) <= 1, "lanes " + p.lanes());
        assertTrue(p.how().startsWith("1 core x ") && p.how().contains("FLOP/cycle, measured: 1 thread of "), p.how());
        assertTrue(p.how().contains("fp32 FMA chains (" + p.isa() + ")"), p.how());
    }

    /**
     * The bf16 peak: on a CPU with avx512_bf16 and the native kernels loaded it is measured (the native chains do the
     * FLOPs they report), elsewhere it says why not; never a silent figure.
     */
    @Test
    void theBf16PeakIsMeasuredWhereTheCpuHasTheInstruction() {
        MachinePeak p = MachinePeak.measure(1);
        double bf16 = p.bf16Gflops();
        assertTrue(bf16 > 0 && Double.isFinite(bf16), "bf16 peak " + bf16);
        assertEquals(bf16, p.bf16Gflops(), "measured once per core count");
        boolean measurable = MachinePeak.hasBf16Dot() && CpuNative.active();
        if (!MachinePeak.hasBf16Dot()) {
            assertEquals(p.gflops(), bf16);
            assertTrue(p.bf16How().startsWith("no avx512_bf16"), p.bf16How());
        } else if (measurable) {
            assertEquals(12 * 64 * 1000L, CpuNative.ttpipe_cpu_bf16_dot_chains(1000), "64 FLOPs per vdpbf16ps, 12 a pass");
            assertTrue(p.bf16How().startsWith("measured: 1 thread of 16-lane vdpbf16ps chains"), p.bf16How());
        } else {
            assertTrue(p.bf16How().contains("derived, not measured"), p.bf16How());
        }
        if (CpuNative.active() && !MachinePeak.hasBf16Dot()) {
            assertEquals(0, CpuNative.ttpipe_cpu_bf16_dot_chains(1000), "nothing runs without avx512_bf16");
        }
    }

    @Test
    void aSmallRunReportsConsistentFigures() {
        MatmulBenchmark.Result r = MatmulBenchmark.run(40, 1, "java");
        assertEquals("java", r.kernel());
        assertSame(MachinePeak.measure(1), r.peak(), "the peak for as many threads as the kernel used");
        assertEquals(r.peak().gflops(), r.peakGflops());
        assertEquals(r.gflops() / r.peakGflops(), r.fractionOfPeak(), 1e-12);
        assertEquals(2.0 * 40 * 40 * 40 / r.medianSeconds() / 1e9, r.gflops(), 1e-6 * r.gflops());
        assertTrue(r.repetitions() >= 5);
        assertEquals(r.peak().how(), r.peakHow());
    }
}

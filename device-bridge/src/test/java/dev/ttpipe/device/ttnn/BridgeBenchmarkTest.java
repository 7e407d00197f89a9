package dev.ttpipe.device.ttnn;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** The bridge benchmark's bookkeeping (never its figures: benchmarks print, tests do not time). */
class BridgeBenchmarkTest {
    @BeforeEach
    void needsTheReferenceLibrary() {
        assumeTrue(BridgeLibrary.locate().isPresent(), "the reference bridge library was not built (no C compiler?); "
                + "tried " + BridgeLibrary.candidates(null));
    }

    @Test
    void aShortRunReportsEveryOpOnBothBackends() {
        BridgeBenchmark.Result r = BridgeBenchmark.run(null, 0.01);
        assertTrue(r.jnaCallNanos() > 0 && r.jnaCallBest() <= r.jnaCallNanos(), r.toString());
        assertTrue(r.jnaCalls() >= 11);
        assertTrue(r.implementation().startsWith("reference"), r.implementation());
        assertEquals(List.of("add", "matmul", "layerNorm", "softmax", "gelu", "toHost"),
                r.ops().stream().map(BridgeBenchmark.OpCost::op).toList());
        for (BridgeBenchmark.OpCost c : r.ops()) {
            assertTrue(c.cpuNanos() > 0 && c.ttnnNanos() > 0, c.toString());
            assertEquals(c.ttnnNanos() - c.cpuNanos(), c.overheadNanos(), 1e-9);
        }
    }

    @Test
    void timingCountsEveryCallOfEverySample() {
        long[] calls = new long[1];
        BridgeBenchmark.Timing t = BridgeBenchmark.time(n -> {
            calls[0] += n;
            return NativeBridge.ttpipe_noop() + n;
        }, 0.001);
        assertTrue(t.calls() > 0 && t.calls() <= calls[0], t + " of " + calls[0]);
        assertTrue(t.bestNanos() <= t.medianNanos());
    }
}

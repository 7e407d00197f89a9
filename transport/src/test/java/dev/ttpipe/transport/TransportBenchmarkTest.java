package dev.ttpipe.transport;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** What {@code ttpipe bench transport} runs and parses; figures are printed, never asserted. */
class TransportBenchmarkTest {
    @Test
    void sizesTakeBinaryUnits() {
        assertEquals(4096, TransportBenchmark.parseSize("4096"));
        assertEquals(4096, TransportBenchmark.parseSize("4096B"));
        assertEquals(512 << 10, TransportBenchmark.parseSize("512KiB"));
        assertEquals(4 << 20, TransportBenchmark.parseSize(" 4MiB"));
        assertEquals(1L << 30, TransportBenchmark.parseSize("1gib"));
        assertEquals("4 MiB", TransportBenchmark.human(4 << 20));
        assertEquals("100 B", TransportBenchmark.human(100));
    }

    @Test
    void badSizesSayWhatWasExpected() {
        assertTrue(assertThrows(IllegalArgumentException.class, () -> TransportBenchmark.parseSize("4MB")).getMessage()
                .startsWith("unknown unit 'MB', expected B, KiB, MiB or GiB"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> TransportBenchmark.parseSize("MiB")).getMessage()
                .startsWith("not a size"));
        for (String s : List.of("6", "0", "2GiB", "99999999999999999999999KiB")) {
            assertTrue(assertThrows(IllegalArgumentException.class, () -> TransportBenchmark.parseSize(s)).getMessage()
                    .startsWith("expected a multiple of 4 bytes"), s);
        }
    }

    @Test
    void everyChannelIsMeasuredOnTheRealPathNextToMemcpy() {
        List<String> steps = new ArrayList<>();
        List<TransportBenchmark.Result> rs = TransportBenchmark.run(TransportBenchmark.CHANNELS, List.of(64L << 10), 1,
                8192, steps::add);
        assertEquals(List.of("local", "aeron-ipc", "aeron-udp"), rs.stream().map(TransportBenchmark.Result::channel).toList());
        assertEquals(List.of(0, 2, 4), rs.stream().map(TransportBenchmark.Result::copies).toList());
        for (TransportBenchmark.Result r : rs) {
            assertEquals(64 << 10, r.bytes());
            assertTrue(r.gbps() > 0 && r.memcpyGbps() > 0 && r.medianSeconds() > 0, r.toString());
            assertEquals(r.gbps() / r.memcpyGbps(), r.ratio(), 1e-12);
            assertEquals(32, r.frames());
        }
        assertEquals(List.of("memcpy 64 KiB", "local 64 KiB", "aeron-ipc 64 KiB", "aeron-udp 64 KiB"), steps);
    }
}

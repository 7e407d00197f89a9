package dev.ttpipe.device.cpu;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The pool's promise to reductions: a sum has the same bits on any number of threads. */
class ParallelTest {
    @Test
    void sumCutsTheRangeByItsLengthAndGrainAlone() {
        assertEquals(10, Parallel.sumChunk(100, 10));
        assertEquals(16, Parallel.sumChunk(1000, 1));
        assertEquals(1, Parallel.sumChunk(5, 0));
    }

    @Test
    void aSumHasTheSameBitsOnAnyNumberOfThreads() {
        Random rnd = new Random(3);
        int n = 100_003;
        FloatBuffer x = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.nativeOrder()).asFloatBuffer();
        for (int i = 0; i < n; i++) x.put(i, (float) (rnd.nextGaussian() * Math.exp(rnd.nextGaussian() * 4)));
        long plain = 0;
        long squares = 0;
        for (int threads = 1; threads <= 6; threads++) {
            try (Parallel par = new Parallel(threads)) {
                // float accumulation inside each chunk: its bits follow the chunk boundaries
                long s = Double.doubleToRawLongBits(par.sum(n, 64, (lo, hi) -> {
                    float acc = 0;
                    for (int i = lo; i < hi; i++) acc += x.get(i);
                    return acc;
                }));
                long q = Double.doubleToRawLongBits(Reductions.sumSquares(par, x, n));
                if (threads == 1) {
                    plain = s;
                    squares = q;
                } else {
                    assertEquals(plain, s, "sum on " + threads + " threads");
                    assertEquals(squares, q, "sum of squares on " + threads + " threads");
                }
            }
        }
    }
}

package dev.ttpipe.device.cpu;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.Arrays;
import java.util.Random;

import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The compute threads: every index of a range runs once, on the caller and the workers at once; failures,
 * nested and concurrent calls, idle workers and close; and the promise to reductions: a sum has the same bits
 * on any number of threads.
 */
class ParallelTest {
    @Test
    void everyIndexRunsOnceOverManyRegionsInARow() {
        Random rnd = new Random(5);
        try (Parallel par = new Parallel(3)) {
            for (int region = 0; region < 3000; region++) {
                int n = 1 + rnd.nextInt(5000);
                int[] seen = new int[n];
                par.range(n, 1 + rnd.nextInt(40), (lo, hi) -> {
                    for (int i = lo; i < hi; i++) seen[i]++;
                });
                int[] once = new int[n];
                Arrays.fill(once, 1);
                assertArrayEquals(once, seen, "region " + region + " of " + n);
            }
        }
    }

    @Test
    void theCallerAndAWorkerRunChunksAtOnce() throws Exception {
        try (Parallel par = new Parallel(2)) {
            for (int region = 0; region < 50; region++) assertTrue(twoThreadsMeet(par), "region " + region);
        }
    }

    @Test
    void aWorkerIdlePastItsTimeEndsAndTheNextRegionStartsAnother() throws Exception {
        try (Parallel par = new Parallel(2, TimeUnit.MILLISECONDS.toNanos(5))) {
            assertTrue(twoThreadsMeet(par));
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (par.liveWorkers() > 0 && System.nanoTime() < until) Thread.sleep(5);
            assertEquals(0, par.liveWorkers(), "the idle worker ended");
            assertTrue(twoThreadsMeet(par), "a new worker joins the next region");
        }
    }

    @Test
    void closeEndsTheWorkers() throws Exception {
        Parallel par = new Parallel(3);
        assertTrue(twoThreadsMeet(par));
        par.close();
        assertEquals(0, par.liveWorkers());
        assertThrows(IllegalStateException.class, () -> par.range(1000, 1, (lo, hi) -> { }));
    }

    /** Two chunks of one region that can end only when two threads run them at the same time. */
    private static boolean twoThreadsMeet(Parallel par) {
        CyclicBarrier both = new CyclicBarrier(2);
        AtomicReference<Throwable> failed = new AtomicReference<>();
        par.range(2, 1, (lo, hi) -> {
            try {
                both.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException | BrokenBarrierException | TimeoutException e) {
                failed.compareAndSet(null, e);
            }
        });
        return failed.get() == null;
    }

    /** A sum that finds the threads busy with another caller's region runs on its own thread, over the same chunks. */
    @Test
    void aSumWhileAnotherThreadHoldsTheThreadsHasTheSameBits() throws Exception {
        Random rnd = new Random(11);
        int n = 50_000;
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = (float) (rnd.nextGaussian() * Math.exp(rnd.nextGaussian() * 4));
        Parallel.SumBody floatSum = (lo, hi) -> {
            float acc = 0;                      // float accumulation: the bits follow the chunk boundaries
            for (int i = lo; i < hi; i++) acc += x[i];
            return acc;
        };
        try (Parallel par = new Parallel(2)) {
            long alone = Double.doubleToRawLongBits(par.sum(n, 64, floatSum));
            CountDownLatch holding = new CountDownLatch(2);
            CountDownLatch release = new CountDownLatch(1);
            Thread other = new Thread(() -> par.range(2, 1, (lo, hi) -> {
                holding.countDown();
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }));
            other.start();
            assertTrue(holding.await(10, TimeUnit.SECONDS), "the other region holds both threads");
            long busy = Double.doubleToRawLongBits(par.sum(n, 64, floatSum));
            release.countDown();
            other.join();
            assertEquals(alone, busy, "the sum's bits while another region runs");
        }
    }

    @Test
    void aChunkThatThrowsFailsTheCallWithItsExceptionAndThePoolGoesOn() {
        try (Parallel par = new Parallel(2)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> par.range(100, 1, (lo, hi) -> {
                if (lo <= 42 && 42 < hi) throw new IllegalArgumentException("index 42");
            }));
            assertEquals("index 42", e.getMessage());
            int[] seen = new int[100];
            par.range(100, 1, (lo, hi) -> {
                for (int i = lo; i < hi; i++) seen[i]++;
            });
            for (int i = 0; i < 100; i++) assertEquals(1, seen[i], "index " + i);
        }
    }

    @Test
    void aNestedCallRunsInlineOnTheThreadThatMadeIt() {
        try (Parallel par = new Parallel(2)) {
            AtomicReference<String> wrong = new AtomicReference<>();
            par.range(64, 1, (lo, hi) -> {
                Thread outer = Thread.currentThread();
                par.range(1000, 1, (a, b) -> {
                    if (Thread.currentThread() != outer) wrong.set("inner chunk on another thread");
                });
            });
            assertNull(wrong.get());
        }
    }

    @Test
    void twoThreadsCallingAtOnceBothGetWholeResults() throws Exception {
        try (Parallel par = new Parallel(2)) {
            AtomicReference<Throwable> failed = new AtomicReference<>();
            Thread[] callers = new Thread[2];
            for (int c = 0; c < 2; c++) {
                callers[c] = new Thread(() -> {
                    try {
                        for (int region = 0; region < 500; region++) {
                            long[] seen = new long[777];
                            par.range(777, 1, (lo, hi) -> {
                                for (int i = lo; i < hi; i++) seen[i] += i;
                            });
                            for (int i = 0; i < 777; i++) if (seen[i] != i) throw new AssertionError("index " + i);
                        }
                    } catch (Throwable t) {
                        failed.compareAndSet(null, t);
                    }
                });
                callers[c].start();
            }
            for (Thread t : callers) t.join();
            assertSame(null, failed.get());
        }
    }

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

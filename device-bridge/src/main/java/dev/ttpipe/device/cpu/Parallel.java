package dev.ttpipe.device.cpu;

import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.ForkJoinWorkerThread;
import java.util.concurrent.RecursiveAction;
import java.util.concurrent.TimeUnit;

/**
 * The compute threads of one cpu mesh: splits an index range into chunks of at least a grain
 * (small work runs inline on the caller) and runs them on a fork-join pool. Thread-safe; nested
 * calls run inline.
 *
 * <p>{@link #range} bodies write disjoint outputs, so its chunks may follow the thread count.
 * {@link #sum}'s chunks, whose partial sums are combined in chunk order, depend only on the range
 * and the grain: a sum has the same bits on any number of threads.
 */
final class Parallel implements AutoCloseable {
    /** A loop body over {@code [lo, hi)}. */
    @FunctionalInterface
    interface Body {
        void run(int lo, int hi);
    }

    /** A loop body over {@code [lo, hi)} that returns a partial sum. */
    @FunctionalInterface
    interface SumBody {
        double run(int lo, int hi);
    }

    /** The most chunks a {@link #sum} is cut into: enough to balance many threads. */
    static final int SUM_PIECES = 64;

    private final int threads;
    private final ForkJoinPool pool;

    Parallel(int threads) {
        this.threads = Math.max(1, threads);
        this.pool = this.threads == 1 ? null : new ForkJoinPool(this.threads);
    }

    int threads() {
        return threads;
    }

    /** Runs {@code body} over {@code [0, n)} in chunks of at least {@code grain}. */
    void range(int n, int grain, Body body) {
        int chunk = chunk(n, grain);
        if (chunk >= n || inline()) {
            if (n > 0) body.run(0, n);
            return;
        }
        pool.invoke(new Split(body, 0, n, chunk));
    }

    /**
     * Sums {@code body} over chunks of {@code [0, n)}, combining in chunk order. The chunks are at least
     * {@code grain} long and at most {@value #SUM_PIECES} of them, whatever the thread count.
     */
    double sum(int n, int grain, SumBody body) {
        int chunk = sumChunk(n, grain);
        if (chunk >= n) return n > 0 ? body.run(0, n) : 0.0;
        int chunks = (n + chunk - 1) / chunk;
        if (inline()) {
            double s = 0;
            for (int lo = 0; lo < n; lo += chunk) s += body.run(lo, Math.min(n, lo + chunk));
            return s;
        }
        double[] partial = new double[chunks];
        pool.invoke(new Split((lo, hi) -> partial[lo / chunk] = body.run(lo, hi), 0, n, chunk));
        double s = 0;
        for (double p : partial) s += p;
        return s;
    }

    /** Single-threaded, or already on one of our workers (nested parallelism runs inline). */
    private boolean inline() {
        return pool == null || Thread.currentThread() instanceof ForkJoinWorkerThread w && w.getPool() == pool;
    }

    /** How {@link #sum} cuts {@code [0, n)}: a function of n and the grain only. */
    static int sumChunk(int n, int grain) {
        return Math.max(Math.max(1, grain), (n + SUM_PIECES - 1) / SUM_PIECES);
    }

    private int chunk(int n, int grain) {
        int target = (n + threads * 4 - 1) / (threads * 4);
        return Math.max(Math.max(1, grain), target);
    }

    @Override
    public void close() {
        if (pool == null) return;
        pool.shutdown();
        try {
            pool.awaitTermination(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Halves the range until a piece is one chunk (pieces start at multiples of the chunk). */
    private static final class Split extends RecursiveAction {
        private final Body body;
        private final int lo;
        private final int hi;
        private final int chunk;

        Split(Body body, int lo, int hi, int chunk) {
            this.body = body;
            this.lo = lo;
            this.hi = hi;
            this.chunk = chunk;
        }

        @Override
        protected void compute() {
            int pieces = (hi - lo + chunk - 1) / chunk;
            if (pieces <= 1) {
                body.run(lo, hi);
                return;
            }
            int mid = lo + (pieces / 2) * chunk;
            invokeAll(new Split(body, lo, mid, chunk), new Split(body, mid, hi, chunk));
        }
    }
}

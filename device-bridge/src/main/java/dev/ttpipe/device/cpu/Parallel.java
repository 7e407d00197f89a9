package dev.ttpipe.device.cpu;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The compute threads of one cpu mesh: splits an index range into chunks of at least a grain
 * (small work runs inline on the caller) and runs them on the caller and {@code threads - 1}
 * workers. Thread-safe; nested calls run inline, and a call while another thread's is running runs
 * its chunks (the same chunks) on its caller.
 *
 * <p>A training step issues hundreds of short parallel regions (a product's tiles, an elementwise op)
 * with the device thread's own work between them, so a region is cheap to start and to end: the
 * caller publishes it and takes chunks itself, the workers take chunks as they come (the next chunk
 * is one atomic increment), and a thread that runs out of work spins for {@value #SPIN_NANOS} ns
 * before it parks, since the next region or the last chunk usually comes sooner than a parked
 * thread would wake. It spins by yielding, so any other runnable thread (another rank's, the
 * actors', a transport's) runs first; and a worker halves its spin after each wait longer than
 * that (down to {@value #MIN_SPIN_NANOS} ns) and takes all of it again after a shorter one, so where
 * regions come seldom (tests, evaluation, a pipeline's idle rank) it parks almost at once. The gaps
 * between a step's regions, measured: docs/measurements/2026-11-26-compute-threads.md. A worker idle
 * for 30 s ends, and the next region starts another.
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
    /** How long a thread out of work spins before it parks, at most. */
    static final long SPIN_NANOS = 200_000;
    /** How long a worker spins at least: where regions come seldom, it soon parks almost at once. */
    static final long MIN_SPIN_NANOS = 2_000;
    /** How long a worker waits for a region before it ends. */
    static final long IDLE_EXIT_NANOS = 30_000_000_000L;

    private static final int RUNNING = 0;
    private static final int PARKED = 1;
    private static final int ENDED = 2;

    private final int threads;
    /** One region at a time; a caller that finds it taken runs its chunks on its own thread. */
    private final ReentrantLock lock = new ReentrantLock();
    private final Worker[] workers;
    /** The region the workers are to join, and how many have been published (a worker's cue). */
    private volatile Region region;
    private volatile long published;
    private volatile boolean closed;
    private final long idleExitNanos;

    Parallel(int threads) {
        this(threads, IDLE_EXIT_NANOS);
    }

    /** {@code idleExitNanos}: how long a worker waits for a region before it ends. */
    Parallel(int threads, long idleExitNanos) {
        this.threads = Math.max(1, threads);
        this.workers = new Worker[this.threads - 1];
        this.idleExitNanos = idleExitNanos;
    }

    int threads() {
        return threads;
    }

    /** "1 thread" or "N threads", for descriptions. */
    String threadsInWords() {
        return threads == 1 ? "1 thread" : threads + " threads";
    }

    /** How many worker threads are alive now (for tests). */
    int liveWorkers() {
        int live = 0;
        for (Worker w : workers) if (w != null && w.isAlive()) live++;
        return live;
    }

    /** Runs {@code body} over {@code [0, n)} in chunks of at least {@code grain}. */
    void range(int n, int grain, Body body) {
        int chunk = chunk(n, grain);
        if (chunk >= n || inline()) {
            if (n > 0) body.run(0, n);
            return;
        }
        run(new Region(body, n, chunk));
    }

    /**
     * Sums {@code body} over chunks of {@code [0, n)}, combining in chunk order. The chunks are at least
     * {@code grain} long and at most {@value #SUM_PIECES} of them, whatever the thread count.
     */
    double sum(int n, int grain, SumBody body) {
        int chunk = sumChunk(n, grain);
        if (chunk >= n) return n > 0 ? body.run(0, n) : 0.0;
        int chunks = (n + chunk - 1) / chunk;
        double[] partial = new double[chunks];
        if (inline()) {
            for (int lo = 0; lo < n; lo += chunk) partial[lo / chunk] = body.run(lo, Math.min(n, lo + chunk));
        } else {
            run(new Region((lo, hi) -> partial[lo / chunk] = body.run(lo, hi), n, chunk));
        }
        double s = 0;
        for (double p : partial) s += p;
        return s;
    }

    /** Single-threaded, on one of our workers, or inside a region this thread runs (nested parallelism runs inline). */
    private boolean inline() {
        Thread t = Thread.currentThread();
        return threads == 1 || lock.isHeldByCurrentThread() || t instanceof Worker w && w.parallel == this;
    }

    /** How {@link #sum} cuts {@code [0, n)}: a function of n and the grain only. */
    static int sumChunk(int n, int grain) {
        return Math.max(Math.max(1, grain), (n + SUM_PIECES - 1) / SUM_PIECES);
    }

    private int chunk(int n, int grain) {
        int target = (n + threads * 4 - 1) / (threads * 4);
        return Math.max(Math.max(1, grain), target);
    }

    /** Publishes {@code r}, takes its chunks alongside the workers, and returns when every chunk is done. */
    private void run(Region r) {
        if (closed) throw new IllegalStateException("cpu compute threads are closed");
        if (!lock.tryLock()) {          // another thread's region is running: this one's chunks run on its caller
            r.work();
            rethrow(r);
            return;
        }
        try {
            r.waiter = Thread.currentThread();
            region = r;
            published++;                                            // volatile: the workers' cue
            for (int i = 0; i < workers.length; i++) wake(i);
            r.work();
            r.await();
        } finally {
            region = null;
            lock.unlock();
        }
        rethrow(r);
    }

    /** Throws what a chunk of {@code r} threw, if any. */
    private static void rethrow(Region r) {
        Throwable failure = r.failure.get();
        if (failure instanceof RuntimeException e) throw e;
        if (failure instanceof Error e) throw e;
        if (failure != null) throw new IllegalStateException(failure);
    }

    /** Wakes worker {@code i} if it parked, or starts it if it has not started or has ended. */
    private void wake(int i) {
        Worker w = workers[i];
        if (w == null || w.state.get() == ENDED) {
            w = new Worker(this, i, published - 1);             // joins the region just published
            workers[i] = w;
            w.start();
        } else if (w.state.get() == PARKED && w.state.compareAndSet(PARKED, RUNNING)) {
            LockSupport.unpark(w);
        }
    }

    @Override
    public void close() {
        closed = true;
        lock.lock();                                            // lets a running region finish
        try {
            for (Worker w : workers) {
                if (w == null) continue;
                LockSupport.unpark(w);
                try {
                    w.join(10_000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
        } finally {
            lock.unlock();
        }
    }

    /** One parallel call: its body, its chunks, and who has finished what. */
    private static final class Region {
        final Body body;
        final int n;
        final int chunk;
        final int chunks;
        final AtomicInteger next = new AtomicInteger();
        final AtomicInteger finished = new AtomicInteger();
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        /** The caller, and whether it parked waiting for the last chunk. */
        Thread waiter;
        volatile boolean waiting;

        Region(Body body, int n, int chunk) {
            this.body = body;
            this.n = n;
            this.chunk = chunk;
            this.chunks = (n + chunk - 1) / chunk;
        }

        /** Takes chunks until none is left; a chunk that throws is recorded and counted as done. */
        void work() {
            for (int c; (c = next.getAndIncrement()) < chunks; ) {
                int lo = c * chunk;
                try {
                    body.run(lo, Math.min(n, lo + chunk));
                } catch (Throwable t) {
                    failure.compareAndSet(null, t);
                } finally {
                    if (finished.incrementAndGet() == chunks && waiting) LockSupport.unpark(waiter);
                }
            }
        }

        /** Returns when every chunk is done: spins a while, then parks until the last chunk's thread wakes it. */
        void await() {
            long spinUntil = System.nanoTime() + SPIN_NANOS;
            while (finished.get() < chunks) {
                if (System.nanoTime() < spinUntil) {
                    Thread.yield();                     // other runnable threads go first
                    continue;
                }
                waiting = true;
                if (finished.get() < chunks) LockSupport.park(this);
            }
        }
    }

    /** A compute thread: joins each region as it is published, spinning a while between them before it parks. */
    private static final class Worker extends Thread {
        final Parallel parallel;
        final AtomicInteger state = new AtomicInteger(RUNNING);
        private long seen;
        /** How long to spin next time: halved after a wait longer than {@link #SPIN_NANOS}, else all of it. */
        private long spin = SPIN_NANOS;

        Worker(Parallel parallel, int index, long seen) {
            super("ttpipe-cpu-" + (index + 1));
            this.parallel = parallel;
            this.seen = seen;
            setDaemon(true);
        }

        @Override
        public void run() {
            while (true) {
                Region r = next();
                if (r == null) return;
                r.work();
            }
        }

        /** The next region to join, or null when the pool closed or nothing came for a while. */
        private Region next() {
            long start = System.nanoTime();
            long spinUntil = start + spin;
            long idleUntil = spinUntil + parallel.idleExitNanos;
            while (true) {
                if (parallel.closed) {
                    state.set(ENDED);
                    return null;
                }
                long p = parallel.published;
                if (p != seen) {
                    seen = p;
                    spin = System.nanoTime() - start < SPIN_NANOS ? SPIN_NANOS : Math.max(MIN_SPIN_NANOS, spin / 2);
                    Region r = parallel.region;             // null if it ended already: wait for the next
                    if (r != null) return r;
                    continue;
                }
                long now = System.nanoTime();
                if (now < spinUntil) {
                    Thread.yield();                     // other runnable threads go first
                } else if (now >= idleUntil) {
                    if (state.compareAndSet(RUNNING, ENDED)) return null;
                } else {
                    state.set(PARKED);
                    if (parallel.published == seen && !parallel.closed) LockSupport.parkNanos(this, idleUntil - now);
                    state.set(RUNNING);
                }
            }
        }
    }
}

package dev.ttpipe.actors.runtime;

import java.util.concurrent.TimeUnit;

/**
 * Notices when this whole process was paused (a long GC pause, SIGSTOP then SIGCONT, a swapped host): a
 * daemon thread sleeps 100 ms at a time and takes a wake-up more than a second late for a pause. A worker
 * that misses the others' heartbeats right after such a pause says that it was the one paused.
 */
final class ProcessPauses {
    private static final long TICK_MS = 100;
    private static final long PAUSE_NS = TimeUnit.SECONDS.toNanos(1);

    private static volatile Thread watcher;
    private static volatile long lastTickNs = System.nanoTime();
    private static volatile long lastEndNs;
    private static volatile long lastLengthNs;

    private ProcessPauses() {
    }

    /** Starts the watching thread once per process. */
    static synchronized void start() {
        if (watcher != null) return;
        watcher = new Thread(ProcessPauses::watch, "ttpipe-pause-watch");
        watcher.setDaemon(true);
        watcher.start();
    }

    private static void watch() {
        long before = System.nanoTime();
        while (true) {
            try {
                Thread.sleep(TICK_MS);
            } catch (InterruptedException e) {
                return;
            }
            long now = System.nanoTime();
            long gap = now - before - TimeUnit.MILLISECONDS.toNanos(TICK_MS);
            if (gap > PAUSE_NS) {
                lastLengthNs = gap;
                lastEndNs = now;
            }
            before = now;
            lastTickNs = now;
        }
    }

    /**
     * How long this process was paused, ns, when that pause ended less than {@code withinNs} ago or the watching
     * thread has not woken from it yet; else 0.
     */
    static long recentPauseNs(long withinNs) {
        long sinceTick = System.nanoTime() - lastTickNs;
        if (watcher != null && sinceTick > PAUSE_NS) return sinceTick;
        long length = lastLengthNs;
        return length > 0 && System.nanoTime() - lastEndNs < withinNs ? length : 0;
    }
}

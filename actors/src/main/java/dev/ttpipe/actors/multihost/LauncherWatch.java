package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.train.Preemption;

import java.io.PrintStream;

/**
 * A worker that {@code ttpipe launch} started watches the launcher: when it dies (SIGKILL, a crash, an
 * out-of-memory kill), the worker asks its job to stop as SIGTERM would (rank 0 finishes the step and saves a
 * checkpoint; every worker exits 143) instead of training on unsupervised.
 */
public final class LauncherWatch {
    /** The request a dead launcher makes: exit code 143, as for SIGTERM. */
    static final String WHY = "the launcher's exit";

    private LauncherWatch() {
    }

    /**
     * Watches {@code launcher} on a daemon thread; when it exits, says so on {@code err} and requests {@code preemption}.
     * Returns the thread.
     */
    public static Thread watch(ProcessHandle launcher, Preemption preemption, int rank, PrintStream err) {
        Thread t = new Thread(() -> {
            launcher.onExit().join();
            if (preemption.request(new Preemption.Request(WHY, 143, "on rank " + rank))) {
                err.println("ttpipe: rank " + rank + ": its launcher (pid " + launcher.pid() + ") exited; finishing the step, saving"
                        + " a checkpoint and exiting with code 143");
                err.flush();
            }
        }, "ttpipe-launcher-watch");
        t.setDaemon(true);
        t.start();
        return t;
    }
}

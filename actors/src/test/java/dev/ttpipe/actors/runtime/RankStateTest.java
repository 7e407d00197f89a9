package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.stages.ModelSpec;
import org.junit.jupiter.api.Test;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Where a rank's compute actions run. On a queue that runs ahead (sim) a training action is issued on
 * the caller's thread while nothing is queued on the device thread, and behind the device thread's work
 * otherwise, so the stages are never touched from two threads at once and the queue's order holds. On a
 * backend whose ops block (cpu) every action runs on the device thread.
 */
class RankStateTest {
    static final int SEQ = 8;

    @Test
    void aSimActionIsIssuedOnTheCallersThreadOnlyWhileTheDeviceThreadIsIdle() throws Exception {
        try (MeshDevice mesh = Backends.open("sim", new MeshShape(1, 1), MeshOptions.defaults());
             RankState state = new RankState(plan(Backend.SIM), 0, mesh.asSubmesh(), Faults.NONE)) {
            state.initialized().get(60, TimeUnit.SECONDS);

            CompletableFuture<RankState.Computed> idle = awaitIdleThenCompute(state);
            assertTrue(idle.isDone(), "with the device thread idle, a sim action is issued before compute returns");
            idle.get().output().close();

            CountDownLatch release = new CountDownLatch(1);
            state.execute(() -> awaitQuietly(release));
            CompletableFuture<RankState.Computed> busy = state.compute(new Action(0, ActionKind.F, 1), 0, data(), null, null);
            assertFalse(busy.isDone(), "with work on the device thread, the action waits behind it");
            release.countDown();
            busy.get(60, TimeUnit.SECONDS).output().close();

            // The device thread idle again (its stash freed): back to the caller's thread.
            CompletableFuture<RankState.Computed> again = awaitIdleThenCompute(state);
            assertTrue(again.isDone(), "the device thread idle again: issued on the caller's thread");
            again.get().output().close();
        }
    }

    @Test
    void aCpuActionAlwaysRunsOnTheDeviceThread() throws Exception {
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults().withThreads(1));
             RankState state = new RankState(plan(Backend.CPU), 0, mesh.asSubmesh(), Faults.NONE)) {
            state.initialized().get(60, TimeUnit.SECONDS);
            CountDownLatch release = new CountDownLatch(1);
            state.execute(() -> awaitQuietly(release));
            CompletableFuture<RankState.Computed> f = state.compute(new Action(0, ActionKind.F, 0), 0, data(), null, null);
            assertFalse(f.isDone(), "a cpu action queues on the device thread");
            release.countDown();
            f.get(60, TimeUnit.SECONDS).output().close();
        }
    }

    private static JobPlan plan(Backend backend) {
        return JobPlan.builder(ModelSpec.gpt2(64, 32, 2, 2, SEQ)).ranks(2).microbatches(2).microbatchSize(1).seqLen(SEQ)
                .backend(backend).meshOptions(MeshOptions.defaults().withThreads(1)).build();
    }

    private static MicrobatchData data() {
        int[] ids = new int[SEQ];
        for (int i = 0; i < SEQ; i++) ids[i] = i;
        return new MicrobatchData(1, SEQ, new int[][] {ids, ids}, new int[][] {ids, ids}, 1f);
    }

    /**
     * Frees the stash and lets the device thread go idle, then computes F of microbatch 0. The count of the
     * device thread's work drops just after a task's last line, so this retries (up to 60 s) until it has.
     */
    private static CompletableFuture<RankState.Computed> awaitIdleThenCompute(RankState state) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (true) {
            state.abortStep();
            state.drained().get(60, TimeUnit.SECONDS);
            Thread.sleep(10);
            CompletableFuture<RankState.Computed> f = state.compute(new Action(0, ActionKind.F, 0), 0, data(), null, null);
            if (f.isDone() || System.nanoTime() > deadline) return f;
            f.get(60, TimeUnit.SECONDS).output().close();
        }
    }

    private static void awaitQuietly(CountDownLatch latch) {
        try {
            latch.await(60, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}

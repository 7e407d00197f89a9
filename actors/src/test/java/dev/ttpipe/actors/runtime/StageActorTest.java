package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** The StageActor keeps answering while its device queue is busy, and a failing stage ends the step cleanly. */
class StageActorTest {
    static final String TEXT = "abcdefghijklmnopqrstuvwxyz ".repeat(40);

    static JobPlan tiny(Backend backend) {
        ModelSpec model = ModelSpec.gpt2(TextDataset.of(TEXT, 0.1).tokenizer().vocabSize(), 16, 2, 2, 8);
        return JobPlan.builder(model).ranks(2).microbatches(2).microbatchSize(2).seqLen(8).backend(backend).build();
    }

    @Test
    void answersAStatsQueryWhileItsDeviceQueueRunsAKernel() throws Exception {
        try (PipelineRuntime runtime = PipelineRuntime.start(tiny(Backend.CPU))) {
            CountDownLatch inside = new CountDownLatch(1);
            CountDownLatch release = new CountDownLatch(1);
            CompletableFuture<Object> kernel = CompletableFuture.supplyAsync(() -> runtime.onDevice(0, stages -> {
                inside.countDown();                                  // a "kernel" on rank 0's queue until released
                try {
                    return release.await(20, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            }));
            assertTrue(inside.await(10, TimeUnit.SECONDS));
            for (int i = 0; i < 5; i++) {
                var stats = runtime.stats(0, Duration.ofSeconds(5));
                assertEquals(0, stats.rank());
            }
            assertFalse(kernel.isDone(), "the kernel should still be running while stats were answered");
            release.countDown();
            kernel.get(20, TimeUnit.SECONDS);
        }
    }

    @Test
    void keepsTheNextComputeActionOnTheDeviceQueueBehindTheRunningOne() throws Exception {
        JobPlan plan = tiny(Backend.CPU);
        Batch batch = TextDataset.of(TEXT, 0.1).trainBatch(1, 0, plan.batchSize(), 8);
        try (PipelineRuntime runtime = PipelineRuntime.start(plan)) {
            CountDownLatch inside = new CountDownLatch(1);
            CountDownLatch release = new CountDownLatch(1);
            CompletableFuture<Object> blocker = CompletableFuture.supplyAsync(() -> runtime.onDevice(0, stages -> {
                inside.countDown();                                  // rank 0's device queue is held here
                try {
                    return release.await(20, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            }));
            assertTrue(inside.await(10, TimeUnit.SECONDS));
            CompletableFuture<Coordinator.StepReport> step = CompletableFuture.supplyAsync(() -> runtime.step(0, List.of(batch)));
            // Rank 0 holds the first stage: F0 and F1 need no input, so both go on its queue at once.
            StageStats stats = runtime.stats(0, Duration.ofSeconds(5));
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (stats.queuedActions() < 2 && System.nanoTime() < deadline) {
                Thread.sleep(10);
                stats = runtime.stats(0, Duration.ofSeconds(5));
            }
            assertEquals(2, stats.queuedActions(), "rank 0's queue: " + stats);
            assertEquals("0F0", stats.currentAction());
            release.countDown();
            assertTrue((Boolean) blocker.get(20, TimeUnit.SECONDS));
            assertTrue(Double.isFinite(step.get(60, TimeUnit.SECONDS).loss()), "the step finishes once the queue moves");
            assertEquals(0, runtime.stats(0, Duration.ofSeconds(5)).queuedActions());
        }
    }

    @Test
    void aFailingStageStopsTheStepNamingRankStageActionAndMicrobatch() {
        ModelSpec model = ModelSpec.gpt2(TextDataset.of(TEXT, 0.1).tokenizer().vocabSize(), 16, 2, 2, 8);
        // 1 MiB per device: the weights fit, the activations of the second microbatch on rank 1 do not... or earlier.
        JobPlan plan = JobPlan.builder(model).ranks(2).microbatches(2).microbatchSize(64).seqLen(8)
                .meshOptions(MeshOptions.defaults().withThreads(1).withMemoryPerDevice(400_000)).build();
        TextDataset data = TextDataset.of(TEXT, 0.1);
        Batch b = data.trainBatch(1, 0, plan.batchSize(), 8);
        Set<Thread> before = Set.copyOf(Thread.getAllStackTraces().keySet());
        PipelineFailure f;
        try (PipelineRuntime runtime = PipelineRuntime.start(plan)) {
            f = assertThrows(PipelineFailure.class, () -> runtime.step(0, List.of(b)));
        }
        String m = f.getMessage();
        assertTrue(m.matches("(?s).*rank \\d, stage \\d, action \\d[A-Z_]+\\d \\(microbatch \\d\\).*out of memory.*"), m);
        waitForThreadsToEnd(before);
    }

    static void waitForThreadsToEnd(Set<Thread> before) {
        List<Thread> left = Thread.getAllStackTraces().keySet().stream()
                .filter(t -> !before.contains(t) && t.getName().startsWith("ttpipe-")).toList();
        for (Thread t : left) {
            try {
                t.join(10_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
        List<Thread> alive = left.stream().filter(Thread::isAlive).toList();
        if (!alive.isEmpty()) throw new AssertionError("threads left running: " + alive);
    }

}

package dev.ttpipe.actors.runtime;

import dev.ttpipe.device.Ops;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.stages.Param;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.transport.FrameFault;
import dev.ttpipe.transport.FrameHeader;

import java.util.function.Predicate;

/**
 * Faults injected into a pipeline on purpose, to show that a check notices them: a kernel that
 * stalls, a rank slower than its peers, a gradient that overflows, a frame corrupted on the wire, a
 * pipeline whose gradients are off by a factor. Passed to {@link PipelineRuntime#start(JobPlan, Faults)} by tests and by
 * {@code ttpipe bench faults}; every real run has {@link #NONE}. Each hook runs where the fault would
 * happen: {@link #beforeCompute} on the rank's device thread, {@link #beforeReduce} there too, before
 * the gradient reduction, {@link #lossScale} in the Coordinator, {@link #frames} in the transport.
 */
public interface Faults {
    /** No fault. */
    Faults NONE = new Faults() {
    };

    /** Before {@code action} runs on {@code rank}'s device; may sleep (a stalled kernel). */
    default void beforeCompute(int rank, Action action) throws InterruptedException {
    }

    /** After the passes of optimizer step {@code step} (from 0), before {@code stage}'s gradients are reduced. */
    default void beforeReduce(int step, Stage stage, Ops ops) {
    }

    /** The factor on the pipeline's loss scale, and so on every gradient (1 in a real run). */
    default double lossScale() {
        return 1.0;
    }

    /** What the Aeron transport does to the frames it sends. */
    default FrameFault frames() {
        return FrameFault.NONE;
    }

    /** Every run of {@code action} on the device takes {@code millis} longer. */
    static Faults stall(Action action, long millis) {
        return new Faults() {
            @Override
            public void beforeCompute(int rank, Action a) throws InterruptedException {
                if (a.equals(action)) Thread.sleep(millis);
            }
        };
    }

    /** Every compute action (F, B, I, W) of rank {@code rank} takes {@code millis} longer, as on a slower device. */
    static Faults slowRank(int rank, long millis) {
        return new Faults() {
            @Override
            public void beforeCompute(int r, Action a) throws InterruptedException {
                if (r == rank) Thread.sleep(millis);
            }
        };
    }

    /**
     * From optimizer step {@code fromStep} on, stage {@code stage}'s first parameter with a gradient
     * gets a NaN gradient before the reduction, as an overflow in its backward would leave it.
     */
    static Faults nonFiniteGradient(int stage, int fromStep) {
        return new Faults() {
            @Override
            public void beforeReduce(int step, Stage s, Ops ops) {
                if (s.index() != stage || step < fromStep) return;
                for (Param p : s.parameters()) {
                    if (p.grad() != null) {
                        ops.scaleInPlace(p.grad(), Float.NaN);
                        return;
                    }
                }
            }
        };
    }

    /** Every gradient of the pipeline (not of the reference trainer) multiplied by {@code factor}. */
    static Faults scaledGradients(double factor) {
        return new Faults() {
            @Override
            public double lossScale() {
                return factor;
            }
        };
    }

    /** The first frame sent that {@code which} accepts arrives with a bit flipped in its payload. */
    static Faults corruptOneFrame(Predicate<FrameHeader> which) {
        FrameFault once = FrameFault.once(which);
        return new Faults() {
            @Override
            public FrameFault frames() {
                return once;
            }
        };
    }
}

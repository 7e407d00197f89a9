package dev.ttpipe.transport;

import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Predicate;

/**
 * A fault put on frames as they are sent, as a faulty link or memory would: the Aeron transport asks
 * it once per frame, and for a frame it accepts flips a bit in the payload of the first chunk, after
 * the chunk's checksum was taken, so the receiver's CRC32C check drops the frame and reports it.
 * Given in the transport's {@link AeronTransport.Config}; {@link #NONE} in every real run. Tests
 * and {@code ttpipe bench faults} use it to show a corrupted frame fails the step, naming the channel.
 */
@FunctionalInterface
public interface FrameFault {
    /** No frame is corrupted. */
    FrameFault NONE = h -> false;

    /** Whether to corrupt this frame (called on the sending thread, once per frame with a payload). */
    boolean corrupt(FrameHeader header);

    /** Corrupts the first frame {@code which} accepts, and no other. */
    static FrameFault once(Predicate<FrameHeader> which) {
        AtomicBoolean spent = new AtomicBoolean();
        return h -> !spent.get() && which.test(h) && spent.compareAndSet(false, true);
    }
}

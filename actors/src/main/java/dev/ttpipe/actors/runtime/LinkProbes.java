package dev.ttpipe.actors.runtime;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Device;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.transport.FrameHeader;
import dev.ttpipe.transport.TensorKind;
import dev.ttpipe.transport.TensorPayload;
import dev.ttpipe.transport.Transport;
import org.apache.pekko.actor.Cancellable;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.javadsl.ActorContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * A rank's side of the {@link LinkCheck}, owned by its {@link StageActor} and called from its handlers only: the
 * probe of one data link that this rank runs (its frames made on the device queue, then sent one at a time as
 * their echoes come back, each with a deadline), the echo it sends back for every probe frame of another rank,
 * and how many probe frames of the latest check it got from each rank.
 *
 * <p>The frames are tensors on the rank's submesh, sent and received through the transport as activations are
 * (chunked, checksummed, assembled into the receiver's memory), with kinds {@link TensorKind#PROBE} and
 * {@link TensorKind#ECHO}. Each rank's device memory peak is reset after a probe, so step 1's peak is the step's.
 */
final class LinkProbes {
    private static final Logger log = LoggerFactory.getLogger(LinkProbes.class);

    private final ActorContext<StageActor.Command> ctx;
    /** The actor, for the device queue's and the transport's threads to tell (the context is the actor's thread's only). */
    private final ActorRef<StageActor.Command> self;
    private final int rank;
    private final RankState state;
    private final Transport transport;
    /** The check whose frames {@link #small} and {@link #large} count, by sending rank. */
    private int seenCheck = -1;
    private final int[] small, large;
    /** The probe this rank runs, or null. */
    private Probe current;

    /** One link's probe: its frames, the next one to send, and the round trips so far. */
    private static final class Probe {
        final StageActor.ProbeLink request;
        final List<Tensor> unsent;
        final long largeBytes;
        final long[] rtt;
        int index;
        long sentNs;
        Cancellable deadline;

        Probe(StageActor.ProbeLink request, List<Tensor> frames) {
            this.request = request;
            this.unsent = new ArrayList<>(frames);
            Tensor last = frames.get(frames.size() - 1);
            this.largeBytes = last.bytesPerDevice() * last.submesh().shape().size();
            this.rtt = new long[frames.size()];
        }
    }

    LinkProbes(ActorContext<StageActor.Command> ctx, int rank, int ranks, RankState state, Transport transport) {
        this.ctx = ctx;
        this.self = ctx.getSelf();
        this.rank = rank;
        this.state = state;
        this.transport = transport;
        this.small = new int[ranks];
        this.large = new int[ranks];
    }

    static boolean carries(TensorPayload p) {
        TensorKind k = p.header().kind();
        return k == TensorKind.PROBE || k == TensorKind.ECHO;
    }

    /** Starts the probe of {@code m}: its frames are made on the device queue ({@link StageActor.ProbeFrames} when they are). */
    void probe(StageActor.ProbeLink m) {
        if (current != null) finish(current, "a new probe to rank " + m.toRank() + " began before this one ended");
        Submesh submesh = state.submesh();
        state.run(stages -> {
            List<Tensor> frames = new ArrayList<>();
            try {
                for (int i = 0; i < LinkCheck.SMALL_FRAMES; i++) frames.add(frame(submesh, LinkCheck.SMALL_BYTES));
                frames.add(frame(submesh, m.largeBytes()));
            } catch (RuntimeException e) {
                frames.forEach(Tensor::close);
                throw e;
            }
            return frames;
        }).whenComplete((frames, err) -> {
            @SuppressWarnings("unchecked") List<Tensor> made = (List<Tensor>) frames;
            self.tell(new StageActor.ProbeFrames(m, made, err));
        });
    }

    /** A tensor of about {@code bytes} in all, replicated on {@code submesh}'s devices; on the device queue. */
    private static Tensor frame(Submesh submesh, long bytes) {
        long elements = Math.max(1, bytes / DType.FP32.bytes() / submesh.shape().size());
        return submesh.ops().zeros(Shape.of((int) elements), Layout.REPLICATED, DType.FP32);
    }

    void framesReady(StageActor.ProbeFrames m, long jobId) {
        if (m.error() != null) {
            m.request().replyTo().tell(new LinkCheck.Probed(rank, m.request().toRank(), new long[0], 0, m.request().largeBytes(),
                    "rank " + rank + " could not make its frames of " + m.request().largeBytes() + " bytes on its devices ("
                            + Coordinator.describe(m.error()) + "); lower multihost_config.link_check_bytes"));
            return;
        }
        if (current != null) finish(current, "a new probe began before this one ended");
        current = new Probe(m.request(), m.frames());
        send(current, jobId);
    }

    private void send(Probe p, long jobId) {
        Tensor t = p.unsent.remove(0);
        int to = p.request.toRank(), index = p.index;
        FrameHeader h = new FrameHeader(jobId, p.request.check(), rank, to, index, TensorKind.PROBE, t.dtype(), t.shape(),
                t.layout(), 0, 0);
        p.deadline = ctx.scheduleOnce(Duration.ofMillis(p.request.deadlineMs()), self, new StageActor.ProbeExpired(p.request, index));
        p.sentNs = System.nanoTime();
        transport.channel(rank, to).send(h, t).whenComplete((v, err) -> {
            if (err != null) self.tell(new StageActor.ProbeSendFailed(p.request, index, err));
        });
    }

    /** A probe frame or an echo arrived (see {@link #carries}). */
    void arrived(TensorPayload payload, long arrivedNs, long jobId) {
        FrameHeader h = payload.header();
        payload.discard();
        if (h.kind() == TensorKind.PROBE) {
            echo(h, jobId);
            return;
        }
        Probe p = current;
        if (p == null || h.pass() != p.request.check() || h.fromStage() != p.request.toRank() || h.microbatch() != p.index) {
            return;                                                         // an echo of an earlier check or frame
        }
        p.deadline.cancel();
        p.rtt[p.index++] = arrivedNs - p.sentNs;
        if (p.unsent.isEmpty()) {
            current = null;
            p.request.replyTo().tell(new LinkCheck.Probed(rank, p.request.toRank(), Arrays.copyOf(p.rtt, p.rtt.length - 1),
                    p.rtt[p.rtt.length - 1], p.largeBytes, null));
            resetPeaks();
        } else {
            send(p, jobId);
        }
    }

    /** Counts the probe frame {@code h} and answers it with a small frame, made and sent from the device queue. */
    private void echo(FrameHeader h, long jobId) {
        int from = h.fromStage();
        if (from < 0 || from >= small.length) return;
        if (h.pass() != seenCheck) {
            seenCheck = h.pass();
            Arrays.fill(small, 0);
            Arrays.fill(large, 0);
        }
        if (h.microbatch() < LinkCheck.SMALL_FRAMES) small[from]++;
        else large[from]++;
        resetPeaks();
        Submesh submesh = state.submesh();
        state.execute(() -> {
            try {
                Tensor t = frame(submesh, LinkCheck.SMALL_BYTES);
                transport.channel(rank, from).send(new FrameHeader(jobId, h.pass(), rank, from, h.microbatch(), TensorKind.ECHO,
                        t.dtype(), t.shape(), t.layout(), 0, 0), t);
            } catch (RuntimeException e) {
                log.debug("rank {}: no echo to rank {}: {}", rank, from, e.toString());   // the prober's deadline says so
            }
        });
    }

    /** What this rank got from {@code from} in check {@code check}: small and large probe frames. */
    LinkCheck.Seen seen(int check, int from) {
        boolean counted = check == seenCheck && from >= 0 && from < small.length;
        return new LinkCheck.Seen(rank, from, counted ? small[from] : 0, counted ? large[from] : 0);
    }

    void expired(StageActor.ProbeExpired m) {
        Probe p = current;
        if (p == null || p.request != m.request() || p.index != m.index()) return;
        finish(p, LinkCheck.NOT_ECHOED + " (frame " + (m.index() + 1) + " of " + p.rtt.length + ")");
    }

    void sendFailed(StageActor.ProbeSendFailed m) {
        Probe p = current;
        if (p == null || p.request != m.request() || p.index != m.index()) return;
        finish(p, "frame " + (m.index() + 1) + " could not be sent: " + Coordinator.describe(m.error()));
    }

    /** Ends {@code p} with {@code failure}: the round trips so far, the frames not sent freed. */
    private void finish(Probe p, String failure) {
        if (p.deadline != null) p.deadline.cancel();
        p.unsent.forEach(Tensor::close);
        p.unsent.clear();
        if (current == p) current = null;
        p.request.replyTo().tell(new LinkCheck.Probed(rank, p.request.toRank(), Arrays.copyOf(p.rtt,
                Math.min(p.index, LinkCheck.SMALL_FRAMES)), 0, p.largeBytes, failure));
        resetPeaks();
    }

    /** Stopping: the frames not sent are freed. */
    void stop() {
        if (current != null) {
            current.unsent.forEach(Tensor::close);
            current = null;
        }
    }

    private void resetPeaks() {
        state.submesh().devices().forEach(Device::resetPeak);
    }
}

package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.cluster.ClusterMessage;
import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.config.Sizes;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.javadsl.ActorContext;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.javadsl.Receive;
import org.apache.pekko.actor.typed.javadsl.TimerScheduler;
import org.apache.pekko.pattern.StatusReply;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * The link check of a multi-process job, run after its ranks joined and before step 1 (and again after a
 * recovery): every control link (from rank 0's Coordinator to each other rank and back, through Pekko) and
 * every data link the pipeline's frames cross (each direction between two ranks that hold neighbouring
 * stages, over the transport, as real frames go) carries a small message and a large one, each within a
 * deadline. It answers with every link's latency and bandwidth, or with one line naming the link that failed
 * (both ranks, their hosts and ports) and what was measured on it.
 *
 * <p>One actor per check, spawned by the Coordinator; it checks one link at a time, so that the figures of
 * one link are not those of two sharing a host's cores:
 * <ul>
 *   <li>a control link to rank r: {@value #SMALL_FRAMES} {@link StageActor.Ping}s of {@value #SMALL_BYTES} bytes,
 *   then one of the large size, each answered by a {@link Pong} of the same size;</li>
 *   <li>a data link from rank a to rank b: rank a runs a {@link StageActor.ProbeLink}: it sends
 *   {@value #SMALL_FRAMES} small frames and a large one to b, one at a time, each echoed by b with a small
 *   frame, and answers with the round trips ({@link Probed}). When a frame is not echoed in time, rank b is
 *   asked what it got ({@link StageActor.GetProbesSeen}): then the line names the direction that carried
 *   nothing, a to b or the echo's way back.</li>
 * </ul>
 * Latency is half the smallest round trip of a small frame; bandwidth the large frame's bytes over what its
 * round trip took beyond a small one's (both ways for a control link, whose answer is large too).
 */
public final class LinkCheck {
    /** Bytes of the small frames and echoes. */
    public static final int SMALL_BYTES = 1024;
    /** Small frames per link: the first also waits for the link to connect; latency is the fastest. */
    static final int SMALL_FRAMES = 3;
    /**
     * A control link's large message is at most this size: control messages are small (the largest, a step's
     * microbatches or a tied embedding's gradient, are of this order), and Kryo copies each as it grows its buffer.
     */
    public static final long MAX_CONTROL_BYTES = 1L << 20;
    /** How a probe's failure begins when a frame was not echoed in time (then its receiver is asked what it got). */
    static final String NOT_ECHOED = "not echoed within the deadline";
    /** How long a rank gets to say what it received, after a frame to it was not echoed. */
    private static final Duration ASK_SEEN = Duration.ofSeconds(2);

    public sealed interface Command {
    }

    /** A rank's answer to {@link StageActor.Ping} number {@code seq}: the payload back. */
    public record Pong(int rank, int seq, byte[] payload) implements Command, ClusterMessage {
    }

    /**
     * Rank {@code from}'s answer to {@link StageActor.ProbeLink} to rank {@code to}: the round trips of its small
     * frames and of its large frame of {@code largeBytes} (nanoseconds), or why the link failed ({@code failure}:
     * which frame was not echoed within the deadline, or what the send or the frame's memory refused), with the
     * round trips measured before.
     */
    public record Probed(int from, int to, long[] smallRttNs, long largeRttNs, long largeBytes, String failure)
            implements Command, ClusterMessage {
    }

    /** Rank {@code rank}'s answer to {@link StageActor.GetProbesSeen}: the small and large frames of the check it got from {@code from}. */
    public record Seen(int rank, int from, int small, int large) implements Command, ClusterMessage {
    }

    /** The step {@code step} got no answer within its deadline. */
    private record Expired(int step) implements Command {
    }

    /** A directed link between two ranks. */
    public record Link(int from, int to) {
    }

    /**
     * What one check covers: the control links to {@code controlRanks} (from rank 0), then {@code dataLinks} in
     * order; large frames of {@code largeBytes}; each frame's {@code deadline}. {@code deployment} names hosts and ports.
     */
    public record Plan(Deployment deployment, List<Integer> controlRanks, List<Link> dataLinks, long largeBytes, Duration deadline) {
        public Plan {
            controlRanks = List.copyOf(controlRanks);
            dataLinks = List.copyOf(dataLinks);
        }

        /** How long the whole check can take when every frame takes just under its deadline: what an asker waits at most. */
        public Duration worstCase() {
            long perLink = (SMALL_FRAMES + 1) * deadline.toMillis() + ASK_SEEN.toMillis() + 1000;
            return Duration.ofMillis((controlRanks.size() + dataLinks.size()) * perLink + 5000);
        }
    }

    /**
     * The check of {@code plan}'s job: the control links from rank 0 to every other rank, and both directions
     * between every two ranks whose stages are neighbours (activations one way, gradients the other), in stage order.
     */
    public static Plan plan(JobPlan job, Deployment deployment, long largeBytes, Duration deadline) {
        Set<Link> links = new LinkedHashSet<>();
        for (int s = 0; s + 1 < job.stages(); s++) {
            int a = job.schedule().rankOfStage(s), b = job.schedule().rankOfStage(s + 1);
            if (a == b) continue;
            Link there = new Link(Math.min(a, b), Math.max(a, b));
            if (links.add(there)) links.add(new Link(there.to(), there.from()));
        }
        List<Integer> control = new ArrayList<>();
        for (int r = 1; r < job.ranks(); r++) control.add(r);
        return new Plan(deployment, control, new ArrayList<>(links), largeBytes, deadline);
    }

    /**
     * One link's figures: {@code kind} {@code control} (rank 0 to {@code to} and back) or {@code data}
     * ({@code from} to {@code to}), where each end listens, the one-way latency, the bandwidth in GB/s (1e9 bytes
     * per second) and the large frame's bytes.
     */
    public record Measured(String kind, int from, int to, String fromAddress, String toAddress, double latencyUs, double gbps,
                           long bytes) {
    }

    /** A passed check: every link's figures, the deadline each frame had, and how long the check took. */
    public record Report(List<Measured> links, long largeBytes, Duration deadline, double seconds) {
        public Report {
            links = List.copyOf(links);
        }
    }

    /**
     * Runs {@code plan} against {@code ranks} (each rank's actor, by rank) and answers {@code replyTo}; {@code check}
     * tells this check's frames from an earlier one's.
     */
    static Behavior<Command> create(Plan plan, List<ActorRef<StageActor.Command>> ranks, int check,
                                    ActorRef<StatusReply<Report>> replyTo) {
        return Behaviors.setup(ctx -> Behaviors.withTimers(timers -> new LinkCheck(ctx, timers, plan, ranks, check, replyTo).next()));
    }

    private final ActorContext<Command> ctx;
    private final TimerScheduler<Command> timers;
    private final Plan plan;
    private final List<ActorRef<StageActor.Command>> ranks;
    private final int check;
    private final ActorRef<StatusReply<Report>> replyTo;
    private final long startNs = System.nanoTime();
    private final List<Measured> measured = new ArrayList<>();
    /** Links done: control links first, then data links. */
    private int done;
    /** Counts every message that waits for an answer: an {@link Expired} of an earlier one is stale. */
    private int step;

    private LinkCheck(ActorContext<Command> ctx, TimerScheduler<Command> timers, Plan plan, List<ActorRef<StageActor.Command>> ranks,
                      int check, ActorRef<StatusReply<Report>> replyTo) {
        this.ctx = ctx;
        this.timers = timers;
        this.plan = plan;
        this.ranks = ranks;
        this.check = check;
        this.replyTo = replyTo;
    }

    /** The next link, or the report when every link is done. */
    private Behavior<Command> next() {
        int controls = plan.controlRanks().size();
        if (done < controls) return control(plan.controlRanks().get(done));
        if (done < controls + plan.dataLinks().size()) return data(plan.dataLinks().get(done - controls));
        replyTo.tell(StatusReply.success(new Report(measured, plan.largeBytes(), plan.deadline(), (System.nanoTime() - startNs) / 1e9)));
        return Behaviors.stopped();
    }

    private int expectAnswerWithin(Duration d) {
        step++;
        timers.startSingleTimer("deadline", new Expired(step), d);
        return step;
    }

    // ---- a control link: pings through Pekko ---------------------------------------------------------------

    private Behavior<Command> control(int rank) {
        long large = Math.min(plan.largeBytes(), MAX_CONTROL_BYTES);
        long[] rtt = new long[SMALL_FRAMES + 1];
        long[] sentNs = new long[1];
        int[] seq = {0};
        Runnable ping = () -> {
            int bytes = seq[0] < SMALL_FRAMES ? SMALL_BYTES : (int) large;
            expectAnswerWithin(plan.deadline());
            sentNs[0] = System.nanoTime();
            ranks.get(rank).tell(new StageActor.Ping(seq[0], new byte[bytes], ctx.getSelf()));
        };
        ping.run();
        return Behaviors.receive(Command.class)
                .onMessage(Pong.class, m -> {
                    if (m.rank() != rank || m.seq() != seq[0]) return Behaviors.same();
                    rtt[seq[0]] = System.nanoTime() - sentNs[0];
                    if (++seq[0] <= SMALL_FRAMES) {
                        ping.run();
                        return Behaviors.same();
                    }
                    timers.cancel("deadline");
                    long small = min(rtt, SMALL_FRAMES);
                    measured.add(new Measured("control", 0, rank, controlAddress(0), controlAddress(rank), small / 2e3,
                            gbps(2 * large, rtt[SMALL_FRAMES], small), large));
                    done++;
                    return next();
                })
                .onMessage(Expired.class, m -> {
                    if (m.step() != step) return Behaviors.same();
                    return fail(controlFailure(rank, seq[0], rtt, large));
                })
                .onAnyMessage(m -> Behaviors.same())
                .build();
    }

    private String controlFailure(int rank, int seq, long[] rtt, long large) {
        String link = "control link rank 0 (" + controlAddress(0) + ") -> rank " + rank + " (" + controlAddress(rank) + ") and back";
        String check = "; check that tcp port " + plan.deployment().rank(rank).controlPort() + " is open " + between(0, rank)
                + " and port " + plan.deployment().rank(0).controlPort() + " the other way";
        if (seq < SMALL_FRAMES) {
            return link + " carried nothing in " + seconds(plan.deadline()) + " (small message " + (seq + 1) + " of "
                    + SMALL_FRAMES + " not answered" + (seq == 0 ? "" : "; the first took " + ms(rtt[0])) + ")" + check;
        }
        return link + " did not carry a " + Sizes.format(large) + " message in " + seconds(plan.deadline()) + " (small messages took "
                + ms(min(rtt, SMALL_FRAMES)) + " there and back)" + check;
    }

    // ---- a data link: frames over the transport -------------------------------------------------------------

    private Behavior<Command> data(Link link) {
        int probe = expectAnswerWithin(plan.deadline().multipliedBy(SMALL_FRAMES + 1).plusSeconds(1));
        ranks.get(link.from()).tell(new StageActor.ProbeLink(check, link.to(), plan.largeBytes(), plan.deadline().toMillis(),
                ctx.getSelf()));
        return Behaviors.receive(Command.class)
                .onMessage(Probed.class, m -> {
                    if (m.from() != link.from() || m.to() != link.to()) return Behaviors.same();
                    timers.cancel("deadline");
                    if (m.failure() == null) {
                        long small = min(m.smallRttNs(), m.smallRttNs().length);
                        measured.add(new Measured("data", link.from(), link.to(), dataAddress(link.from()), dataAddress(link.to()),
                                small / 2e3, gbps(m.largeBytes(), m.largeRttNs(), small), m.largeBytes()));
                        done++;
                        return next();
                    }
                    if (m.failure().startsWith(NOT_ECHOED)) return askWhatArrived(link, m);
                    return fail("data link " + describe(link.from(), link.to()) + ": " + m.failure());
                })
                .onMessage(Expired.class, m -> m.step() != probe ? Behaviors.same()
                        : fail("rank " + link.from() + " (" + controlAddress(link.from()) + ") did not answer within "
                        + seconds(plan.deadline().multipliedBy(SMALL_FRAMES + 1).plusSeconds(1)) + " while checking its data link to rank "
                        + link.to() + " (its process stopped answering on the control link)"))
                .onAnyMessage(m -> Behaviors.same())
                .build();
    }

    /** A frame of {@code link} was not echoed: asks its receiver what it got, to name the direction that failed. */
    private Behavior<Command> askWhatArrived(Link link, Probed probed) {
        int asked = expectAnswerWithin(ASK_SEEN);
        ranks.get(link.to()).tell(new StageActor.GetProbesSeen(check, link.from(), ctx.getSelf()));
        return Behaviors.receive(Command.class)
                .onMessage(Seen.class, m -> {
                    if (m.rank() != link.to() || m.from() != link.from()) return Behaviors.same();
                    timers.cancel("deadline");
                    return fail(dataFailure(link, probed, m));
                })
                .onMessage(Expired.class, m -> m.step() != asked ? Behaviors.same() : fail(dataFailure(link, probed, null)))
                .onAnyMessage(m -> Behaviors.same())
                .build();
    }

    /** The line for a data link whose frame was not echoed: which way carried nothing, and what was measured before. */
    private String dataFailure(Link link, Probed p, Seen seen) {
        int measuredSmall = p.smallRttNs().length;
        boolean large = measuredSmall >= SMALL_FRAMES;
        String in = " in " + seconds(plan.deadline());
        String before = measuredSmall == 0 ? "" : "; small frames took " + ms(min(p.smallRttNs(), measuredSmall)) + " there and back";
        boolean arrived = seen != null && (large ? seen.large() > 0 : seen.small() > measuredSmall);
        Link broken = arrived ? new Link(link.to(), link.from()) : link;
        String size = Sizes.format(p.largeBytes()), sender = "rank " + link.from() + "'s ";
        String what;
        if (seen == null) {
            what = (large ? " did not carry a " + size + " frame" : " carried nothing") + in + " (frame " + (measuredSmall + 1)
                    + " not echoed, and rank " + link.to() + " did not say whether it got it" + before + ")";
        } else if (!large) {
            what = " carried nothing" + in + (arrived ? " (rank " + link.to() + " got " + sender + "small frame, its echo did not arrive"
                    : " (small frame " + (measuredSmall + 1) + " of " + SMALL_FRAMES + " not received") + before + ")";
        } else if (!arrived) {
            what = " did not carry a " + size + " frame" + in + " (rank " + link.to() + " did not get it" + before + ")";
        } else {
            what = " did not carry the echo of a " + size + " frame" + in + " (rank " + link.to() + " got " + sender + size
                    + " frame" + before + ")";
        }
        Deployment.Binding to = plan.deployment().rank(broken.to());
        String hint = "; check that udp port " + to.dataPort() + " is open " + between(broken.from(), broken.to())
                + (large && !arrived ? ", and the bandwidth between them (multihost_config.link_check_bytes, "
                + "link_check_timeout_s)" : "");
        return "data link " + describe(broken.from(), broken.to()) + what + hint;
    }

    /** "from HOST to HOST", or "on HOST" when both ranks are on one. */
    private String between(int from, int to) {
        String a = plan.deployment().rank(from).host(), b = plan.deployment().rank(to).host();
        return a.equals(b) ? "on " + a : "from " + a + " to " + b;
    }

    private String describe(int from, int to) {
        return "rank " + from + " (" + dataAddress(from) + ") -> rank " + to + " (" + dataAddress(to) + ")";
    }

    private Behavior<Command> fail(String why) {
        replyTo.tell(StatusReply.error("link check: " + why));
        return Behaviors.stopped();
    }

    // ---- figures --------------------------------------------------------------------------------------------

    private String controlAddress(int rank) {
        return plan.deployment().rank(rank).controlAddress();
    }

    private String dataAddress(int rank) {
        Deployment.Binding b = plan.deployment().rank(rank);
        return b.host() + ":" + b.dataPort();
    }

    private static long min(long[] v, int n) {
        long m = Long.MAX_VALUE;
        for (int i = 0; i < n; i++) m = Math.min(m, v[i]);
        return m;
    }

    /** GB/s of {@code bytes} that took {@code largeRtt} where a small frame's round trip took {@code smallRtt}. */
    static double gbps(long bytes, long largeRtt, long smallRtt) {
        long ns = largeRtt - smallRtt > 0 ? largeRtt - smallRtt : largeRtt;
        return bytes / (double) Math.max(1, ns);
    }

    private static String seconds(Duration d) {
        double s = d.toMillis() / 1e3;
        return (s == Math.rint(s) ? String.format(Locale.ROOT, "%.0f", s) : String.format(Locale.ROOT, "%.1f", s)) + " s";
    }

    private static String ms(long ns) {
        return String.format(Locale.ROOT, "%.2f ms", ns / 1e6);
    }
}

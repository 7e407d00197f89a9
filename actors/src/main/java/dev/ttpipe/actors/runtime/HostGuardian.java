package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.cluster.ClusterMessage;
import dev.ttpipe.actors.cluster.ClusterSettings;
import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.transport.TensorPayload;
import dev.ttpipe.transport.TensorReceiver;
import dev.ttpipe.transport.Transport;
import org.apache.pekko.actor.Address;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.javadsl.AbstractBehavior;
import org.apache.pekko.actor.typed.javadsl.ActorContext;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.javadsl.Receive;
import org.apache.pekko.actor.typed.receptionist.Receptionist;
import org.apache.pekko.actor.typed.receptionist.ServiceKey;
import org.apache.pekko.actor.typed.DispatcherSelector;
import org.apache.pekko.cluster.ClusterEvent;
import org.apache.pekko.cluster.Member;
import org.apache.pekko.cluster.UniqueAddress;
import org.apache.pekko.cluster.typed.Cluster;
import org.apache.pekko.cluster.typed.Down;
import org.apache.pekko.cluster.typed.Subscribe;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.ConnectException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.UnknownHostException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Locale;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * The root actor of a host process: spawns a {@link StageActor} for every rank bound to this host
 * (each with its submesh) and, on the host that runs it (rank 0's, or the only one), the job's
 * {@link Coordinator}. In a multi-process job it registers its ranks with the Receptionist, finds
 * the others there, and watches cluster reachability. A rank that stops answering (a long GC pause,
 * SIGSTOP, a swapped host, a partition) is waited for up to {@link Deployment#livenessGrace()}, named in a
 * notice, while its control port is probed once a second: when it answers again the job simply goes on;
 * when nothing listens on that port any more (its process died) or the grace runs out, it is lost: the
 * running step fails with its rank and host named, and a worker that loses rank 0 ends itself. Rank 0
 * downs a rank it declares dead, so that only a new process of it can come back, and under
 * {@code ttpipe launch} ({@link Liveness#killDeclaredDead()}) kills its process, which the launcher
 * then starts again as it does a worker that died.
 */
public final class HostGuardian extends AbstractBehavior<HostGuardian.Command> {

    public sealed interface Command {
    }

    public record GetCoordinator(ActorRef<ActorRef<Coordinator.Command>> replyTo) implements Command {
    }

    public record GetRank(int rank, ActorRef<ActorRef<StageActor.Command>> replyTo) implements Command {
    }

    /**
     * Sent by rank 0 to every worker when the job is over: the worker's process then exits ({@code preempted}:
     * the job stopped at a step boundary for that request, its checkpoint saved; null otherwise).
     */
    public record EndJob(String reason, boolean failed, Preempt preempted) implements Command, ClusterMessage {
    }

    /** On rank 0 at the end of the job: tells every other worker to exit; replies once sent. */
    public record EndAll(String reason, boolean failed, Preempt preempted, ActorRef<Boolean> replyTo) implements Command {
    }

    /**
     * A worker's process got {@code signal} (SIGTERM, SIGINT): sent to itself, a worker passes it on to rank 0's
     * host, whose training loop then stops at the next step boundary (see {@code createWorker}'s {@code onPreempt}).
     */
    public record Preempt(String signal, int exitCode, int rank) implements Command, ClusterMessage {
    }

    /** The ranks that have not joined yet. */
    public record GetMissing(ActorRef<List<Integer>> replyTo) implements Command {
    }

    private record RankStopped(int rank) implements Command {
    }

    /**
     * To a worker started with {@link #createDeferredWorker}: the transport and where every rank runs are known now
     * (after {@link Rendezvous}); what arrived before this waits until it.
     */
    public record Begin(Transport transport, Deployment deployment) implements Command {
    }

    private record Listed(Receptionist.Listing listing) implements Command {
    }

    private record Reachability(ClusterEvent.ReachabilityEvent event) implements Command {
    }

    private record MemberGone(ClusterEvent.MemberRemoved event) implements Command {
    }

    /** Time to probe again the control port of a rank that does not answer (the silence that began at {@code sinceNs}). */
    private record Probe(int rank, long sinceNs) implements Command {
    }

    /** What the probe found: {@code refused} when nothing listens on the rank's control port (its process is gone). */
    private record Probed(int rank, long sinceNs, boolean refused) implements Command {
    }

    /** A rank declared dead: {@code what} says why, and what became of its process. */
    private record DeclaredDead(int rank, Member member, String what) implements Command {
    }

    /**
     * How a worker of a multi-process job treats a rank that stops answering, beside waiting out
     * {@link Deployment#livenessGrace()}: {@code notices} hears the lines that name it (waiting, answering
     * again); {@code killDeclaredDead}: every worker is a child of one {@code ttpipe launch} on this
     * machine, so the process of a rank declared dead is killed (SIGKILL), and the launcher starts it
     * again as it does a worker that died.
     */
    public record Liveness(boolean killDeclaredDead, Consumer<String> notices) {
        /** Notices on this process's stdout; nothing killed. */
        public static final Liveness PRINTED = new Liveness(false, line -> System.out.println(Watchdog.PREFIX + line));
    }

    /** A rank that stopped answering: which process of it, and since when (the failure detector's verdict). */
    private static final class Silence {
        final Member member;
        final long sinceNs;
        /** How long this process itself had just been paused when the silence began (0: it was not). */
        final long pausedHereNs;
        long noticedNs;

        Silence(Member member, long sinceNs, long pausedHereNs) {
            this.member = member;
            this.sinceNs = sinceNs;
            this.pausedHereNs = pausedHereNs;
            this.noticedNs = sinceNs;
        }
    }

    /** How often a silent rank's control port is probed, and its silence told again. */
    private static final Duration PROBE_EVERY = Duration.ofSeconds(1);
    private static final long NOTICE_EVERY_NS = TimeUnit.SECONDS.toNanos(10);
    private static final int PROBE_TIMEOUT_MS = 1000;
    /** Why a worker that rank 0 declared dead (and that woke up after all) ends. */
    private static final String REMOVED_HERE = "rank 0 declared this worker dead (it did not answer within"
            + " multihost_config.liveness_grace_s) and removed it from the job; a new process of this rank can join it again";

    static ServiceKey<StageActor.Command> stageKey(int rank) {
        return ServiceKey.create(StageActor.Command.class, "ttpipe-rank-" + rank);
    }

    static ServiceKey<Command> hostKey(int rank) {
        return ServiceKey.create(Command.class, "ttpipe-host-" + rank);
    }

    /** Every rank in this JVM, the Coordinator here too. */
    public static Behavior<Command> create(JobPlan plan, Map<Integer, Submesh> submeshes, Transport transport, Faults faults) {
        return Behaviors.setup(ctx -> new HostGuardian(ctx, plan, submeshes, transport, null, true, null, faults, p -> { },
                Liveness.PRINTED));
    }

    /**
     * One worker of a multi-process job: the ranks in {@code submeshes} live here; the Coordinator
     * too when {@code hostsCoordinator}. {@code ended} completes with null when rank 0 ends the job
     * normally, or with the reason it ended otherwise. {@code onPreempt} hears, on rank 0, a worker's
     * {@link Preempt}; on the other workers, that rank 0 ended the job for one (before {@code ended} completes).
     * {@code liveness}: what it does about a rank that stops answering.
     */
    public static Behavior<Command> createWorker(JobPlan plan, Map<Integer, Submesh> submeshes, Transport transport,
                                                 Deployment deployment, boolean hostsCoordinator,
                                                 CompletableFuture<String> ended, Consumer<Preempt> onPreempt, Liveness liveness) {
        ProcessPauses.start();
        return Behaviors.setup(ctx -> new HostGuardian(ctx, plan, submeshes, transport, deployment, hostsCoordinator, ended,
                Faults.NONE, onPreempt, liveness));
    }

    /**
     * {@link #createWorker}, whose transport and deployment come later, in {@link Begin}: a worker whose peers'
     * endpoints are not known until rank 0 sends them ({@link Rendezvous}). Messages before it are stashed.
     */
    public static Behavior<Command> createDeferredWorker(JobPlan plan, Map<Integer, Submesh> submeshes, boolean hostsCoordinator,
                                                         CompletableFuture<String> ended, Consumer<Preempt> onPreempt,
                                                         Liveness liveness) {
        return Behaviors.withStash(1_000, stash -> Behaviors.receive(Command.class)
                .onMessage(Begin.class, b -> stash.unstashAll(
                        createWorker(plan, submeshes, b.transport(), b.deployment(), hostsCoordinator, ended, onPreempt, liveness)))
                .onAnyMessage(m -> {
                    stash.stash(m);
                    return Behaviors.same();
                })
                .build());
    }

    /**
     * What the transport delivers to for {@code rank}: arrivals become {@link StageActor.Arrived} messages.
     * It is bound as soon as the actor is spawned, before any rank can send.
     */
    private static TensorReceiver receiverFor(int rank, ActorRef<StageActor.Command> actor) {
        Logger log = LoggerFactory.getLogger(StageActor.class);
        return new TensorReceiver() {
            @Override
            public void onTensor(TensorPayload payload) {
                actor.tell(new StageActor.Arrived(payload, System.nanoTime()));
            }

            @Override
            public void onError(String channel, String problem) {
                actor.tell(new StageActor.FrameDropped(channel, problem));
            }

            @Override
            public void onForeignFrame(String channel, String problem) {
                log.debug("rank {}: {}: {}", rank, channel, problem);
            }
        };
    }

    private final JobPlan plan;
    private final Faults faults;
    private final Deployment deployment;
    private final boolean hostsCoordinator;
    private final CompletableFuture<String> ended;
    private final ActorRef<StageActor.Command>[] ranks;
    private final Map<Integer, ActorRef<Command>> hosts = new HashMap<>();
    private final List<GetCoordinator> waiting = new ArrayList<>();
    private final Map<Integer, Boolean> local = new HashMap<>();
    private ActorRef<Coordinator.Command> coordinator;
    /** Ranks whose process was lost and has not been replaced yet. */
    private final Set<Integer> lost = new TreeSet<>();
    /** The processes lost so far: a later removal of one of them from the cluster is no news. */
    private final Set<UniqueAddress> gone = new HashSet<>();
    /** Ranks that stopped answering and are waited for. */
    private final Map<Integer, Silence> silent = new HashMap<>();
    private final Liveness liveness;
    private String failure;
    private boolean ending;
    private final Consumer<Preempt> onPreempt;
    /** A worker's preemption that waits for rank 0's host to be listed. */
    private Preempt unsent;

    @SuppressWarnings("unchecked")
    private HostGuardian(ActorContext<Command> ctx, JobPlan plan, Map<Integer, Submesh> submeshes, Transport transport,
                         Deployment deployment, boolean hostsCoordinator, CompletableFuture<String> ended, Faults faults,
                         Consumer<Preempt> onPreempt, Liveness liveness) {
        super(ctx);
        this.liveness = liveness;
        this.onPreempt = onPreempt;
        this.plan = plan;
        this.faults = faults;
        this.deployment = deployment;
        this.hostsCoordinator = hostsCoordinator;
        this.ended = ended;
        this.ranks = new ActorRef[plan.ranks()];
        for (Map.Entry<Integer, Submesh> e : submeshes.entrySet()) {
            int r = e.getKey();
            ActorRef<StageActor.Command> ref = ctx.spawn(StageActor.create(plan, r, e.getValue(), transport, faults), "rank-" + r);
            transport.bind(r, e.getValue(), receiverFor(r, ref));
            ctx.watchWith(ref, new RankStopped(r));
            ranks[r] = ref;
            local.put(r, true);
            if (deployment != null) {
                ctx.getSystem().receptionist().tell(Receptionist.register(stageKey(r), ref));
                ctx.getSystem().receptionist().tell(Receptionist.register(hostKey(r), ctx.getSelf()));
            }
        }
        if (deployment == null) {
            startCoordinator();
        } else {
            // One adapter for every listing (an actor keeps one adapter per message class); the key says which.
            ActorRef<Receptionist.Listing> listings = ctx.messageAdapter(Receptionist.Listing.class, Listed::new);
            if (hostsCoordinator) {
                for (int r = 0; r < plan.ranks(); r++) {
                    if (local.containsKey(r)) continue;
                    ctx.getSystem().receptionist().tell(Receptionist.subscribe(stageKey(r), listings));
                    ctx.getSystem().receptionist().tell(Receptionist.subscribe(hostKey(r), listings));
                }
            } else {
                ctx.getSystem().receptionist().tell(Receptionist.subscribe(hostKey(0), listings));   // where a preemption goes
            }
            Cluster cluster = Cluster.get(ctx.getSystem());
            cluster.subscriptions().tell(Subscribe.create(
                    ctx.messageAdapter(ClusterEvent.ReachabilityEvent.class, Reachability::new), ClusterEvent.ReachabilityEvent.class));
            cluster.subscriptions().tell(Subscribe.create(
                    ctx.messageAdapter(ClusterEvent.MemberRemoved.class, MemberGone::new), ClusterEvent.MemberRemoved.class));
            maybeStartCoordinator();
        }
    }

    @Override
    public Receive<Command> createReceive() {
        return newReceiveBuilder()
                .onMessage(GetCoordinator.class, this::onGetCoordinator)
                .onMessage(GetRank.class, m -> {
                    m.replyTo().tell(ranks[m.rank()]);
                    return this;
                })
                .onMessage(Listed.class, this::onListed)
                .onMessage(Reachability.class, this::onReachability)
                .onMessage(MemberGone.class, this::onMemberGone)
                .onMessage(Probe.class, this::onProbe)
                .onMessage(Probed.class, this::onProbed)
                .onMessage(DeclaredDead.class, m -> lost(m.rank(), m.member(), m.what()))
                .onMessage(RankStopped.class, this::onRankStopped)
                .onMessage(EndJob.class, this::onEndJob)
                .onMessage(EndAll.class, m -> {
                    ending = true;
                    for (ActorRef<Command> h : hosts.values()) h.tell(new EndJob(m.reason(), m.failed(), m.preempted()));
                    m.replyTo().tell(Boolean.TRUE);
                    return this;
                })
                .onMessage(Preempt.class, this::onPreempt)
                .onMessage(GetMissing.class, m -> {
                    List<Integer> missing = new ArrayList<>();
                    for (int r = 0; r < ranks.length; r++) if (ranks[r] == null || lost.contains(r)) missing.add(r);
                    m.replyTo().tell(missing);
                    return this;
                })
                .build();
    }

    private Behavior<Command> onGetCoordinator(GetCoordinator m) {
        if (coordinator != null) m.replyTo().tell(coordinator);
        else waiting.add(m);
        return this;
    }

    private Behavior<Command> onListed(Listed m) {
        String id = m.listing().getKey().id();
        int rank = Integer.parseInt(id.substring(id.lastIndexOf('-') + 1));
        if (id.startsWith("ttpipe-host-")) {
            Set<ActorRef<Command>> refs = m.listing().getServiceInstances(hostKey(rank));
            refs.stream().filter(r -> !r.equals(hosts.get(rank))).findFirst().ifPresent(r -> hosts.put(rank, r));
            if (unsent != null && hosts.containsKey(0)) onPreempt(unsent);
            return this;
        }
        Set<ActorRef<StageActor.Command>> refs = m.listing().getServiceInstances(stageKey(rank));
        ActorRef<StageActor.Command> fresh = refs.stream().filter(r -> !r.equals(ranks[rank])).findFirst().orElse(null);
        if (fresh == null) return this;
        if (ranks[rank] == null) {
            ranks[rank] = fresh;
            getContext().getLog().info("rank {} joined ({})", rank, deployment.rank(rank).controlAddress());
            maybeStartCoordinator();
        } else if (!refs.contains(ranks[rank]) || refs.size() > 1) {
            // The rank's process was restarted: a new actor registered under its key.
            Silence old = silent.remove(rank);
            if (old != null) lost(rank, old.member, "became unreachable (its process died: a new one joined in its place)");
            ranks[rank] = fresh;
            lost.remove(rank);
            getContext().getLog().info("rank {} rejoined ({})", rank, deployment.rank(rank).controlAddress());
            if (coordinator != null) coordinator.tell(new Coordinator.RankReplaced(rank, fresh));
        }
        return this;
    }

    private void maybeStartCoordinator() {
        if (!hostsCoordinator || coordinator != null) return;
        for (ActorRef<StageActor.Command> r : ranks) if (r == null) return;
        startCoordinator();
    }

    private void startCoordinator() {
        coordinator = getContext().spawn(Coordinator.create(plan, List.of(ranks), faults), "coordinator");
        waiting.forEach(w -> w.replyTo().tell(coordinator));
        waiting.clear();
    }

    private Behavior<Command> onReachability(Reachability m) {
        if (m.event() instanceof ClusterEvent.UnreachableMember u) return onSilent(u.member());
        if (m.event() instanceof ClusterEvent.ReachableMember r) return onAnswers(r.member());
        return this;
    }

    /** Whether this host acts on the silence of rank {@code rank}: rank 0's watches every rank, the others rank 0. */
    private boolean watches(int rank) {
        return rank >= 0 && !local.containsKey(rank) && (hostsCoordinator || rank == 0);
    }

    private String who(int rank) {
        return "rank " + rank + " (" + deployment.rank(rank).controlAddress() + ")";
    }

    private long graceSeconds() {
        return deployment.livenessGrace().toSeconds();
    }

    /** The failure detector gave up on {@code member}: wait for it, up to the grace, probing its control port. */
    private Behavior<Command> onSilent(Member member) {
        int rank = rankAt(member.address());
        if (!watches(rank) || ending || lost.contains(rank) || silent.containsKey(rank)) return this;
        long now = System.nanoTime();
        long paused = ProcessPauses.recentPauseNs(TimeUnit.SECONDS.toNanos(5) + ClusterSettings.HEARTBEAT_PAUSE.toNanos());
        silent.put(rank, new Silence(member, now, paused));
        liveness.notices().accept(who(rank) + (paused > 0
                ? String.format(Locale.ROOT, " went unheard while this process itself was paused for %.1f s (a long GC"
                        + " pause, SIGSTOP, a swapped host)", paused / 1e9)
                : " has not answered for " + ClusterSettings.HEARTBEAT_PAUSE.toSeconds() + " s")
                + "; waiting up to " + graceSeconds() + " s more (multihost_config.liveness_grace_s) before declaring it dead");
        probe(rank, now);
        return this;
    }

    private Behavior<Command> onAnswers(Member member) {
        int rank = rankAt(member.address());
        Silence s = silent.get(rank);
        if (s == null || !s.member.uniqueAddress().equals(member.uniqueAddress())) return this;
        silent.remove(rank);
        if (!ending) {
            liveness.notices().accept(String.format(Locale.ROOT, "%s answers again after %.1f s; the job goes on", who(rank),
                    (System.nanoTime() - s.sinceNs) / 1e9));
        }
        return this;
    }

    /** Connects to the rank's control port off the actor's thread: a process that is paused still accepts (its kernel does). */
    private void probe(int rank, long sinceNs) {
        Deployment.Binding b = deployment.rank(rank);
        Executor blocking = getContext().getSystem().dispatchers().lookup(DispatcherSelector.blocking());
        getContext().pipeToSelf(CompletableFuture.supplyAsync(() -> refused(b.host(), b.controlPort()), blocking),
                (refused, e) -> new Probed(rank, sinceNs, Boolean.TRUE.equals(refused)));
    }

    /** Whether a TCP connection to host:port is refused: nothing listens there. A timeout (a partition) is not a refusal. */
    private static boolean refused(String host, int port) {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), PROBE_TIMEOUT_MS);
            return false;
        } catch (ConnectException e) {
            return true;
        } catch (IOException | RuntimeException e) {
            return false;
        }
    }

    private Behavior<Command> onProbe(Probe m) {
        Silence s = silent.get(m.rank());
        if (s != null && s.sinceNs == m.sinceNs()) probe(m.rank(), m.sinceNs());
        return this;
    }

    private Behavior<Command> onProbed(Probed m) {
        Silence s = silent.get(m.rank());
        if (s == null || s.sinceNs != m.sinceNs() || ending) return this;    // it answered meanwhile
        if (m.refused()) {
            silent.remove(m.rank());
            return lost(m.rank(), s.member, "became unreachable (its process died: nothing listens on its control port)");
        }
        long now = System.nanoTime();
        long silentNs = now - s.sinceNs;
        if (silentNs >= deployment.livenessGrace().toNanos()) {
            silent.remove(m.rank());
            return declareDead(m.rank(), s);
        }
        if (now - s.noticedNs >= NOTICE_EVERY_NS) {
            s.noticedNs = now;
            liveness.notices().accept(String.format(Locale.ROOT, "%s still does not answer: %.0f s of its %d s grace gone",
                    who(m.rank()), silentNs / 1e9, graceSeconds()));
        }
        getContext().scheduleOnce(PROBE_EVERY, getContext().getSelf(), new Probe(m.rank(), m.sinceNs()));
        return this;
    }

    /**
     * The grace ran out: rank 0 downs the rank (its process, should it wake, is out of the job and ends itself;
     * only a new process of it can join), and under launch its process is killed so that the launcher starts it again.
     */
    private Behavior<Command> declareDead(int rank, Silence silence) {
        Member member = silence.member;
        // A worker paused for longer than the grace itself is the one rank 0 has declared dead by now (and no longer hears).
        boolean pausedHere = silence.pausedHereNs > deployment.livenessGrace().toNanos();
        String what = pausedHere
                ? String.format(Locale.ROOT, "did not answer after this process itself was paused for %.1f s, longer than"
                        + " multihost_config.liveness_grace_s (%d s): %s", silence.pausedHereNs / 1e9, graceSeconds(),
                        hostsCoordinator ? "it has given up on rank 0 by now" : "rank 0 has declared this worker dead")
                : "became unreachable and did not answer within multihost_config.liveness_grace_s (" + graceSeconds()
                        + " s): declared dead";
        gone.add(member.uniqueAddress());           // its removal, which the down brings, is no news
        if (hostsCoordinator && !pausedHere) Cluster.get(getContext().getSystem()).manager().tell(new Down(member.address()));
        long pid = ClusterSettings.pidOf(member);
        ProcessHandle sibling = !liveness.killDeclaredDead() || pausedHere || pid <= 0 ? null : ProcessHandle.of(pid)
                .filter(p -> p.parent().map(ProcessHandle::pid).equals(ProcessHandle.current().parent().map(ProcessHandle::pid)))
                .orElse(null);
        if (sibling == null) {
            liveness.notices().accept(who(rank) + " " + what);
            return lost(rank, member, what);
        }
        liveness.notices().accept(who(rank) + " " + what + "; killing its process " + pid + " so that ttpipe launch starts it again");
        sibling.destroyForcibly();
        getContext().pipeToSelf(sibling.onExit().orTimeout(10, TimeUnit.SECONDS), (p, e) -> new DeclaredDead(rank, member,
                what + (e == null ? "; its process " + pid + " was killed so that ttpipe launch starts it again"
                        : "; its process " + pid + " did not end within 10 s of SIGKILL")));
        return this;
    }

    private Behavior<Command> onMemberGone(MemberGone m) {
        Member member = m.event().member();
        if (gone.contains(member.uniqueAddress())) return this;                       // lost already
        if (member.uniqueAddress().equals(Cluster.get(getContext().getSystem()).selfMember().uniqueAddress())) {
            return end(REMOVED_HERE);
        }
        int rank = rankAt(member.address());
        Silence s = silent.get(rank);
        if (s != null && s.member.uniqueAddress().equals(member.uniqueAddress())) {
            silent.remove(rank);
            return lost(rank, member, "became unreachable (its process died: a new one took its place in the cluster)");
        }
        return lost(rank, member, "left the cluster");
    }

    /** Rank {@code rank}'s process ({@code member}, null: not known) is lost: the running step fails, naming it. */
    private Behavior<Command> lost(int rank, Member member, String what) {
        if (rank < 0 || ending) return this;
        if (member != null) gone.add(member.uniqueAddress());
        String msg = who(rank) + " " + what;
        if (failure == null) failure = msg;
        lost.add(rank);
        if (coordinator != null) coordinator.tell(new Coordinator.RankFailed(rank, msg));
        if (!hostsCoordinator && rank == 0) {
            return end(msg);
        }
        return this;
    }

    private int rankAt(Address address) {
        if (deployment == null || address.host().isEmpty() || address.port().isEmpty()) return -1;
        int port = (Integer) address.port().get();
        String host = address.host().get();
        for (Deployment.Binding b : deployment.bindings()) {
            if (b.controlPort() == port && (b.host().equals(host) || sameHost(b.host(), host))) return b.rank();
        }
        return -1;
    }

    private static boolean sameHost(String a, String b) {
        try {
            return InetAddress.getByName(a).equals(InetAddress.getByName(b));
        } catch (UnknownHostException e) {
            return false;
        }
    }

    private Behavior<Command> onRankStopped(RankStopped m) {
        if (coordinator != null) {
            coordinator.tell(new Coordinator.RankFailed(m.rank(), "rank " + m.rank() + " stopped unexpectedly"));
        }
        if (deployment != null && !hostsCoordinator) return end("rank " + m.rank() + " stopped");
        return this;
    }

    /** On rank 0's host: the training loop hears it; on another worker's: passed on to rank 0's host. */
    private Behavior<Command> onPreempt(Preempt m) {
        if (hostsCoordinator) {
            onPreempt.accept(m);
            return this;
        }
        ActorRef<Command> seed = hosts.get(0);
        unsent = seed == null ? m : null;
        if (seed != null) seed.tell(m);
        return this;
    }

    private Behavior<Command> onEndJob(EndJob m) {
        ending = true;
        if (m.preempted() != null) onPreempt.accept(m.preempted());
        return end(m.failed() ? m.reason() : null);
    }

    private Behavior<Command> end(String reason) {
        if (ended != null) ended.complete(reason);
        return Behaviors.stopped();
    }
}

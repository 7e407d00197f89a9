package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.cluster.ClusterMessage;
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
import org.apache.pekko.cluster.ClusterEvent;
import org.apache.pekko.cluster.typed.Cluster;
import org.apache.pekko.cluster.typed.Subscribe;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;

/**
 * The root actor of a host process: spawns a {@link StageActor} for every rank bound to this host
 * (each with its submesh) and, on the host that runs it (rank 0's, or the only one), the job's
 * {@link Coordinator}. In a multi-process job it registers its ranks with the Receptionist, finds
 * the others there, and watches cluster reachability: a worker that stops answering fails the
 * running step with its rank and host named, and a worker that loses rank 0 ends itself.
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

    static ServiceKey<StageActor.Command> stageKey(int rank) {
        return ServiceKey.create(StageActor.Command.class, "ttpipe-rank-" + rank);
    }

    static ServiceKey<Command> hostKey(int rank) {
        return ServiceKey.create(Command.class, "ttpipe-host-" + rank);
    }

    /** Every rank in this JVM, the Coordinator here too. */
    public static Behavior<Command> create(JobPlan plan, Map<Integer, Submesh> submeshes, Transport transport, Faults faults) {
        return Behaviors.setup(ctx -> new HostGuardian(ctx, plan, submeshes, transport, null, true, null, faults, p -> { }));
    }

    /**
     * One worker of a multi-process job: the ranks in {@code submeshes} live here; the Coordinator
     * too when {@code hostsCoordinator}. {@code ended} completes with null when rank 0 ends the job
     * normally, or with the reason it ended otherwise. {@code onPreempt} hears, on rank 0, a worker's
     * {@link Preempt}; on the other workers, that rank 0 ended the job for one (before {@code ended} completes).
     */
    public static Behavior<Command> createWorker(JobPlan plan, Map<Integer, Submesh> submeshes, Transport transport,
                                                 Deployment deployment, boolean hostsCoordinator,
                                                 CompletableFuture<String> ended, Consumer<Preempt> onPreempt) {
        return Behaviors.setup(ctx -> new HostGuardian(ctx, plan, submeshes, transport, deployment, hostsCoordinator, ended,
                Faults.NONE, onPreempt));
    }

    /**
     * {@link #createWorker}, whose transport and deployment come later, in {@link Begin}: a worker whose peers'
     * endpoints are not known until rank 0 sends them ({@link Rendezvous}). Messages before it are stashed.
     */
    public static Behavior<Command> createDeferredWorker(JobPlan plan, Map<Integer, Submesh> submeshes, boolean hostsCoordinator,
                                                         CompletableFuture<String> ended, Consumer<Preempt> onPreempt) {
        return Behaviors.withStash(1_000, stash -> Behaviors.receive(Command.class)
                .onMessage(Begin.class, b -> stash.unstashAll(
                        createWorker(plan, submeshes, b.transport(), b.deployment(), hostsCoordinator, ended, onPreempt)))
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
    private String failure;
    private boolean ending;
    private final Consumer<Preempt> onPreempt;
    /** A worker's preemption that waits for rank 0's host to be listed. */
    private Preempt unsent;

    @SuppressWarnings("unchecked")
    private HostGuardian(ActorContext<Command> ctx, JobPlan plan, Map<Integer, Submesh> submeshes, Transport transport,
                         Deployment deployment, boolean hostsCoordinator, CompletableFuture<String> ended, Faults faults,
                         Consumer<Preempt> onPreempt) {
        super(ctx);
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
                .onMessage(MemberGone.class, m -> onLost(m.event().member().address(), "left the cluster"))
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
        if (m.event() instanceof ClusterEvent.UnreachableMember u) {
            return onLost(u.member().address(), "became unreachable (its process died or the network failed)");
        }
        return this;
    }

    private Behavior<Command> onLost(Address address, String what) {
        int rank = rankAt(address);
        if (rank < 0 || ending) return this;
        String msg = "rank " + rank + " (" + deployment.rank(rank).controlAddress() + ") " + what;
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

package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.cluster.ClusterMessage;
import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.config.ConfigException;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.Props;
import org.apache.pekko.actor.typed.javadsl.AbstractBehavior;
import org.apache.pekko.actor.typed.javadsl.ActorContext;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.javadsl.Receive;
import org.apache.pekko.actor.typed.javadsl.TimerScheduler;
import org.apache.pekko.actor.typed.receptionist.Receptionist;
import org.apache.pekko.actor.typed.receptionist.ServiceKey;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * How the ranks of a job learn each other's endpoints where the launcher names only rank 0's host
 * (torchrun's MASTER_ADDR): every other rank joins the Pekko Cluster through rank 0 (the seed) and
 * announces its own control and data endpoint ({@link Announce}) to rank 0's Rendezvous, again every
 * second until answered; rank 0, once it has every rank's, sends each the whole {@link Table}. Only then
 * does a rank start its transport (it needs every peer's data endpoint) and its {@link HostGuardian}.
 *
 * <p>Rank 0's Rendezvous lives as long as the job: a restarted rank announces again and gets the table
 * when it came back at the endpoint it announced first; at another endpoint it is refused ({@link Refused},
 * one line naming both), as its peers' transports send to the endpoint they started with.
 */
public final class Rendezvous extends AbstractBehavior<Rendezvous.Command> {
    /** How often a rank announces itself until rank 0 answers. */
    static final Duration RESEND = Duration.ofSeconds(1);

    public sealed interface Command {
    }

    /** Where one rank listens: its host, Pekko Artery (control) port and Aeron (data) port. */
    public record Endpoint(int rank, String host, int controlPort, int dataPort) {
        public String controlAddress() {
            return host + ":" + controlPort;
        }

        public String dataAddress() {
            return host + ":" + dataPort;
        }

        String describe() {
            return "control " + controlAddress() + ", data " + dataAddress();
        }
    }

    /** A rank's own endpoint, sent to rank 0's Rendezvous; the answer (a {@link Table} or a {@link Refused}) goes to {@code replyTo}. */
    public record Announce(Endpoint endpoint, ActorRef<Command> replyTo) implements Command, ClusterMessage {
    }

    /** Every rank's endpoint, by rank. */
    public record Table(List<Endpoint> endpoints) implements Command, ClusterMessage {
        public Table {
            endpoints = List.copyOf(endpoints);
        }

        /** {@code d} with every rank where this table puts it. */
        public Deployment applyTo(Deployment d) {
            for (Endpoint e : endpoints) d = d.withEndpoint(e.rank(), e.host(), e.controlPort(), e.dataPort());
            return d;
        }
    }

    /** Rank 0 will not take an announced endpoint: why, in one line. */
    public record Refused(String reason) implements Command, ClusterMessage {
    }

    private record Listed(Receptionist.Listing listing) implements Command {
    }

    private record Resend() implements Command {
    }

    private record Expired() implements Command {
    }

    static final ServiceKey<Command> KEY = ServiceKey.create(Command.class, "ttpipe-rendezvous");

    /**
     * Rank 0's table while it fills: every rank's endpoint once announced (rank 0's own from the start).
     * Pure, so that its rules are tested without actors; not thread-safe (one actor owns it).
     */
    static final class Gathering {
        private final Endpoint[] byRank;
        private boolean sent;

        Gathering(Endpoint own, int ranks) {
            byRank = new Endpoint[ranks];
            byRank[own.rank()] = own;
        }

        /** Takes {@code e}, or answers why not in one line: another rank's port, or a restarted rank at a new endpoint. */
        String offer(Endpoint e) {
            int r = e.rank();
            if (r <= 0 || r >= byRank.length) {
                return "rank " + r + " announced " + e.describe() + ", expected a rank in 1.." + (byRank.length - 1);
            }
            Endpoint had = byRank[r];
            if (sent && had != null && !had.equals(e)) {
                return "rank " + r + " came back at " + e.describe() + ", but its peers send to " + had.describe()
                        + ", the endpoint it announced first; expected it there again (TTPIPE_HOST, TTPIPE_CONTROL_PORT,"
                        + " TTPIPE_DATA_PORT set it)";
            }
            for (Endpoint o : byRank) {
                if (o == null || o.rank() == r || !o.host().equals(e.host())) continue;
                for (int port : new int[]{e.controlPort(), e.dataPort()}) {
                    if (port == o.controlPort() || port == o.dataPort()) {
                        return "rank " + r + " announced " + e.host() + ":" + port + ", which rank " + o.rank()
                                + " uses, expected every rank's control and data ports distinct on a host"
                                + " (TTPIPE_CONTROL_PORT, TTPIPE_DATA_PORT)";
                    }
                }
            }
            byRank[r] = e;
            return null;
        }

        /** The ranks that have not announced yet. */
        List<Integer> missing() {
            List<Integer> out = new ArrayList<>();
            for (int r = 0; r < byRank.length; r++) if (byRank[r] == null) out.add(r);
            return out;
        }

        /** The whole table, once every rank announced (and from then on); else null. */
        Table table() {
            if (!missing().isEmpty()) return null;
            sent = true;
            return new Table(List.of(byRank));
        }
    }

    /**
     * Bring-up of rank {@code rank} of {@code d} in {@code system} (joined to the cluster already, rank 0 being its
     * seed): announces this rank's endpoint (rank 0: gathers every rank's) and waits up to {@code timeout} for the
     * whole table; returns {@code d} with every rank's endpoint.
     *
     * @param source the launcher that named rank 0's host, for messages (torchrun (RANK=0, ...))
     * @throws PipelineFailure naming the ranks not heard from, and what was waited for
     * @throws ConfigException when rank 0 refuses this rank's endpoint
     */
    public static Deployment exchange(ActorSystem<?> system, Deployment d, int rank, Duration timeout, String source) {
        Deployment.Binding me = d.rank(rank);
        Endpoint own = new Endpoint(rank, me.host(), me.controlPort(), me.dataPort());
        CompletableFuture<Table> table = new CompletableFuture<>();
        String seed = d.seed().controlAddress();
        Behavior<Command> behavior = rank == 0 ? gather(own, d.ranks(), timeout, source, table)
                : announce(own, seed, timeout, table);
        system.systemActorOf(behavior, "rendezvous", Props.empty());
        try {
            return table.get(timeout.toMillis() + 5_000, TimeUnit.MILLISECONDS).applyTo(d);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof RuntimeException re) throw re;
            throw new PipelineFailure(String.valueOf(e.getCause()), e.getCause());
        } catch (TimeoutException e) {
            throw new PipelineFailure("rank " + rank + ": no endpoint table within " + timeout.toSeconds() + " s");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new PipelineFailure("interrupted while waiting for every rank's endpoint");
        }
    }

    /** Rank 0: registers with the Receptionist and gathers every rank's endpoint into {@code table}. */
    static Behavior<Command> gather(Endpoint own, int ranks, Duration timeout, String source, CompletableFuture<Table> table) {
        return Behaviors.setup(ctx -> Behaviors.withTimers(timers -> {
            ctx.getSystem().receptionist().tell(Receptionist.register(KEY, ctx.getSelf()));
            timers.startSingleTimer(new Expired(), timeout);
            return new Rendezvous(ctx, timers, own, null, new Gathering(own, ranks), timeout, source, table);
        }));
    }

    /** Another rank: finds rank 0's Rendezvous, announces {@code own} every second until it answers into {@code table}. */
    static Behavior<Command> announce(Endpoint own, String seed, Duration timeout, CompletableFuture<Table> table) {
        return Behaviors.setup(ctx -> Behaviors.withTimers(timers -> {
            ctx.getSystem().receptionist().tell(Receptionist.subscribe(KEY,
                    ctx.messageAdapter(Receptionist.Listing.class, Listed::new)));
            timers.startTimerWithFixedDelay(new Resend(), RESEND);
            timers.startSingleTimer(new Expired(), timeout);
            return new Rendezvous(ctx, timers, own, seed, null, timeout, null, table);
        }));
    }

    private final TimerScheduler<Command> timers;
    private final Endpoint own;
    private final String seed;
    private final Gathering gathering;
    private final Duration timeout;
    private final String source;
    private final CompletableFuture<Table> table;
    /** Rank 0: where each rank wants its answer. */
    private final Map<Integer, ActorRef<Command>> announcers = new HashMap<>();
    /** Another rank: rank 0's Rendezvous, once listed. */
    private ActorRef<Command> rank0;

    private Rendezvous(ActorContext<Command> ctx, TimerScheduler<Command> timers, Endpoint own, String seed, Gathering gathering,
                       Duration timeout, String source, CompletableFuture<Table> table) {
        super(ctx);
        this.timers = timers;
        this.own = own;
        this.seed = seed;
        this.gathering = gathering;
        this.timeout = timeout;
        this.source = source;
        this.table = table;
    }

    @Override
    public Receive<Command> createReceive() {
        return newReceiveBuilder()
                .onMessage(Announce.class, this::onAnnounce)
                .onMessage(Listed.class, this::onListed)
                .onMessage(Resend.class, m -> announceNow())
                .onMessage(Table.class, this::onTable)
                .onMessage(Refused.class, this::onRefused)
                .onMessage(Expired.class, m -> onExpired())
                .build();
    }

    /** Rank 0: takes a rank's endpoint; sends the table to every rank once it is whole, and to a late one at once. */
    private Behavior<Command> onAnnounce(Announce m) {
        if (gathering == null) return this;
        boolean whole = table.isDone();
        String refused = gathering.offer(m.endpoint());
        if (refused != null) {
            m.replyTo().tell(new Refused(refused));
            if (!whole) table.completeExceptionally(new ConfigException(refused));
            return this;
        }
        announcers.put(m.endpoint().rank(), m.replyTo());
        if (whole) {
            getContext().getLog().info("rank {} announced {} again", m.endpoint().rank(), m.endpoint().describe());
            m.replyTo().tell(gathering.table());
            return this;
        }
        Table t = gathering.table();
        if (t != null) {
            timers.cancelAll();
            announcers.values().forEach(a -> a.tell(t));
            table.complete(t);
        }
        return this;
    }

    private Behavior<Command> onListed(Listed m) {
        m.listing().getServiceInstances(KEY).stream().findFirst().ifPresent(r -> rank0 = r);
        return announceNow();
    }

    private Behavior<Command> announceNow() {
        if (rank0 != null && !table.isDone()) rank0.tell(new Announce(own, getContext().getSelf()));
        return this;
    }

    private Behavior<Command> onTable(Table m) {
        table.complete(m);
        return Behaviors.stopped();
    }

    private Behavior<Command> onRefused(Refused m) {
        table.completeExceptionally(new ConfigException(m.reason()));
        return Behaviors.stopped();
    }

    private Behavior<Command> onExpired() {
        if (table.isDone()) return this;
        if (gathering == null) {
            table.completeExceptionally(new PipelineFailure("rank " + own.rank() + ": rank 0 at " + seed + " sent no table of the"
                    + " ranks' endpoints within " + timeout.toSeconds() + " s" + (rank0 == null ? " (its rendezvous was never"
                    + " listed)" : " (it waits for every rank to announce)") + ", expected every rank's worker started and"
                    + " reaching rank 0"));
            return Behaviors.stopped();
        }
        List<Integer> missing = gathering.missing();
        String ranks = missing.size() == 1 ? "rank " + missing.get(0) : "ranks " + join(missing);
        table.completeExceptionally(new PipelineFailure(ranks + " did not announce " + (missing.size() == 1 ? "its" : "their")
                + " endpoint through rank 0 within " + timeout.toSeconds() + " s: " + source + " names only rank 0's host,"
                + " so each other rank joins rank 0 at " + own.controlAddress() + " and announces its own; expected `ttpipe"
                + " worker CONFIG` running as " + ranks + ", started by the same launcher and reaching " + own.controlAddress()));
        return this;
    }

    private static String join(List<Integer> ranks) {
        StringBuilder sb = new StringBuilder();
        for (int r : ranks) sb.append(sb.length() == 0 ? "" : ", ").append(r);
        return sb.toString();
    }
}

package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.cluster.ClusterSettings;
import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.HostGuardian;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.transport.AeronTransport;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;

/**
 * One process of a multi-host job ({@code ttpipe worker --rank R}): rank R's submesh and stages, an
 * Aeron UDP transport to the other ranks, and a Pekko Cluster node (rank 0 is the seed and runs the
 * Coordinator and the training loop of its {@link TrainingJob}).
 */
public final class Worker {
    private final TrainingJob job;
    private final int rank;
    private final Deployment deployment;
    /** The ranks whose endpoints come through rank 0 (empty: every rank's host is known). */
    private final List<Integer> announcing;
    /** What named rank 0's host, for messages. */
    private final String source;

    /** Rank {@code rank} where the config's rank_bindings put the ranks. */
    public Worker(TrainingJob job, int rank) {
        this(job, rank, Deployment.Placement.NONE);
    }

    /** Rank {@code rank} where the config and the launcher's {@code placement} put the ranks, with no variables for its own endpoint. */
    public Worker(TrainingJob job, int rank, Deployment.Placement placement) {
        this(job, rank, placement, -1, Map.of());
    }

    /**
     * Rank {@code rank}, the ranks where the config and the launcher's {@code placement} put them (see {@link Deployment}).
     *
     * Where only rank 0's host is known, the other ranks announce their endpoints through it ({@link OwnEndpoint}
     * chooses this rank's, from {@code env} and {@code localRank}, the launcher's local rank or -1).
     *
     * @throws ConfigException when the config's ranks do not run in separate processes (socket_type is not aeron), or
     *                         rank 0 has no host
     */
    public Worker(TrainingJob job, int rank, Deployment.Placement placement, int localRank, Map<String, String> env) {
        TtpipeConfig cfg = job.config();
        if (cfg.multihost.socketType != SocketType.AERON) {
            throw new ConfigException(cfg.origins.where("multihost_config.socket_type") + ": '" + cfg.multihost.socketType
                    + "' given, expected aeron for a job whose ranks run in separate processes");
        }
        this.job = job;
        this.rank = rank;
        Deployment d = Deployment.of(cfg, placement);
        this.announcing = d.announcing();
        this.source = placement.source() == null ? "rank_bindings" : placement.source();
        OwnEndpoint own = OwnEndpoint.resolve(env, cfg, d, rank, localRank, source);
        this.deployment = d.withEndpoint(rank, own.host(), own.controlPort(), own.dataPort());
    }

    /** The ranks whose endpoints come through rank 0: their hosts are in neither rank_bindings nor the launcher's variables. */
    public List<Integer> announcing() {
        return announcing;
    }

    public Deployment deployment() {
        return deployment;
    }

    /** One line: where this rank listens and whom it joins. */
    public String describe() {
        return describe(deployment, rank) + (announcing.contains(rank) ? ", announced through rank 0" : "")
                + (rank == 0 ? " (seed, coordinator)" : ", seed " + deployment.seed().controlAddress())
                + (deployment.tls() == null ? "" : "; control over TLS (" + deployment.tls() + ")");
    }

    private String describe(Deployment d, int r) {
        Deployment.Binding b = d.rank(r);
        return "rank " + r + " of " + job.plan().ranks() + ": control " + b.controlAddress() + ", data " + b.dataAddress();
    }

    /**
     * Where the ranks found each other through rank 0: one line per other rank of {@code everyRank} (the running job's
     * {@link PipelineRuntime#deployment()}), saying which announced its endpoint; none when every host was known.
     */
    public List<String> describePeers(Deployment everyRank) {
        List<String> out = new ArrayList<>();
        if (announcing.isEmpty()) return out;
        for (int r = 0; r < everyRank.ranks(); r++) {
            if (r == rank) continue;
            out.add(describe(everyRank, r) + (announcing.contains(r) ? ", announced through rank 0"
                    : r == 0 ? " (seed, coordinator)" : ", from " + source));
        }
        return out;
    }

    /**
     * Starts the transport, the actors and the cluster node, and joins the job: rank 0 waits up to
     * {@code joinTimeout} for every rank; the others for the seed. Where some ranks announce their endpoints
     * through rank 0, the cluster node starts first, and the transport once every rank's endpoint is known
     * ({@link PipelineRuntime#startAnnouncing}); rank 0 waits up to {@code joinTimeout} for the announcements.
     */
    public PipelineRuntime start(Duration joinTimeout) {
        return start(joinTimeout, p -> { }, false);
    }

    /**
     * {@link #start(Duration)}, with {@code onPreempt} told of preemptions; {@code underLaunch}: every worker is a
     * child of one {@code ttpipe launch} on this machine (see {@link PipelineRuntime#startWorker}).
     */
    public PipelineRuntime start(Duration joinTimeout, Consumer<HostGuardian.Preempt> onPreempt, boolean underLaunch) {
        awaitResolvable(deployment.rank(rank).host(), joinTimeout);
        if (!announcing.isEmpty()) {
            return PipelineRuntime.startAnnouncing(job.plan(), deployment, rank,
                    everyRank -> AeronTransport.start(aeronConfig(job.plan(), everyRank, rank)), joinTimeout, onPreempt, source);
        }
        AeronTransport transport = AeronTransport.start(aeronConfig(job.plan(), deployment, rank));
        try {
            return PipelineRuntime.startWorker(job.plan(), deployment, rank, transport, joinTimeout, onPreempt, underLaunch);
        } catch (RuntimeException e) {
            transport.close();
            throw e;
        }
    }

    /**
     * Waits until this rank's own host resolves: a launcher's host name (a Kubernetes pod's DNS name) can
     * resolve only a moment after the process started.
     */
    private void awaitResolvable(String host, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (true) {
            try {
                InetAddress.getByName(host);
                return;
            } catch (UnknownHostException e) {
                if (System.nanoTime() > deadline) {
                    throw new ConfigException("rank_bindings: rank " + rank + "'s host '" + host + "' does not resolve after "
                            + timeout.toSeconds() + " s, expected a name this machine's resolver knows (a Kubernetes pod's"
                            + " name needs its headless Service, with publishNotReadyAddresses: true)");
                }
            }
            try {
                Thread.sleep(500);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted while waiting for " + host + " to resolve", e);
            }
        }
    }

    /**
     * The transport of one rank's process: UDP to every rank's data port. Frames carry the plan's job
     * id until rank 0's Coordinator tells every rank the job's own (see {@code StageActor.JoinJob}). A
     * send waits for a silent receiver, and Aeron keeps a silent peer's stream (or this process's own,
     * after a pause), for longer than the liveness grace: until then the job waits, not its transport.
     */
    static AeronTransport.Config aeronConfig(JobPlan plan, Deployment d, int rank) {
        Map<Integer, AeronTransport.Endpoint> endpoints = new LinkedHashMap<>();
        for (Deployment.Binding b : d.bindings()) endpoints.put(b.rank(), AeronTransport.Endpoint.udp(b.host(), b.dataPort()));
        Duration patience = d.livenessGrace().plus(ClusterSettings.HEARTBEAT_PAUSE).plusSeconds(10);
        AeronTransport.Config c = AeronTransport.Config.of(plan.jobId(), endpoints, Set.of(rank));
        return patience.compareTo(c.connectTimeout()) > 0 ? c.withConnectTimeout(patience) : c;
    }
}

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
import java.util.LinkedHashMap;
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

    /** Rank {@code rank} where the config's rank_bindings put the ranks. */
    public Worker(TrainingJob job, int rank) {
        this(job, rank, Deployment.Placement.NONE);
    }

    /**
     * Rank {@code rank}, the ranks where the config and the launcher's {@code placement} put them (see {@link Deployment}).
     *
     * @throws ConfigException when the config's ranks do not run in separate processes (socket_type is not aeron), or a
     *                         rank has no host
     */
    public Worker(TrainingJob job, int rank, Deployment.Placement placement) {
        TtpipeConfig cfg = job.config();
        if (cfg.multihost.socketType != SocketType.AERON) {
            throw new ConfigException(cfg.origins.where("multihost_config.socket_type") + ": '" + cfg.multihost.socketType
                    + "' given, expected aeron for a job whose ranks run in separate processes");
        }
        this.job = job;
        this.rank = rank;
        this.deployment = Deployment.of(cfg, placement);
    }

    public Deployment deployment() {
        return deployment;
    }

    /** One line: where this rank listens and whom it joins. */
    public String describe() {
        Deployment.Binding me = deployment.rank(rank);
        return "rank " + rank + " of " + job.plan().ranks() + ": control " + me.controlAddress() + ", data " + me.host() + ":"
                + me.dataPort() + (rank == 0 ? " (seed, coordinator)" : ", seed " + deployment.seed().controlAddress())
                + (deployment.tls() == null ? "" : "; control over TLS (" + deployment.tls() + ")");
    }

    /**
     * Starts the transport, the actors and the cluster node, and joins the job: rank 0 waits up to
     * {@code joinTimeout} for every rank; the others for the seed.
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

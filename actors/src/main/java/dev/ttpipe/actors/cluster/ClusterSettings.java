package dev.ttpipe.actors.cluster;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import dev.ttpipe.actors.config.ConfigException;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.cluster.Member;
import org.apache.pekko.cluster.MemberStatus;
import org.apache.pekko.cluster.typed.Cluster;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.function.BooleanSupplier;

/**
 * Pekko settings for one worker of a multi-process job: Cluster over Artery TCP (TLS with
 * {@code multihost_config.tls}, see {@link ControlPlaneTls}) bound to the rank's host and control port
 * (loopback unless rank_bindings say otherwise), rank 0 as the seed, a
 * failure detector that notices a silent worker within a few seconds (how long it is then waited for is
 * {@code HostGuardian}'s, {@link Deployment#livenessGrace()}; nothing downs a member by itself), the process id in
 * a role ({@link #pidOf}), and the Kryo serializer for the messages that cross processes.
 */
public final class ClusterSettings {
    private ClusterSettings() {
    }

    /** How long a worker misses heartbeats before the others see it unreachable (and start to wait out its grace). */
    public static final Duration HEARTBEAT_PAUSE = Duration.ofSeconds(3);

    public static Config config(Deployment d, int rank) {
        Deployment.Binding me = d.rank(rank);
        Deployment.Binding seed = d.seed();
        Config tls = d.tls() == null ? ConfigFactory.empty() : d.tls().pekkoConfig();
        return tls.withFallback(ConfigFactory.parseString(String.join("\n",
                "pekko.actor.provider = cluster",
                "pekko.loggers = [\"org.apache.pekko.event.slf4j.Slf4jLogger\"]",
                "pekko.logging-filter = \"org.apache.pekko.event.slf4j.Slf4jLoggingFilter\"",
                "pekko.loglevel = INFO",
                "pekko.log-dead-letters = off",
                "pekko.log-dead-letters-during-shutdown = off",
                "pekko.coordinated-shutdown.run-by-jvm-shutdown-hook = off",
                "pekko.coordinated-shutdown.exit-jvm = off",
                "pekko.remote.artery.transport = tcp",
                "pekko.remote.artery.canonical.hostname = \"" + me.host() + "\"",
                "pekko.remote.artery.canonical.port = " + me.controlPort(),
                "pekko.remote.artery.advanced.maximum-frame-size = 64MiB",
                "pekko.remote.artery.advanced.buffer-pool-size = 16",
                "pekko.remote.artery.advanced.maximum-large-frame-size = 64MiB",
                "pekko.cluster.seed-nodes = [\"pekko://ttpipe@" + seed.host() + ":" + seed.controlPort() + "\"]",
                "pekko.cluster.jmx.enabled = off",
                "pekko.cluster.roles = [\"" + PID_ROLE + ProcessHandle.current().pid() + "\"]",
                // Workers usually start together: retry the seed every second, not after Pekko's 5 s + 10 s defaults.
                "pekko.cluster.seed-node-timeout = 1s",
                "pekko.cluster.retry-unsuccessful-join-after = 1s",
                "pekko.cluster.log-info = off",
                "pekko.cluster.failure-detector.heartbeat-interval = 500ms",
                "pekko.cluster.failure-detector.acceptable-heartbeat-pause = " + HEARTBEAT_PAUSE.toMillis() + "ms",
                "pekko.cluster.failure-detector.expected-response-after = 500ms",
                "pekko.cluster.unreachable-nodes-reaper-interval = 500ms",
                "pekko.cluster.shutdown-after-unsuccessful-join-seed-nodes = off",
                "pekko.coordinated-shutdown.phases.cluster-leave.timeout = 2s",
                "pekko.coordinated-shutdown.phases.cluster-exiting.timeout = 2s",
                "pekko.coordinated-shutdown.phases.cluster-sharding-shutdown-region.timeout = 1s",
                "pekko.actor.serializers.ttpipe-kryo = \"dev.ttpipe.actors.cluster.KryoSerializer\"",
                "pekko.actor.serialization-bindings { \"dev.ttpipe.actors.cluster.ClusterMessage\" = ttpipe-kryo }",
                "ttpipe.kryo.classes = [" + String.join(", ", ClusterMessages.CLASSES.stream()
                        .map(c -> "\"" + c + "\"").toList()) + "]")))
                .withFallback(ConfigFactory.load());
    }

    /** The role that carries a worker's process id, so that a rank declared dead can be found on this machine. */
    static final String PID_ROLE = "ttpipe-pid-";

    /** The process id of the worker that {@code m} is, or -1 when its roles do not say. */
    public static long pidOf(Member m) {
        for (String role : m.getRoles()) {
            if (role.startsWith(PID_ROLE)) {
                try {
                    return Long.parseLong(role.substring(PID_ROLE.length()));
                } catch (NumberFormatException e) {
                    return -1;
                }
            }
        }
        return -1;
    }

    public static <T> ActorSystem<T> startSystem(Behavior<T> guardian, Deployment d, int rank) {
        Deployment.Binding me = d.rank(rank);
        checkPortFree(me, rank);
        return ActorSystem.create(guardian, "ttpipe", config(d, rank));
    }

    /** A port already bound fails here with one line, before Pekko would fail obscurely. */
    private static void checkPortFree(Deployment.Binding me, int rank) {
        try (ServerSocket s = new ServerSocket()) {
            s.setReuseAddress(true);
            s.bind(new InetSocketAddress(me.host(), me.controlPort()));
        } catch (IOException e) {
            throw new ConfigException("rank_bindings: rank " + rank + " control_port " + me.controlAddress()
                    + " cannot be bound (" + e.getMessage() + "), expected a free port on this host (another job or worker using it?)");
        }
    }

    /**
     * Waits until this node is Up in the cluster (it reached the seed), already leaving it after being Up,
     * or {@code jobEnded} says rank 0 ended the job with it (a short job can end between two looks);
     * else a one-line error naming the seed and, over TLS, why a handshake with it fails (which store to look at).
     */
    public static void awaitJoined(ActorSystem<?> system, Deployment d, Duration timeout, BooleanSupplier jobEnded) {
        Cluster cluster = Cluster.get(system);
        long deadline = System.nanoTime() + timeout.toNanos();
        while (System.nanoTime() < deadline) {
            // Up, or already on its way out after being up: a short job can end between two looks.
            MemberStatus s = cluster.selfMember().status();
            if (s == MemberStatus.up() || s == MemberStatus.leaving() || s == MemberStatus.exiting() || jobEnded.getAsBoolean()) {
                return;
            }
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
        String seed = "rank_bindings: the seed, rank 0 at " + d.seed().controlAddress() + ", did not answer within "
                + timeout.toSeconds() + " s";
        String tls = d.tls() == null ? null : d.tls().diagnose(d.seed().host(), d.seed().controlPort());
        if (tls != null) {
            throw new ConfigException(seed + ": the TLS handshake with it fails: " + tls + "; expected every rank's"
                    + " multihost_config.tls.trust_store to hold the others' certificates (or their CA)");
        }
        throw new ConfigException(seed + ", expected `ttpipe worker --rank 0` running there and reachable from this host"
                + (d.tls() == null ? "" : ", with the same multihost_config.tls"));
    }
}

package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.actors.config.TtpipeConfig;

import java.io.IOException;
import java.net.DatagramSocket;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.Map;

/**
 * Where a rank listens when its peers learn its endpoint through rank 0 (its host is in neither rank_bindings
 * nor the launcher's variables, see {@link Deployment#announcing()}), and the variables that set it:
 * <ul>
 *   <li>address: {@value #HOST_ENV} when set, else the local address this host sends from toward rank 0's
 *   host (a UDP socket connected there, which sends nothing: the interface the route to rank 0 takes),
 *   loopback when rank 0's host is a loopback address;</li>
 *   <li>ports: {@value #CONTROL_PORT_ENV} and {@value #DATA_PORT_ENV} when set, else its binding's, else
 *   {@code multihost_config.control_port} + its local rank and {@code data_port} + 2 x its local rank (the
 *   launcher's LOCAL_RANK and the like; 0 where it gives none), as a rank whose host is known gets them.</li>
 * </ul>
 * On a rank whose endpoint is known the variables may only repeat it.
 *
 * @param from how the address was chosen, for the log
 */
public record OwnEndpoint(String host, int controlPort, int dataPort, String from) {
    /** The address this rank's peers reach it at. */
    public static final String HOST_ENV = "TTPIPE_HOST";
    /** This rank's Pekko Artery (TCP) port. */
    public static final String CONTROL_PORT_ENV = "TTPIPE_CONTROL_PORT";
    /** This rank's Aeron (UDP) port. */
    public static final String DATA_PORT_ENV = "TTPIPE_DATA_PORT";

    /**
     * Rank {@code rank}'s endpoint in {@code d}: chosen as above when it is announcing, else its binding's (checked
     * against the variables).
     *
     * @param localRank the launcher's local rank, -1 where it gives none
     * @param source    what named rank 0's host, for messages
     */
    public static OwnEndpoint resolve(Map<String, String> env, TtpipeConfig cfg, Deployment d, int rank, int localRank,
                                      String source) {
        Deployment.Binding me = d.rank(rank);
        String host = env.containsKey(HOST_ENV) ? host(env) : null;
        int control = env.containsKey(CONTROL_PORT_ENV) ? port(env, CONTROL_PORT_ENV, 65535) : 0;
        int data = env.containsKey(DATA_PORT_ENV) ? port(env, DATA_PORT_ENV, 65534) : 0;
        if (me.host() != null) {
            requireSame(HOST_ENV, host, me.host(), rank, env);
            requireSame(CONTROL_PORT_ENV, control == 0 ? null : "" + control, "" + me.controlPort(), rank, env);
            requireSame(DATA_PORT_ENV, data == 0 ? null : "" + data, "" + me.dataPort(), rank, env);
            return new OwnEndpoint(me.host(), me.controlPort(), me.dataPort(), "known");
        }
        int index = Math.max(0, localRank);
        if (control == 0) control = me.controlPort() > 0 ? me.controlPort() : cfg.multihost.controlPort + index;
        if (data == 0) data = me.dataPort() > 0 ? me.dataPort() : cfg.multihost.dataPort + 2 * index;
        if (host != null) return new OwnEndpoint(host, control, data, HOST_ENV);
        String seed = d.seed().host();
        return new OwnEndpoint(toward(seed, d.seed().controlPort(), source), control, data, "the route to rank 0's host " + seed);
    }

    /**
     * The local address this host sends from toward {@code host}: a UDP socket connected there (which sends nothing)
     * takes the interface of the route to it; loopback when {@code host} is loopback.
     *
     * @throws ConfigException when {@code host} does not resolve or no route leads there
     */
    static String toward(String host, int port, String source) {
        if (Deployment.isLoopback(host)) return InetAddress.getLoopbackAddress().getHostAddress();
        InetAddress target;
        try {
            target = InetAddress.getByName(host);
        } catch (UnknownHostException e) {
            throw new ConfigException("rank_bindings: rank 0's host '" + host + "' (" + source + ") does not resolve, expected"
                    + " a name this machine's resolver knows, or " + HOST_ENV + " set to this rank's own address");
        }
        if (target.isLoopbackAddress()) return InetAddress.getLoopbackAddress().getHostAddress();
        try (DatagramSocket s = new DatagramSocket()) {
            s.connect(target, port);
            InetAddress local = s.getLocalAddress();
            if (local == null || local.isAnyLocalAddress()) throw new IOException("no local address for the route");
            return local.getHostAddress();
        } catch (IOException | RuntimeException e) {
            throw new ConfigException("rank_bindings: no route from this host to rank 0's host '" + host + "' (" + source + "): "
                    + e.getMessage() + ", expected a reachable host, or " + HOST_ENV + " set to this rank's own address");
        }
    }

    private static String host(Map<String, String> env) {
        String h = env.get(HOST_ENV).strip();
        if (h.isEmpty() || h.chars().anyMatch(Character::isWhitespace)) {
            throw new UserInputException(HOST_ENV + ": '" + env.get(HOST_ENV) + "' given, expected this rank's address"
                    + " (a host name or an IP address its peers reach it at)");
        }
        return h;
    }

    private static int port(Map<String, String> env, String name, int max) {
        String v = env.get(name).strip();
        int p = v.isEmpty() || v.length() > 5 || !v.chars().allMatch(Character::isDigit) ? -1 : Integer.parseInt(v);
        if (p < 1 || p > max) throw new UserInputException(name + ": '" + env.get(name) + "' given, expected a port 1.." + max);
        return p;
    }

    private static void requireSame(String name, String given, String known, int rank, Map<String, String> env) {
        if (given == null || given.equals(known)) return;
        throw new UserInputException(name + ": '" + env.get(name) + "' given, but rank " + rank + "'s endpoint is known ("
                + known + " from rank_bindings or the launcher), expected " + name + " only on a rank whose peers learn its"
                + " endpoint through rank 0");
    }
}

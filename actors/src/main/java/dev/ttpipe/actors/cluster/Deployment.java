package dev.ttpipe.actors.cluster;

import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.actors.config.TtpipeConfig;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

/**
 * Where each rank of a multi-process job runs: host, Pekko Artery (control) port and Aeron UDP
 * (data) port, from tt-run style {@code rank_bindings} and from the {@link Placement} of the launcher
 * that started the workers (SLURM's node list, Kubernetes' pod names), plus each rank's environment
 * (the job's {@code global_env} and {@code mesh_graph_desc_path}, then the rank's {@code env_overrides}
 * over them, as tt-run), the control plane's TLS (null: plain TCP), and how long a rank that stops
 * answering is waited for before it is declared dead ({@code multihost_config.liveness_grace_s}). Rank 0
 * is the cluster's seed and runs the Coordinator.
 *
 * <p>A rank's host is its binding's, unless that is a loopback address and the launcher names the
 * rank's host (a config written for one machine runs unchanged on an allocation); without either,
 * {@code multihost_config.bind_host}. A rank without ports in its binding takes
 * {@code multihost_config.control_port} (25520) + its index among the ranks on its host, and
 * {@code data_port} (40456) + 2 x that index: on one machine 25520 + rank, on one rank per host the
 * same two ports everywhere.
 *
 * <p>Where the launcher names only rank 0's host (torchrun's MASTER_ADDR, or rank_bindings that give
 * rank 0's alone), the ranks without a host (or with a loopback one, where rank 0's is named by the
 * launcher or is not loopback) are <em>announcing</em>: their bindings have a null host and
 * no ports until each picks its own endpoint ({@link #withEndpoint}) and tells rank 0, which sends every
 * rank the whole table ({@link Rendezvous}).
 */
public record Deployment(List<Binding> bindings, ControlPlaneTls tls, Duration livenessGrace) {

    public record Binding(int rank, String host, int controlPort, int dataPort, int meshId, int meshHostRank,
                          Map<String, String> env) {
        public String controlAddress() {
            return host + ":" + controlPort;
        }

        public String dataAddress() {
            return host + ":" + dataPort;
        }
    }

    /**
     * Where a launcher put the ranks: {@code hosts.get(r)} is rank r's host (in order; ranks past the
     * list are on hosts it does not name); {@code complete}: every rank it does not name runs on this
     * host (a one-node job), else those ranks need a host in rank_bindings. {@code source} names the
     * variables it came from, for messages.
     */
    public record Placement(String source, List<String> hosts, boolean complete) {
        /** No launcher: the config says where every rank runs. */
        public static final Placement NONE = new Placement(null, List.of(), true);

        public Placement {
            hosts = List.copyOf(hosts);
        }

        String host(int rank) {
            return rank < hosts.size() ? hosts.get(rank) : null;
        }
    }

    public static Deployment of(TtpipeConfig cfg) {
        return of(cfg, Placement.NONE);
    }

    /**
     * Where the config and {@code placement} put the ranks; a rank neither names is announcing (null host) when
     * rank 0's host is known.
     *
     * @throws ConfigException naming the ranks that have no host when rank 0's is not known either
     */
    public static Deployment of(TtpipeConfig cfg, Placement placement) {
        int ranks = cfg.pipeline().ranks();
        Map<Integer, TtpipeConfig.RankBinding> given = new TreeMap<>();
        for (TtpipeConfig.RankBinding b : cfg.rankBindings) given.put(b.rank, b);
        List<String> hosts = new ArrayList<>();
        List<Integer> unplaced = new ArrayList<>();
        TtpipeConfig.RankBinding b0 = given.get(0);
        boolean rank0Known = placement.host(0) != null || b0 != null && !isLoopback(b0.host);
        for (int r = 0; r < ranks; r++) {
            TtpipeConfig.RankBinding b = given.get(r);
            String launcher = placement.host(r);
            // a loopback binding means "this machine": on several nodes, where rank 0's host is known, the rank announces its own
            boolean announces = r > 0 && launcher == null && !placement.complete() && rank0Known && b != null && isLoopback(b.host);
            if (launcher != null && (b == null || isLoopback(b.host))) hosts.add(launcher);
            else if (b != null && b.host != null && !announces) hosts.add(b.host);
            else if (launcher == null && !placement.complete()) {
                unplaced.add(r);
                hosts.add(null);
            } else hosts.add(cfg.multihost.bindHost);
        }
        if (!unplaced.isEmpty() && unplaced.get(0) == 0) {
            throw new ConfigException(cfg.origins.where("rank_bindings") + ": no host for rank" + (unplaced.size() > 1 ? "s " : " ")
                    + ranges(unplaced) + ": " + placement.source() + " names no rank's host, expected rank_bindings with the host"
                    + " of rank 0 at least (the others announce theirs through it), or a launcher that names rank 0's host"
                    + " (torchrun's MASTER_ADDR) or every rank's (SLURM, Kubernetes)");
        }
        Map<String, Integer> onHost = new LinkedHashMap<>();
        List<Binding> out = new ArrayList<>();
        for (int r = 0; r < ranks; r++) {
            TtpipeConfig.RankBinding b = given.get(r);
            String host = hosts.get(r);
            int index = host == null ? 0 : onHost.merge(host, 1, Integer::sum) - 1;
            int control = b != null && b.controlPort > 0 ? b.controlPort : host == null ? 0 : cfg.multihost.controlPort + index;
            int data = b != null && b.dataPort > 0 ? b.dataPort : host == null ? 0 : cfg.multihost.dataPort + 2 * index;
            Map<String, String> env = new LinkedHashMap<>(cfg.environment());
            if (b != null) env.putAll(b.envOverrides);
            out.add(new Binding(r, host, control, data, b == null ? 0 : b.meshId, b == null ? r : b.meshHostRank, Map.copyOf(env)));
        }
        Deployment d = new Deployment(List.copyOf(out), ControlPlaneTls.of(cfg), Duration.ofSeconds(cfg.multihost.livenessGraceS));
        d.checkPortsDistinct(cfg);
        return d;
    }

    /** 127.x.x.x, ::1 or localhost: an address that means "this machine" on every machine. */
    public static boolean isLoopback(String host) {
        if (host == null) return true;
        String h = host.strip().toLowerCase(Locale.ROOT);
        return h.startsWith("127.") || h.equals("localhost") || h.equals("::1") || h.equals("[::1]");
    }

    /** [1, 2, 3, 5] as "1..3, 5". */
    private static String ranges(List<Integer> ranks) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < ranks.size(); ) {
            int j = i;
            while (j + 1 < ranks.size() && ranks.get(j + 1) == ranks.get(j) + 1) j++;
            sb.append(sb.length() == 0 ? "" : ", ").append(ranks.get(i)).append(j > i ? ".." + ranks.get(j) : "");
            i = j + 1;
        }
        return sb.toString();
    }

    public Binding rank(int r) {
        return bindings.get(r);
    }

    /** The ranks whose host neither the config nor the launcher gives: they announce their endpoints through rank 0. */
    public List<Integer> announcing() {
        List<Integer> out = new ArrayList<>();
        for (Binding b : bindings) if (b.host() == null) out.add(b.rank());
        return out;
    }

    /** This deployment with rank {@code rank} at {@code host}, {@code controlPort} and {@code dataPort} (its mesh ids and environment kept). */
    public Deployment withEndpoint(int rank, String host, int controlPort, int dataPort) {
        List<Binding> out = new ArrayList<>(bindings);
        Binding b = bindings.get(rank);
        out.set(rank, new Binding(rank, host, controlPort, dataPort, b.meshId(), b.meshHostRank(), b.env()));
        return new Deployment(List.copyOf(out), tls, livenessGrace);
    }

    public int ranks() {
        return bindings.size();
    }

    public Binding seed() {
        return bindings.get(0);
    }

    private void checkPortsDistinct(TtpipeConfig cfg) {
        Map<String, Integer> used = new TreeMap<>();
        List<String> problems = new ArrayList<>();
        for (Binding b : bindings) {
            if (b.host() == null) continue;                 // announcing: checked by rank 0 when it has every endpoint
            for (int port : new int[]{b.controlPort(), b.dataPort()}) {
                String key = b.host() + ":" + port;
                Integer other = used.put(key, b.rank());
                if (other != null) {
                    problems.add(cfg.origins.where("rank_bindings") + ": " + key + " is used by rank " + other + " and rank "
                            + b.rank() + ", expected every rank's control_port and data_port distinct on a host");
                }
            }
        }
        if (!problems.isEmpty()) throw new ConfigException(problems);
    }
}

package dev.ttpipe.actors.cluster;

import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.actors.config.TtpipeConfig;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Where each rank of a multi-process job runs: host, Pekko Artery (control) port and Aeron UDP
 * (data) port, from tt-run style {@code rank_bindings} (defaults: 127.0.0.1, 25520 + rank,
 * 40456 + 2 x rank), plus each rank's environment (the job's {@code global_env} and
 * {@code mesh_graph_desc_path}, then the rank's {@code env_overrides} over them, as tt-run), and the
 * control plane's TLS (null: plain TCP). Rank 0 is the cluster's seed and runs the Coordinator.
 */
public record Deployment(List<Binding> bindings, ControlPlaneTls tls) {

    public record Binding(int rank, String host, int controlPort, int dataPort, int meshId, int meshHostRank,
                          Map<String, String> env) {
        public String controlAddress() {
            return host + ":" + controlPort;
        }
    }

    public static final int BASE_CONTROL_PORT = 25520;
    public static final int BASE_DATA_PORT = 40456;

    public static Deployment of(TtpipeConfig cfg) {
        int ranks = cfg.pipeline().ranks();
        Map<Integer, TtpipeConfig.RankBinding> given = new TreeMap<>();
        for (TtpipeConfig.RankBinding b : cfg.rankBindings) given.put(b.rank, b);
        List<Binding> out = new ArrayList<>();
        for (int r = 0; r < ranks; r++) {
            TtpipeConfig.RankBinding b = given.get(r);
            String host = b != null && b.host != null ? b.host : cfg.multihost.bindHost;
            int control = b != null && b.controlPort > 0 ? b.controlPort : BASE_CONTROL_PORT + r;
            int data = b != null && b.dataPort > 0 ? b.dataPort : BASE_DATA_PORT + 2 * r;
            Map<String, String> env = new LinkedHashMap<>(cfg.environment());
            if (b != null) env.putAll(b.envOverrides);
            out.add(new Binding(r, host, control, data, b == null ? 0 : b.meshId, b == null ? r : b.meshHostRank, Map.copyOf(env)));
        }
        Deployment d = new Deployment(List.copyOf(out), ControlPlaneTls.of(cfg));
        d.checkPortsDistinct(cfg);
        return d;
    }

    public Binding rank(int r) {
        return bindings.get(r);
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

package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.cluster.Deployment;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Which launcher started a worker, read from its environment: the rank, the world size, the local
 * rank and where the ranks run ({@link Deployment.Placement}), so that {@code ttpipe worker CONFIG}
 * needs no {@code --rank}. A pure function of the environment; every bad value or disagreement is one
 * line naming the variable, the value and what was expected ({@link UserInputException}, exit code 2).
 *
 * <p>The launchers, innermost first (one started inside another's allocation describes this process;
 * the outer one describes the allocation or a per-node agent, and is not read):
 * <table>
 *   <tr><th>engine</th><th>rank</th><th>world size</th><th>local rank</th><th>hosts</th></tr>
 *   <tr><td>torchrun</td><td>RANK</td><td>WORLD_SIZE</td><td>LOCAL_RANK</td>
 *       <td>rank 0's: MASTER_ADDR (all on one node when LOCAL_WORLD_SIZE = WORLD_SIZE), the others announce theirs through
 *       it ({@link OwnEndpoint}); MASTER_PORT is torchrun's own store and not used</td></tr>
 *   <tr><td>Open MPI</td><td>OMPI_COMM_WORLD_RANK</td><td>OMPI_COMM_WORLD_SIZE</td><td>OMPI_COMM_WORLD_LOCAL_RANK</td>
 *       <td>none (all on one node when OMPI_COMM_WORLD_LOCAL_SIZE = OMPI_COMM_WORLD_SIZE)</td></tr>
 *   <tr><td>PMIx</td><td>PMIX_RANK</td><td>OMPI_COMM_WORLD_SIZE, SLURM_NTASKS, TTPIPE_WORLD_SIZE or the config</td>
 *       <td>OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID</td><td>SLURM's, under srun</td></tr>
 *   <tr><td>SLURM</td><td>SLURM_PROCID</td><td>SLURM_NTASKS</td><td>SLURM_LOCALID</td>
 *       <td>every rank's: SLURM_(STEP|JOB)_NODELIST with SLURM_(STEP_)TASKS_PER_NODE, block or cyclic
 *       (SLURM_DISTRIBUTION)</td></tr>
 *   <tr><td>Kubernetes Indexed Job</td><td>JOB_COMPLETION_INDEX</td><td>TTPIPE_WORLD_SIZE or the config</td><td>0</td>
 *       <td>every rank's: {@code <job>-<rank>.<service>}, the job from TTPIPE_K8S_JOB or HOSTNAME
 *       ({@code <job>-<index>}), the headless service from TTPIPE_K8S_SERVICE or JOBSET_NAME</td></tr>
 * </table>
 * Two launchers that set variables for the same process must agree: Open MPI's and PMIx's rank (mpirun
 * sets both), and PMIx's and SLURM's (srun --mpi=pmix sets both).
 *
 * @param engine        the launcher's name, as printed and recorded in run.json
 * @param worldSizeFrom the variable the world size was read from, or "the config"
 * @param localRank     the rank's index on its node (-1: the launcher gives none)
 * @param variables     the variables it was read from, the rank's first
 */
public record RankEnvironment(String engine, int rank, int worldSize, String worldSizeFrom, int localRank,
                              Deployment.Placement placement, Map<String, String> variables) {
    public static final String SLURM = "SLURM";
    public static final String TORCHRUN = "torchrun";
    public static final String OPEN_MPI = "Open MPI";
    public static final String PMIX = "PMIx";
    public static final String KUBERNETES = "Kubernetes";
    /** A worker that `ttpipe launch` started (with --rank). */
    public static final String LAUNCH = "ttpipe launch";
    /** No launcher's variables: --rank and rank_bindings say it all. */
    public static final String COMMAND_LINE = "--rank";
    /** Where a world size the launcher does not give comes from. */
    static final String CONFIG = "the config's ranks";

    /** The world size where the launcher gives none (Kubernetes, PMIx alone). */
    public static final String WORLD_SIZE_ENV = "TTPIPE_WORLD_SIZE";
    /** A Kubernetes Indexed Job's name (default: HOSTNAME without its "-index"). */
    public static final String K8S_JOB_ENV = "TTPIPE_K8S_JOB";
    /** The headless Service that gives the job's pods their DNS names (default: JOBSET_NAME). */
    public static final String K8S_SERVICE_ENV = "TTPIPE_K8S_SERVICE";

    public RankEnvironment {
        variables = Collections.unmodifiableMap(new LinkedHashMap<>(variables));
    }

    /**
     * This worker's rank and placement: from the launcher whose variables {@code env} holds, checked against
     * {@code rankFlag} (--rank, null when not given) and the config's {@code configRanks}.
     *
     * @param config the config's name, for messages
     */
    public static RankEnvironment resolve(Map<String, String> env, Integer rankFlag, int configRanks, String config) {
        if (env.containsKey(Launcher.LAUNCHED_ENV)) {
            // `ttpipe launch` gives each child its --rank; an allocation's variables around it describe launch itself
            if (rankFlag == null) throw new UserInputException("--rank: not given to a worker of `ttpipe launch`, expected --rank R");
            return new RankEnvironment(LAUNCH, checkedFlag(rankFlag, configRanks), configRanks, CONFIG, rankFlag,
                    Deployment.Placement.NONE, Map.of(Launcher.LAUNCHED_ENV, env.get(Launcher.LAUNCHED_ENV)));
        }
        RankEnvironment found = detect(env, configRanks);
        if (found == null) {
            if (rankFlag == null) {
                throw new UserInputException("--rank: not given, and no launcher's variables are set (SLURM_PROCID, RANK with"
                        + " WORLD_SIZE, OMPI_COMM_WORLD_RANK, PMIX_RANK, JOB_COMPLETION_INDEX), expected --rank R or a worker"
                        + " started by SLURM, torchrun, mpirun or a Kubernetes Indexed Job");
            }
            return new RankEnvironment(COMMAND_LINE, checkedFlag(rankFlag, configRanks), configRanks, CONFIG, -1,
                    Deployment.Placement.NONE, Map.of());
        }
        String rankVar = found.variables.keySet().iterator().next();
        if (found.worldSize != configRanks) {
            throw new UserInputException(found.worldSizeFrom + ": " + found.worldSize + " given (" + found.engine + "), expected " + configRanks
                    + ", the pipeline ranks of " + config + " (one worker per rank)");
        }
        if (rankFlag != null && rankFlag != found.rank) {
            throw new UserInputException("--rank: " + rankFlag + " given, but " + found.engine + " says " + rankVar + "="
                    + found.rank + ", expected the same rank (or --rank left out)");
        }
        return found;
    }

    private static int checkedFlag(int rank, int ranks) {
        if (rank < 0 || rank >= ranks) {
            throw new UserInputException("--rank: " + rank + " given, expected 0.." + (ranks - 1) + " (the job has " + ranks + " ranks)");
        }
        return rank;
    }

    /** The innermost launcher's reading of {@code env}, or null when none's variables are set. */
    static RankEnvironment detect(Map<String, String> env, int configRanks) {
        RankEnvironment torchrun = torchrun(env);
        if (torchrun != null) return torchrun;
        RankEnvironment ompi = openMpi(env);
        if (env.containsKey("PMIX_RANK")) {
            int pmixRank = nonNegative(env, "PMIX_RANK");
            if (ompi != null && ompi.rank != pmixRank) {
                throw new UserInputException("PMIX_RANK: " + pmixRank + " given, but OMPI_COMM_WORLD_RANK=" + ompi.rank
                        + ", expected the same rank (mpirun sets both)");
            }
            if (ompi == null) return pmix(env, pmixRank, configRanks);
        }
        if (ompi != null) return ompi;
        RankEnvironment slurm = slurm(env);
        if (slurm != null) return slurm;
        return kubernetes(env, configRanks);
    }

    private static RankEnvironment torchrun(Map<String, String> env) {
        if (!env.containsKey("RANK") || !env.containsKey("WORLD_SIZE")) return null;
        Map<String, String> vars = read(env, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT");
        int size = positive(env, "WORLD_SIZE");
        int rank = rankBelow(env, "RANK", size, "WORLD_SIZE");
        int localSize = env.containsKey("LOCAL_WORLD_SIZE") ? positive(env, "LOCAL_WORLD_SIZE") : 0;
        String master = env.get("MASTER_ADDR");
        String source = describe(TORCHRUN, vars);
        Deployment.Placement placement = localSize == size ? new Deployment.Placement(source, List.of(), true)
                : new Deployment.Placement(source, master == null || master.isBlank() ? List.of() : List.of(master.strip()), false);
        return new RankEnvironment(TORCHRUN, rank, size, "WORLD_SIZE", optional(env, "LOCAL_RANK"), placement, vars);
    }

    private static RankEnvironment openMpi(Map<String, String> env) {
        if (!env.containsKey("OMPI_COMM_WORLD_RANK")) return null;
        Map<String, String> vars = read(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE");
        int size = positive(env, "OMPI_COMM_WORLD_SIZE");
        int rank = rankBelow(env, "OMPI_COMM_WORLD_RANK", size, "OMPI_COMM_WORLD_SIZE");
        boolean oneNode = env.containsKey("OMPI_COMM_WORLD_LOCAL_SIZE") && positive(env, "OMPI_COMM_WORLD_LOCAL_SIZE") == size;
        return new RankEnvironment(OPEN_MPI, rank, size, "OMPI_COMM_WORLD_SIZE", optional(env, "OMPI_COMM_WORLD_LOCAL_RANK"),
                new Deployment.Placement(describe(OPEN_MPI, vars), List.of(), oneNode), vars);
    }

    /** PMIx without Open MPI's variables: under srun --mpi=pmix, SLURM's must agree and give the size and hosts. */
    private static RankEnvironment pmix(Map<String, String> env, int rank, int configRanks) {
        Map<String, String> vars = read(env, "PMIX_RANK");
        RankEnvironment slurm = slurm(env);
        if (slurm != null) {
            if (slurm.rank != rank) {
                throw new UserInputException("PMIX_RANK: " + rank + " given, but SLURM_PROCID=" + slurm.rank
                        + ", expected the same rank (srun --mpi=pmix sets both)");
            }
            vars.putAll(slurm.variables);
            return new RankEnvironment(PMIX, rank, slurm.worldSize, slurm.worldSizeFrom, slurm.localRank,
                    new Deployment.Placement(describe(PMIX, vars), slurm.placement.hosts(), slurm.placement.complete()), vars);
        }
        int size = worldSizeOr(env, vars, configRanks);
        if (rank >= size) throw bad("PMIX_RANK", env.get("PMIX_RANK"), "expected 0.." + (size - 1) + " (" + sizeFrom(env) + " " + size + ")");
        return new RankEnvironment(PMIX, rank, size, sizeFrom(env), -1, new Deployment.Placement(describe(PMIX, vars), List.of(), false), vars);
    }

    private static RankEnvironment slurm(Map<String, String> env) {
        if (!env.containsKey("SLURM_PROCID")) return null;
        String nodeListVar = first(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST");
        String tasksVar = first(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE");
        String sizeVar = first(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS");
        Map<String, String> vars = read(env, "SLURM_PROCID", sizeVar, "SLURM_LOCALID", "SLURM_NODEID", nodeListVar, tasksVar,
                "SLURM_DISTRIBUTION");
        List<Integer> tasks = null;
        if (tasksVar != null) {
            try {
                tasks = SlurmNodeList.tasksPerNode(env.get(tasksVar));
            } catch (IllegalArgumentException e) {
                throw bad(tasksVar, env.get(tasksVar), e.getMessage() + ", expected SLURM's counts per node (2(x3),1)");
            }
        }
        int size = sizeVar != null ? positive(env, sizeVar) : tasks != null ? tasks.stream().mapToInt(Integer::intValue).sum() : 0;
        if (size == 0) {
            throw new UserInputException("SLURM_NTASKS: not set, expected the number of tasks (srun sets it; or SLURM_TASKS_PER_NODE)");
        }
        int rank = rankBelow(env, "SLURM_PROCID", size, sizeVar != null ? sizeVar : tasksVar);
        int localRank = optional(env, "SLURM_LOCALID");
        String source = describe(SLURM, vars);
        List<String> hosts = nodeListVar == null ? List.of() : hostsByRank(env, nodeListVar, tasksVar, tasks, size, sizeVar);
        if (!hosts.isEmpty()) checkOwnNode(env, hosts, rank, localRank, nodeListVar);
        return new RankEnvironment(SLURM, rank, size, sizeVar != null ? sizeVar : tasksVar, localRank, new Deployment.Placement(source, hosts, false), vars);
    }

    /** Each rank's node: the node list, its task counts, and the distribution over the nodes (block unless cyclic). */
    private static List<String> hostsByRank(Map<String, String> env, String nodeListVar, String tasksVar, List<Integer> tasks,
                                            int size, String sizeVar) {
        List<String> nodes;
        try {
            nodes = SlurmNodeList.expand(env.get(nodeListVar).strip());
        } catch (IllegalArgumentException e) {
            throw bad(nodeListVar, env.get(nodeListVar), e.getMessage() + ", expected SLURM's host list (node[01-03,7],gpu-a)");
        }
        if (tasks == null) {
            if (size % nodes.size() != 0) {
                throw new UserInputException("SLURM_TASKS_PER_NODE: not set, and " + size + " tasks do not divide evenly over the "
                        + nodes.size() + " nodes of " + nodeListVar + ", expected SLURM_TASKS_PER_NODE (srun sets it)");
            }
            tasks = Collections.nCopies(nodes.size(), size / nodes.size());
            tasksVar = "the even split";
        }
        if (tasks.size() != nodes.size()) {
            throw bad(tasksVar, env.get(tasksVar), "counts " + tasks.size() + " node" + (tasks.size() == 1 ? "" : "s") + " but "
                    + nodeListVar + " names " + nodes.size() + ", expected one count per node");
        }
        int placed = tasks.stream().mapToInt(Integer::intValue).sum();
        if (placed != size) {
            throw bad(tasksVar, env.get(tasksVar), "places " + placed + " tasks but " + sizeVar + "=" + size + ", expected as many");
        }
        String distribution = env.getOrDefault("SLURM_DISTRIBUTION", "block").strip().toLowerCase(Locale.ROOT);
        String overNodes = distribution.split("[:,]")[0];
        if (!overNodes.equals("block") && !overNodes.equals("cyclic")) return List.of();     // plane, arbitrary: rank_bindings say
        List<String> hosts = new ArrayList<>(size);
        int[] left = tasks.stream().mapToInt(Integer::intValue).toArray();
        for (int r = 0, n = 0; r < size; r++) {
            while (left[n] == 0) n = (n + 1) % left.length;
            hosts.add(nodes.get(n));
            left[n]--;
            if (overNodes.equals("cyclic")) n = (n + 1) % left.length;
        }
        return hosts;
    }

    /** This task's own node and local id must be where the node list puts its rank: else the mapping is not SLURM's. */
    private static void checkOwnNode(Map<String, String> env, List<String> hosts, int rank, int localRank, String nodeListVar) {
        String mine = hosts.get(rank);
        int index = 0;
        for (int r = 0; r < rank; r++) if (hosts.get(r).equals(mine)) index++;
        String layout = nodeListVar + " and the tasks per node put rank " + rank + " on " + mine + " as its task " + index;
        if (localRank >= 0 && localRank != index) {
            throw new UserInputException("SLURM_LOCALID: " + localRank + " given, but " + layout
                    + ", expected them to agree (SLURM_DISTRIBUTION block or cyclic; else set rank_bindings)");
        }
        String nodeName = env.get("SLURMD_NODENAME");
        if (nodeName != null && !nodeName.isBlank() && !nodeName.strip().equals(mine)) {
            throw new UserInputException("SLURMD_NODENAME: '" + nodeName.strip() + "' given, but " + layout
                    + ", expected them to agree (SLURM_DISTRIBUTION block or cyclic; else set rank_bindings)");
        }
    }

    private static RankEnvironment kubernetes(Map<String, String> env, int configRanks) {
        if (!env.containsKey("JOB_COMPLETION_INDEX")) return null;
        Map<String, String> vars = read(env, "JOB_COMPLETION_INDEX");
        int size = worldSizeOr(env, vars, configRanks);
        int rank = rankBelow(env, "JOB_COMPLETION_INDEX", size, sizeFrom(env));
        vars.putAll(read(env, K8S_JOB_ENV, K8S_SERVICE_ENV, "JOBSET_NAME", "HOSTNAME"));
        String job = env.get(K8S_JOB_ENV);
        String hostname = env.getOrDefault("HOSTNAME", "").strip();
        if (job == null && hostname.endsWith("-" + rank)) job = hostname.substring(0, hostname.length() - ("-" + rank).length());
        String service = env.containsKey(K8S_SERVICE_ENV) ? env.get(K8S_SERVICE_ENV) : env.get("JOBSET_NAME");
        List<String> hosts = new ArrayList<>();
        String source = describe(KUBERNETES, vars);
        if (job == null || job.isBlank()) {
            source += "; no " + K8S_JOB_ENV + ", and HOSTNAME '" + hostname + "' is not <job>-" + rank + ", so no pod names";
        } else if (service == null || service.isBlank()) {
            source += "; no " + K8S_SERVICE_ENV + " (the headless Service), so no pod DNS names";
        } else {
            for (int r = 0; r < size; r++) hosts.add(job.strip() + "-" + r + "." + service.strip());
        }
        return new RankEnvironment(KUBERNETES, rank, size, sizeFrom(env), 0, new Deployment.Placement(source, hosts, false), vars);
    }

    private static String sizeFrom(Map<String, String> env) {
        return env.containsKey(WORLD_SIZE_ENV) ? WORLD_SIZE_ENV : CONFIG;
    }

    /** TTPIPE_WORLD_SIZE when set (and read into {@code vars}), else the config's ranks. */
    private static int worldSizeOr(Map<String, String> env, Map<String, String> vars, int configRanks) {
        if (!env.containsKey(WORLD_SIZE_ENV)) return configRanks;
        vars.putAll(read(env, WORLD_SIZE_ENV));
        return positive(env, WORLD_SIZE_ENV);
    }

    /** One line for the log: the engine, the rank and where it came from. */
    public String describe() {
        return "launcher: " + engine + (variables.isEmpty() ? "" : " (" + variablesText(variables) + ")") + ": rank " + rank
                + " of " + worldSize + (localRank >= 0 ? ", local rank " + localRank : "");
    }

    private static String describe(String engine, Map<String, String> vars) {
        return engine + " (" + variablesText(vars) + ")";
    }

    private static String variablesText(Map<String, String> vars) {
        StringBuilder sb = new StringBuilder();
        for (Map.Entry<String, String> e : vars.entrySet()) sb.append(sb.length() == 0 ? "" : ", ").append(e.getKey()).append('=').append(e.getValue());
        return sb.toString();
    }

    /** The variables among {@code names} that are set (null names skipped), in that order. */
    private static Map<String, String> read(Map<String, String> env, String... names) {
        Map<String, String> out = new LinkedHashMap<>();
        for (String n : names) if (n != null && env.containsKey(n)) out.put(n, env.get(n));
        return out;
    }

    private static String first(Map<String, String> env, String... names) {
        for (String n : names) if (env.containsKey(n) && !env.get(n).isBlank()) return n;
        return null;
    }

    private static int rankBelow(Map<String, String> env, String name, int size, String sizeName) {
        int rank = nonNegative(env, name);
        if (rank >= size) throw bad(name, env.get(name), "expected 0.." + (size - 1) + " (" + sizeName + " " + size + ")");
        return rank;
    }

    /** The value of an optional non-negative variable, -1 when not set. */
    private static int optional(Map<String, String> env, String name) {
        return env.containsKey(name) ? nonNegative(env, name) : -1;
    }

    private static int positive(Map<String, String> env, String name) {
        int v = integer(env, name, "a positive integer");
        if (v < 1) throw bad(name, env.get(name), "expected a positive integer");
        return v;
    }

    private static int nonNegative(Map<String, String> env, String name) {
        return integer(env, name, "a non-negative integer");
    }

    private static int integer(Map<String, String> env, String name, String expected) {
        String v = env.get(name).strip();
        if (v.isEmpty() || v.length() > 9 || !v.chars().allMatch(Character::isDigit)) throw bad(name, env.get(name), "expected " + expected);
        return Integer.parseInt(v);
    }

    private static UserInputException bad(String name, String value, String problem) {
        return new UserInputException(name + ": '" + value + "' given" + (problem.startsWith("expected") ? ", " : ": ") + problem);
    }
}

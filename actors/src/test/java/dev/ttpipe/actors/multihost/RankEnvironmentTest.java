package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import org.junit.jupiter.api.Test;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Every launcher's variables read into a rank, a world size and hosts; every disagreement one line. */
class RankEnvironmentTest {
    static Map<String, String> env(String... kv) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put(kv[i], kv[i + 1]);
        return m;
    }

    static RankEnvironment resolve(Map<String, String> env, Integer flag, int ranks) {
        return RankEnvironment.resolve(env, flag, ranks, "job.yaml");
    }

    static void assertRefused(Map<String, String> env, Integer flag, int ranks, String... fragments) {
        UserInputException e = assertThrows(UserInputException.class, () -> resolve(env, flag, ranks));
        assertFalse(e.getMessage().contains("\n"), e.getMessage());
        for (String f : fragments) assertTrue(e.getMessage().contains(f), "'" + f + "' not in: " + e.getMessage());
    }

    // ---- SLURM

    @Test
    void slurmGivesTheRankAndEveryRanksNodeFromTheNodeListAndTheTasksPerNode() {
        RankEnvironment e = resolve(env("SLURM_PROCID", "4", "SLURM_NTASKS", "7", "SLURM_LOCALID", "0",
                "SLURM_JOB_NODELIST", "node[01-03,7],gpu-a", "SLURM_TASKS_PER_NODE", "2(x2),1,1,1"), null, 7);
        assertEquals(RankEnvironment.SLURM, e.engine());
        assertEquals(4, e.rank());
        assertEquals(7, e.worldSize());
        assertEquals(0, e.localRank());
        assertEquals(List.of("node01", "node01", "node02", "node02", "node03", "node7", "gpu-a"), e.placement().hosts());
        assertEquals("4", e.variables().get("SLURM_PROCID"));
        assertTrue(e.describe().startsWith("launcher: SLURM (SLURM_PROCID=4, SLURM_NTASKS=7, SLURM_LOCALID=0,"), e.describe());
    }

    @Test
    void slurmCyclicDistributionDealsTheRanksOverTheNodes() {
        RankEnvironment e = resolve(env("SLURM_PROCID", "1", "SLURM_NTASKS", "5", "SLURM_LOCALID", "0",
                "SLURM_JOB_NODELIST", "n[1-2]", "SLURM_TASKS_PER_NODE", "3,2", "SLURM_DISTRIBUTION", "cyclic:block"), null, 5);
        assertEquals(List.of("n1", "n2", "n1", "n2", "n1"), e.placement().hosts());
    }

    @Test
    void slurmStepVariablesWinOverTheJobs() {
        RankEnvironment e = resolve(env("SLURM_PROCID", "1", "SLURM_NTASKS", "2", "SLURM_JOB_NODELIST", "a,b,c",
                "SLURM_TASKS_PER_NODE", "1(x3)", "SLURM_STEP_NODELIST", "b,c", "SLURM_STEP_TASKS_PER_NODE", "1(x2)",
                "SLURM_STEP_NUM_TASKS", "2"), null, 2);
        assertEquals(List.of("b", "c"), e.placement().hosts());
    }

    @Test
    void slurmHostsBecomeTheBindingsWithDistinctPortsForRanksOnOneNode() {
        RankEnvironment e = resolve(env("SLURM_PROCID", "0", "SLURM_NTASKS", "3", "SLURM_JOB_NODELIST", "a,b",
                "SLURM_TASKS_PER_NODE", "2,1"), null, 3);
        Deployment d = Deployment.of(config(3, ""), e.placement());
        assertEquals(List.of("a:25520", "a:25521", "b:25520"), d.bindings().stream().map(Deployment.Binding::controlAddress).toList());
        assertEquals(List.of(40456, 40458, 40456), d.bindings().stream().map(Deployment.Binding::dataPort).toList());
    }

    @Test
    void aConfigForOneMachineRunsOnTheAllocationButANetworkAddressInItsBindingsWins() {
        RankEnvironment e = resolve(env("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_JOB_NODELIST", "a,b",
                "SLURM_TASKS_PER_NODE", "1(x2)"), null, 2);
        Deployment loopback = Deployment.of(config(2, "rank_bindings:\n"
                + "  - {rank: 0, host: \"127.0.0.1\", control_port: 25520, data_port: 40456}\n"
                + "  - {rank: 1, host: localhost, control_port: 25521, data_port: 40458}\n"), e.placement());
        assertEquals(List.of("a:25520", "b:25521"), loopback.bindings().stream().map(Deployment.Binding::controlAddress).toList());
        Deployment network = Deployment.of(config(2, "rank_bindings:\n  - {rank: 0, host: 10.1.0.1}\n  - {rank: 1}\n"), e.placement());
        assertEquals(List.of("10.1.0.1", "b"), network.bindings().stream().map(Deployment.Binding::host).toList());
    }

    @Test
    void badSlurmValuesNameTheVariable() {
        assertRefused(env("SLURM_PROCID", "one", "SLURM_NTASKS", "2"), null, 2, "SLURM_PROCID: 'one' given, expected a non-negative integer");
        assertRefused(env("SLURM_PROCID", "2", "SLURM_NTASKS", "2"), null, 2, "SLURM_PROCID: '2' given, expected 0..1 (SLURM_NTASKS 2)");
        assertRefused(env("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_JOB_NODELIST", "node[01-", "SLURM_TASKS_PER_NODE", "2"),
                null, 2, "SLURM_JOB_NODELIST: 'node[01-' given", "does not close");
        assertRefused(env("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_JOB_NODELIST", "a,b", "SLURM_TASKS_PER_NODE", "2(x3)"),
                null, 2, "SLURM_TASKS_PER_NODE: '2(x3)' given", "counts 3 nodes but SLURM_JOB_NODELIST names 2");
        assertRefused(env("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_JOB_NODELIST", "a", "SLURM_TASKS_PER_NODE", "3"),
                null, 2, "places 3 tasks but SLURM_NTASKS=2");
        assertRefused(env("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_TASKS_PER_NODE", "2(3)"), null, 2,
                "SLURM_TASKS_PER_NODE: '2(3)' given", "expected N or N(xM)");
    }

    @Test
    void aLocalIdOrNodeNameTheNodeListDoesNotExplainIsAConflict() {
        assertRefused(env("SLURM_PROCID", "1", "SLURM_NTASKS", "2", "SLURM_LOCALID", "0", "SLURM_JOB_NODELIST", "a",
                "SLURM_TASKS_PER_NODE", "2"), null, 2, "SLURM_LOCALID: 0 given", "put rank 1 on a as its task 1");
        assertRefused(env("SLURM_PROCID", "1", "SLURM_NTASKS", "2", "SLURMD_NODENAME", "a", "SLURM_JOB_NODELIST", "a,b",
                "SLURM_TASKS_PER_NODE", "1(x2)"), null, 2, "SLURMD_NODENAME: 'a' given", "put rank 1 on b");
    }

    @Test
    void slurmNodeListsExpandAsScontrolDoes() {
        assertEquals(List.of("node08", "node09", "node10", "x"), SlurmNodeList.expand("node[08-10],x"));
        assertEquals(List.of("r1n1", "r1n2", "r2n1", "r2n2"), SlurmNodeList.expand("r[1-2]n[1-2]"));
        assertEquals(List.of("localhost"), SlurmNodeList.expand("localhost"));
        assertEquals(List.of(2, 2, 2, 1), SlurmNodeList.tasksPerNode("2(x3),1"));
        assertThrows(IllegalArgumentException.class, () -> SlurmNodeList.expand("n[3-1]"));
        assertThrows(IllegalArgumentException.class, () -> SlurmNodeList.expand("n[1-99999999]"));
        assertThrows(IllegalArgumentException.class, () -> SlurmNodeList.expand("a,,b"));
    }

    // ---- torchrun

    @Test
    void torchrunGivesTheRankAndOnlyRankZerosHost() {
        RankEnvironment e = resolve(env("RANK", "1", "WORLD_SIZE", "2", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "1",
                "MASTER_ADDR", "10.0.0.1", "MASTER_PORT", "29500"), null, 2);
        assertEquals(RankEnvironment.TORCHRUN, e.engine());
        assertEquals(1, e.rank());
        assertEquals(0, e.localRank());
        assertEquals(List.of("10.0.0.1"), e.placement().hosts());
        // rank 1's host is unknown: it announces its endpoint through rank 0, whose host is known
        Deployment d = Deployment.of(config(2, ""), e.placement());
        assertEquals(List.of(1), d.announcing());
        assertEquals("10.0.0.1:25520", d.seed().controlAddress());
        Deployment bound = Deployment.of(config(2, "rank_bindings:\n  - {rank: 0}\n  - {rank: 1, host: 10.0.0.2}\n"), e.placement());
        assertEquals(List.of(), bound.announcing());
        assertEquals(List.of("10.0.0.1:25520", "10.0.0.2:25520"), bound.bindings().stream().map(Deployment.Binding::controlAddress).toList());
        // bindings written for one machine (loopback): rank 0 takes MASTER_ADDR, rank 1 announces its own, on its binding's ports
        Deployment oneMachine = Deployment.of(config(2, "rank_bindings:\n  - {rank: 0, host: 127.0.0.1}\n"
                + "  - {rank: 1, host: 127.0.0.1, control_port: 25600, data_port: 40600}\n"), e.placement());
        assertEquals(List.of(1), oneMachine.announcing());
        assertEquals(25600, oneMachine.rank(1).controlPort());
    }

    @Test
    void withoutRankZerosHostNoRankCanAnnounceItsOwn() {
        RankEnvironment spread = resolve(env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2"), null, 2);
        ConfigException missing = assertThrows(ConfigException.class, () -> Deployment.of(config(2, ""), spread.placement()));
        assertTrue(missing.getMessage().contains("rank_bindings: no host for ranks 0..1: Open MPI (OMPI_COMM_WORLD_RANK=1,"
                + " OMPI_COMM_WORLD_SIZE=2) names no rank's host, expected rank_bindings with the host of rank 0 at least (the"
                + " others announce theirs through it)"), missing.getMessage());
        // rank 0's host in rank_bindings is enough: rank 1's binding without a host (loopback) announces its own
        Deployment d = Deployment.of(config(2, "rank_bindings:\n  - {rank: 0, host: 10.0.0.1}\n  - {rank: 1}\n"),
                spread.placement());
        assertEquals(List.of(1), d.announcing());
        // bindings for one machine stay there
        assertEquals(List.of(), Deployment.of(config(2, "rank_bindings:\n  - {rank: 0}\n  - {rank: 1}\n"),
                spread.placement()).announcing());
    }

    // ---- a rank's own endpoint, where it announces it

    @Test
    void anAnnouncingRankTakesTheAddressOfItsRouteToRankZeroAndItsLocalRanksPorts() {
        RankEnvironment e = resolve(env("RANK", "3", "WORLD_SIZE", "4", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2",
                "MASTER_ADDR", "127.0.0.1"), null, 4);
        TtpipeConfig cfg = config(4, "");
        Deployment d = Deployment.of(cfg, e.placement());
        assertEquals(List.of(1, 2, 3), d.announcing());
        // loopback toward a loopback rank 0; control_port + the local rank, data_port + 2 x it
        assertEquals(new OwnEndpoint("127.0.0.1", 25521, 40458, "the route to rank 0's host 127.0.0.1"),
                OwnEndpoint.resolve(Map.of(), cfg, d, 3, e.localRank(), "torchrun"));
        // no local rank: the first ports; the variables over all of it
        assertEquals(25520, OwnEndpoint.resolve(Map.of(), cfg, d, 3, -1, "torchrun").controlPort());
        assertEquals(new OwnEndpoint("10.1.2.3", 31000, 41000, OwnEndpoint.HOST_ENV),
                OwnEndpoint.resolve(env("TTPIPE_HOST", " 10.1.2.3 ", "TTPIPE_CONTROL_PORT", "31000", "TTPIPE_DATA_PORT", "41000"),
                        cfg, d, 3, 1, "torchrun"));
        // rank 0's endpoint is known: the variables may only repeat it
        assertEquals(new OwnEndpoint("127.0.0.1", 25520, 40456, "known"),
                OwnEndpoint.resolve(env("TTPIPE_CONTROL_PORT", "25520"), cfg, d, 0, 0, "torchrun"));
    }

    @Test
    void theAddressTowardAHostIsOneOfThisMachinesOwn() throws Exception {
        String own = OwnEndpoint.toward(java.net.InetAddress.getLocalHost().getHostAddress(), 9, "test");
        assertTrue(java.net.NetworkInterface.getByInetAddress(java.net.InetAddress.getByName(own)) != null, own);
        assertEquals("127.0.0.1", OwnEndpoint.toward("localhost", 9, "test"));
        ConfigException unknown = assertThrows(ConfigException.class, () -> OwnEndpoint.toward("no-such-host.invalid", 9,
                "torchrun (MASTER_ADDR=no-such-host.invalid)"));
        assertTrue(unknown.getMessage().startsWith("rank_bindings: rank 0's host 'no-such-host.invalid' (torchrun"
                + " (MASTER_ADDR=no-such-host.invalid)) does not resolve, expected"), unknown.getMessage());
    }

    @Test
    void badEndpointVariablesAreOneLineNamingTheVariable() {
        RankEnvironment e = resolve(env("RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "127.0.0.1"), null, 2);
        TtpipeConfig cfg = config(2, "");
        Deployment d = Deployment.of(cfg, e.placement());
        for (String[] bad : new String[][]{{"TTPIPE_CONTROL_PORT", "70000", "TTPIPE_CONTROL_PORT: '70000' given, expected a port 1..65535"},
                {"TTPIPE_DATA_PORT", "x", "TTPIPE_DATA_PORT: 'x' given, expected a port 1..65534"},
                {"TTPIPE_HOST", " ", "TTPIPE_HOST: ' ' given, expected this rank's address"}}) {
            UserInputException ex = assertThrows(UserInputException.class,
                    () -> OwnEndpoint.resolve(env(bad[0], bad[1]), cfg, d, 1, -1, "torchrun"));
            assertTrue(ex.getMessage().startsWith(bad[2]), ex.getMessage());
        }
        UserInputException known = assertThrows(UserInputException.class,
                () -> OwnEndpoint.resolve(env("TTPIPE_HOST", "10.0.0.9"), cfg, d, 0, -1, "torchrun"));
        assertEquals("TTPIPE_HOST: '10.0.0.9' given, but rank 0's endpoint is known (127.0.0.1 from rank_bindings or the"
                + " launcher), expected TTPIPE_HOST only on a rank whose peers learn its endpoint through rank 0", known.getMessage());
    }

    @Test
    void torchrunOnOneNodeNeedsNoHosts() {
        RankEnvironment e = resolve(env("RANK", "1", "WORLD_SIZE", "2", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2",
                "MASTER_ADDR", "127.0.0.1"), null, 2);
        assertEquals(List.of("127.0.0.1:25520", "127.0.0.1:25521"),
                Deployment.of(config(2, ""), e.placement()).bindings().stream().map(Deployment.Binding::controlAddress).toList());
    }

    @Test
    void torchrunStartedBySrunIsReadAsTorchrun() {
        // one torchrun per node under srun: SLURM's variables count nodes, torchrun's count ranks
        RankEnvironment e = resolve(env("RANK", "3", "WORLD_SIZE", "4", "LOCAL_RANK", "1", "SLURM_PROCID", "1", "SLURM_NTASKS", "2"),
                null, 4);
        assertEquals(RankEnvironment.TORCHRUN, e.engine());
        assertEquals(3, e.rank());
    }

    // ---- Open MPI and PMIx

    @Test
    void openMpiGivesTheRankAndOneNodeNeedsNoHosts() {
        RankEnvironment e = resolve(env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_LOCAL_RANK", "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE", "2", "PMIX_RANK", "1"), null, 2);
        assertEquals(RankEnvironment.OPEN_MPI, e.engine());
        assertEquals(1, e.rank());
        assertEquals(1, e.localRank());
        assertTrue(e.placement().complete());
        RankEnvironment spread = resolve(env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2",
                "OMPI_COMM_WORLD_LOCAL_SIZE", "1"), null, 2);
        assertThrows(ConfigException.class, () -> Deployment.of(config(2, ""), spread.placement()));
    }

    @Test
    void mpirunInsideAnSbatchScriptIsReadAsOpenMpi() {
        // the batch script's SLURM_PROCID=0 is inherited by every process mpirun starts
        RankEnvironment e = resolve(env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "PMIX_RANK", "1",
                "SLURM_PROCID", "0", "SLURM_NTASKS", "2"), null, 2);
        assertEquals(RankEnvironment.OPEN_MPI, e.engine());
        assertEquals(1, e.rank());
    }

    @Test
    void pmixUnderSrunTakesSlurmsSizeAndHosts() {
        RankEnvironment e = resolve(env("PMIX_RANK", "1", "SLURM_PROCID", "1", "SLURM_NTASKS", "2", "SLURM_LOCALID", "0",
                "SLURM_JOB_NODELIST", "a,b", "SLURM_TASKS_PER_NODE", "1(x2)"), null, 2);
        assertEquals(RankEnvironment.PMIX, e.engine());
        assertEquals(2, e.worldSize());
        assertEquals(List.of("a", "b"), e.placement().hosts());
    }

    @Test
    void pmixAloneTakesItsSizeFromTtpipeWorldSizeOrTheConfig() {
        RankEnvironment e = resolve(env("PMIX_RANK", "3"), null, 4);
        assertEquals(4, e.worldSize());
        assertEquals("the config's ranks", e.worldSizeFrom());
        assertRefused(env("PMIX_RANK", "1", "TTPIPE_WORLD_SIZE", "3"), null, 2, "TTPIPE_WORLD_SIZE: 3 given (PMIx), expected 2");
        assertRefused(env("PMIX_RANK", "4"), null, 4, "PMIX_RANK: '4' given, expected 0..3 (the config's ranks 4)");
    }

    // ---- Kubernetes

    @Test
    void anIndexedJobGivesTheRankAndThePodsDnsNames() {
        RankEnvironment e = resolve(env("JOB_COMPLETION_INDEX", "1", "HOSTNAME", "ttpipe-pp2-1", "TTPIPE_K8S_SERVICE", "ttpipe-pp2",
                "TTPIPE_WORLD_SIZE", "2"), null, 2);
        assertEquals(RankEnvironment.KUBERNETES, e.engine());
        assertEquals(1, e.rank());
        assertEquals(List.of("ttpipe-pp2-0.ttpipe-pp2", "ttpipe-pp2-1.ttpipe-pp2"), e.placement().hosts());
        assertEquals(List.of("ttpipe-pp2-0.ttpipe-pp2:25520", "ttpipe-pp2-1.ttpipe-pp2:25520"),
                Deployment.of(config(2, ""), e.placement()).bindings().stream().map(Deployment.Binding::controlAddress).toList());
        RankEnvironment named = resolve(env("JOB_COMPLETION_INDEX", "0", "TTPIPE_K8S_JOB", "train", "JOBSET_NAME", "js"), null, 2);
        assertEquals(List.of("train-0.js", "train-1.js"), named.placement().hosts());
    }

    @Test
    void anIndexedJobWithoutItsServiceSaysWhatIsMissing() {
        RankEnvironment e = resolve(env("JOB_COMPLETION_INDEX", "0", "HOSTNAME", "train-0"), null, 2);
        ConfigException x = assertThrows(ConfigException.class, () -> Deployment.of(config(2, ""), e.placement()));
        assertTrue(x.getMessage().contains("no TTPIPE_K8S_SERVICE"), x.getMessage());
    }

    // ---- conflicts and the command line

    @Test
    void aRankFlagThatDisagreesWithTheLauncherIsAConflict() {
        assertRefused(env("SLURM_PROCID", "0", "SLURM_NTASKS", "2"), 1, 2, "--rank: 1 given, but SLURM says SLURM_PROCID=0");
        assertEquals(1, resolve(env("SLURM_PROCID", "1", "SLURM_NTASKS", "2"), 1, 2).rank());
    }

    @Test
    void aWorldSizeOtherThanTheConfigsRanksIsAConflict() {
        assertRefused(env("SLURM_PROCID", "0", "SLURM_NTASKS", "3"), null, 2,
                "SLURM_NTASKS: 3 given (SLURM), expected 2, the pipeline ranks of job.yaml");
        assertRefused(env("RANK", "0", "WORLD_SIZE", "4"), null, 2, "WORLD_SIZE: 4 given (torchrun), expected 2");
    }

    @Test
    void twoLaunchersThatSetTheSameProcessesVariablesMustAgree() {
        assertRefused(env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "PMIX_RANK", "0"), null, 2,
                "PMIX_RANK: 0 given, but OMPI_COMM_WORLD_RANK=1, expected the same rank (mpirun sets both)");
        assertRefused(env("PMIX_RANK", "1", "SLURM_PROCID", "0", "SLURM_NTASKS", "2"), null, 2,
                "PMIX_RANK: 1 given, but SLURM_PROCID=0, expected the same rank (srun --mpi=pmix sets both)");
    }

    @Test
    void withoutALauncherTheRankFlagIsRequired() {
        assertRefused(env(), null, 2, "--rank: not given, and no launcher's variables are set");
        RankEnvironment e = resolve(env(), 1, 2);
        assertEquals(RankEnvironment.COMMAND_LINE, e.engine());
        assertEquals(Deployment.Placement.NONE, e.placement());
        assertRefused(env(), 2, 2, "--rank: 2 given, expected 0..1");
    }

    @Test
    void aWorkerOfTtpipeLaunchIgnoresTheAllocationAroundIt() {
        RankEnvironment e = resolve(env(Launcher.LAUNCHED_ENV, "1", "SLURM_PROCID", "0", "SLURM_NTASKS", "1"), 1, 2);
        assertEquals(RankEnvironment.LAUNCH, e.engine());
        assertEquals(1, e.rank());
    }

    static TtpipeConfig config(int ranks, String bindings) {
        StringBuilder split = new StringBuilder("{");
        for (int r = 0; r < ranks; r++) split.append(r == 0 ? "" : ", ").append(r).append(": 1");
        return ConfigLoader.read(String.join("\n",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: " + ranks + ", max_sequence_length: 16}",
                "multihost_config:",
                "  enabled: true",
                "  socket_type: aeron",
                "  pipeline_parallel_config: {num_blocks: " + ranks + ", blocks_per_rank: " + split + "}, schedule: gpipe}",
                bindings), "job.yaml", null);
    }
}

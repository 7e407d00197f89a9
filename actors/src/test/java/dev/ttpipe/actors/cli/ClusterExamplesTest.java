package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.ExitCodes;
import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.multihost.RankEnvironment;
import org.junit.jupiter.api.Test;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import picocli.CommandLine;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The cluster examples run what they say: the SLURM batch script's worker command parses, takes its rank
 * from SLURM (no --rank), and its allocation has one task per pipeline rank of the config, each on its own
 * node; the Kubernetes manifest is an Indexed Job with one pod per rank whose headless Service, subdomain
 * and environment give the pod DNS names ttpipe reads, with every port the ranks listen on declared.
 */
class ClusterExamplesTest {
    static final Path ROOT = DocsTest.ROOT;

    /** The worker command {@code args} (after "ttpipe") as the CLI parses it. */
    static WorkerCommand worker(List<String> args) {
        CommandLine cl = Main.newCommandLine(new PrintWriter(new StringWriter()), new PrintWriter(new StringWriter()));
        CommandLine.ParseResult parsed = cl.parseArgs(args.toArray(new String[0]));
        assertTrue(parsed.hasSubcommand(), "no subcommand in " + args);
        assertEquals("worker", parsed.subcommand().commandSpec().name(), args.toString());
        return (WorkerCommand) parsed.subcommand().commandSpec().userObject();
    }

    static TtpipeConfig config(WorkerCommand w) {
        Path file = ROOT.resolve(w.config);
        assertTrue(Files.isRegularFile(file), "the example's config " + w.config + " is not in the checkout");
        return ConfigLoader.load(file);
    }

    @Test
    void theSlurmScriptStartsOneWorkerPerRankWithItsRankFromSlurm() throws Exception {
        Path script = ROOT.resolve("examples/slurm/multihost-pp2.sbatch");
        List<String> lines = Files.readAllLines(script);
        assertEquals("#!/bin/bash", lines.get(0));
        Map<String, String> sbatch = new HashMap<>();
        Matcher m = Pattern.compile("^#SBATCH --([a-z-]+)(?:=(\\S+))?").matcher("");
        for (String l : lines) if (m.reset(l).find()) sbatch.put(m.group(1), m.group(2));
        int nodes = Integer.parseInt(sbatch.get("nodes")), perNode = Integer.parseInt(sbatch.get("ntasks-per-node"));

        List<String> srun = lines.stream().filter(l -> l.startsWith("srun ")).toList();
        assertEquals(1, srun.size(), "one srun line: " + srun);
        int build = indexOf(lines, "./ttpipe --version"), run = lines.indexOf(srun.get(0));
        assertTrue(build >= 0 && build < run, "the jar is built once, before srun starts it on every node");
        String command = srun.get(0).substring(srun.get(0).indexOf("./ttpipe ")).replaceFirst(" \\|\\| status=\\$\\?$", "");
        List<String> args = DocsTest.parseArgs(command);
        WorkerCommand w = worker(args);
        assertNull(w.rank, "no --rank: the rank comes from SLURM_PROCID");
        assertEquals("\"$RUN_DIR\"", srun.get(0).replaceAll(".*--run-dir (\\S+).*", "$1"), "the run directory is the job's");
        assertTrue(lines.stream().anyMatch(l -> l.startsWith("RUN_DIR=") && l.contains("${SLURM_JOB_ID}")),
                "one run directory per job, the same after a requeue (the job keeps its id)");
        // preemption: every start resumes from the run directory's latest checkpoint, a 143 is requeued
        assertEquals(TrainCommand.AUTO, w.resume, "--resume auto: one command line for the first start and every requeue");
        assertTrue(sbatch.containsKey("requeue"), "#SBATCH --requeue");
        assertTrue(sbatch.containsKey("signal") && sbatch.get("signal").startsWith("TERM@"), "SIGTERM before the time limit");
        int check = indexOf(lines, "if [ \"$status\" -eq " + ExitCodes.SIGTERM + " ]; then");
        int requeue = indexOf(lines, "scontrol requeue \"$SLURM_JOB_ID\"");
        assertTrue(run < check && check < requeue && lines.subList(check, requeue).stream().noneMatch(l -> l.strip().equals("fi")),
                "the job is requeued when the workers stopped for SIGTERM (" + ExitCodes.SIGTERM + ")");

        TtpipeConfig cfg = config(w);
        int ranks = cfg.pipeline().ranks();
        assertEquals(ranks, nodes * perNode, "tasks in the allocation vs the pipeline ranks of " + w.config);
        // what srun gives each task on nodes node1..nodeN: every rank on its own node, on the config's ports
        Set<String> hosts = new HashSet<>();
        for (int r = 0; r < ranks; r++) {
            RankEnvironment e = RankEnvironment.resolve(Map.of("SLURM_PROCID", "" + r, "SLURM_NTASKS", "" + ranks,
                    "SLURM_LOCALID", "" + r % perNode, "SLURM_JOB_NODELIST", "node[1-" + nodes + "]",
                    "SLURM_TASKS_PER_NODE", perNode + "(x" + nodes + ")"), null, ranks, w.config.toString());
            assertEquals(r, e.rank());
            Deployment d = Deployment.of(cfg, e.placement());
            hosts.add(d.rank(r).host());
            assertEquals("node" + (r / perNode + 1), d.rank(r).host());
        }
        assertEquals(nodes, hosts.size());

        if (Files.isExecutable(Path.of("/bin/bash"))) {
            Process p = new ProcessBuilder("/bin/bash", "-n", script.toString()).redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes());
            assertEquals(0, p.waitFor(), "bash -n: " + out);
        }
    }

    @Test
    void theKubernetesManifestIsAnIndexedJobWithAHeadlessServiceThatNamesEveryPod() throws Exception {
        Map<String, Map<String, Object>> byKind = new HashMap<>();
        for (Object doc : new Yaml(new LoaderOptions()).loadAll(Files.readString(ROOT.resolve("examples/kubernetes/multihost-pp2.yaml")))) {
            Map<String, Object> d = map(doc);
            byKind.put((String) d.get("kind"), d);
        }
        Map<String, Object> service = byKind.get("Service"), job = byKind.get("Job");
        assertNotNull(service, "a Service");
        assertNotNull(job, "a Job");
        String serviceName = (String) map(service.get("metadata")).get("name"), jobName = (String) map(job.get("metadata")).get("name");
        Map<String, Object> svc = map(service.get("spec"));
        assertEquals("None", svc.get("clusterIP"), "a headless Service");
        assertEquals(Boolean.TRUE, svc.get("publishNotReadyAddresses"), "the names resolve before the pods are ready");
        assertEquals(jobName, map(svc.get("selector")).get("job-name"), "the Service selects the Job's pods");

        Map<String, Object> spec = map(job.get("spec"));
        assertEquals("Indexed", spec.get("completionMode"));
        Map<String, Object> pod = map(map(spec.get("template")).get("spec"));
        assertEquals(serviceName, pod.get("subdomain"), "the pods' subdomain is the Service: <job>-<index>.<service>");
        List<Object> containers = list(pod.get("containers"));
        assertEquals(1, containers.size());
        Map<String, Object> c = map(containers.get(0));
        List<String> command = new ArrayList<>();
        for (Object a : list(c.get("command"))) command.add((String) a);
        assertEquals("./ttpipe", command.get(0));
        WorkerCommand w = worker(command.subList(1, command.size()));
        assertNull(w.rank, "no --rank: the rank comes from JOB_COMPLETION_INDEX");
        assertEquals(TrainCommand.AUTO, w.resume, "--resume auto: a pod started again goes on from the checkpoint");
        boolean ignores143 = false;
        for (Object rule : list(map(spec.get("podFailurePolicy")).get("rules"))) {
            Map<String, Object> r = map(rule);
            if ("Ignore".equals(r.get("action")) && r.get("onExitCodes") != null) {
                ignores143 |= list(map(r.get("onExitCodes")).get("values")).contains(ExitCodes.SIGTERM);
            }
        }
        assertTrue(ignores143, "a pod that stopped for SIGTERM (exit " + ExitCodes.SIGTERM + ") is started again, not counted as failed");
        assertTrue((Integer) pod.get("terminationGracePeriodSeconds") >= 30, "time to finish the step and save");
        Map<String, String> env = new HashMap<>();
        for (Object e : list(c.get("env"))) env.put((String) map(e).get("name"), String.valueOf(map(e).get("value")));
        assertEquals(serviceName, env.get(RankEnvironment.K8S_SERVICE_ENV));
        assertEquals(jobName, env.get(RankEnvironment.K8S_JOB_ENV));

        TtpipeConfig cfg = ConfigLoader.load(ROOT.resolve(w.config));
        int ranks = cfg.pipeline().ranks();
        assertEquals(ranks, spec.get("completions"), "one pod per pipeline rank");
        assertEquals(ranks, spec.get("parallelism"), "every rank at once");
        assertEquals(String.valueOf(ranks), env.get(RankEnvironment.WORLD_SIZE_ENV));

        Set<String> containerPorts = new HashSet<>(), servicePorts = new HashSet<>();
        for (Object p : list(c.get("ports"))) containerPorts.add(map(p).get("containerPort") + "/" + map(p).get("protocol"));
        for (Object p : list(svc.get("ports"))) servicePorts.add(map(p).get("port") + "/" + map(p).get("protocol"));
        for (int r = 0; r < ranks; r++) {
            // what Kubernetes gives pod r: its index and its hostname <job>-<r>
            Map<String, String> podEnv = new HashMap<>(env);
            podEnv.put("JOB_COMPLETION_INDEX", "" + r);
            podEnv.put("HOSTNAME", jobName + "-" + r);
            RankEnvironment e = RankEnvironment.resolve(podEnv, null, ranks, w.config.toString());
            assertEquals(RankEnvironment.KUBERNETES, e.engine());
            assertEquals(r, e.rank());
            Deployment.Binding b = Deployment.of(cfg, e.placement()).rank(r);
            assertEquals(jobName + "-" + r + "." + serviceName, b.host());
            for (String port : List.of(b.controlPort() + "/TCP", b.dataPort() + "/UDP")) {
                assertTrue(containerPorts.contains(port), "rank " + r + " listens on " + port + ", not among the container's ports " + containerPorts);
                assertTrue(servicePorts.contains(port), "rank " + r + " listens on " + port + ", not among the Service's ports " + servicePorts);
            }
        }

        // the run directory is on the shared volume, which is the claim the manifest makes
        String runDir = w.runDir.toString();
        Map<String, Object> mount = map(list(c.get("volumeMounts")).get(0));
        assertTrue(runDir.startsWith(mount.get("mountPath") + "/"), runDir + " is not on the mounted volume");
        Map<String, Object> claim = byKind.get("PersistentVolumeClaim");
        assertNotNull(claim, "a PersistentVolumeClaim for the runs");
        assertEquals(List.of("ReadWriteMany"), map(claim.get("spec")).get("accessModes"), "every rank's pod writes checkpoints there");
        assertEquals(map(claim.get("metadata")).get("name"),
                map(map(list(pod.get("volumes")).get(0)).get("persistentVolumeClaim")).get("claimName"));
    }

    private static int indexOf(List<String> lines, String text) {
        for (int i = 0; i < lines.size(); i++) if (lines.get(i).strip().equals(text)) return i;
        return -1;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> map(Object o) {
        assertTrue(o instanceof Map, "expected a mapping, got " + o);
        return (Map<String, Object>) o;
    }

    @SuppressWarnings("unchecked")
    private static List<Object> list(Object o) {
        assertTrue(o instanceof List, "expected a list, got " + o);
        return (List<Object>) o;
    }
}

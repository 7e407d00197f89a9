package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.multihost.NetworkLab;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.stages.checkpoint.SafeTensors;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * {@code ttpipe bench network}: the step time of a two-process job over a real link with packet loss
 * against the same link without. Two workers run in two network namespaces joined by a veth pair
 * ({@link NetworkLab}); nftables drops {@code --loss}% of the packets arriving at each data port. Clean
 * and lossy runs alternate ({@code --rounds} of each) so the host's load falls on both alike; each run's
 * steps after the first (warm-up) count. Also says whether the lossy runs' final weights equal the clean
 * run's bit for bit (Aeron retransmits what was lost), and, unless {@code --no-partition}, how long a
 * partition (every packet between the namespaces dropped, both ways, from step 5 on) takes to end a job:
 * from the partition to rank 0's exit. Figures only, never pass/fail. Needs root.
 */
@Command(name = "network",
        mixinStandardHelpOptions = true,
        description = {"Measure the step time of two worker processes over a veth link with random packet loss (nftables in"
                + " two network namespaces made for the run) against the same link without loss; runs alternate, medians"
                + " over every step after each run's first; then how long a partition takes to end a job. Needs root, iproute2"
                + " and nftables."},
        footer = {"", "Examples:",
                "  ttpipe bench network",
                "  ttpipe bench network --loss 5 --steps 60 --rounds 3 --json",
                "  ttpipe bench network --rounds 1 --no-partition"})
public final class BenchNetworkCommand implements Callable<Integer> {
    @Option(names = "--loss", paramLabel = "PERCENT", defaultValue = "2",
            description = "Packets dropped at random on each data port, in percent, 1 to 50 (default ${DEFAULT-VALUE}).")
    int loss;

    @Option(names = "--steps", paramLabel = "N", defaultValue = "40", description = "Steps per run, 5 or more (default ${DEFAULT-VALUE}).")
    int steps;

    @Option(names = "--rounds", paramLabel = "R", defaultValue = "2",
            description = "Clean and lossy runs of each, alternating, 1 or more (default ${DEFAULT-VALUE}).")
    int rounds;

    @Option(names = "--no-partition", description = "Leave out the partition run (a job cut off from step 5 on, timed to its end).")
    boolean noPartition;

    /** Steps the partitioned job finishes before the link is cut. */
    static final int PARTITION_AFTER_STEPS = 5;

    @Option(names = "--json", description = "Print one JSON object instead of text.")
    boolean json;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        if (loss < 1 || loss > 50) throw new UserInputException("--loss: " + loss + " given, expected a percentage from 1 to 50");
        if (steps < 5) throw new UserInputException("--steps: " + steps + " given, expected 5 or more");
        if (rounds < 1) throw new UserInputException("--rounds: " + rounds + " given, expected 1 or more");
        String why = NetworkLab.unavailable();
        if (why != null) throw new UserInputException("bench network cannot run here: " + why);
        PrintWriter out = spec.commandLine().getOut();
        PrintWriter err = spec.commandLine().getErr();
        Path dir = Files.createTempDirectory("ttpipe-bench-network-");
        List<Double> clean = new ArrayList<>(), lossy = new ArrayList<>();
        long dropped = 0;
        boolean identical = true;
        double partitionSeconds = Double.NaN;
        try (NetworkLab lab = NetworkLab.open("b", new PrintStream(System.err, true))) {
            Path cfg = dir.resolve("pp2.yaml");
            Files.writeString(cfg, lab.config(steps, dir.resolve("runs")));
            Path reference = null;
            for (int round = 0; round < rounds; round++) {
                for (boolean lose : new boolean[]{false, true}) {
                    String name = (lose ? "lossy-" : "clean-") + round;
                    if (!json) {
                        err.printf(Locale.ROOT, "round %d of %d: %d steps %s...%n", round + 1, rounds, steps,
                                lose ? "with " + loss + "% loss" : "without loss");
                        err.flush();
                    }
                    if (lose) lab.dropRandomly(loss);
                    try {
                        NetworkLab.Job job = lab.start(cfg, dir.resolve(name), dir.resolve("logs"), name);
                        int code = job.finish(600);
                        if (code != 0) {
                            throw new IOException("the " + name + " run failed (exit " + code + "):\n" + Files.readString(job.out0()));
                        }
                        if (lose) dropped += lab.dropped();
                    } finally {
                        lab.heal();
                    }
                    (lose ? lossy : clean).addAll(stepSeconds(dir.resolve(name).resolve("metrics.jsonl")));
                    Path last = dir.resolve(name).resolve("checkpoints").resolve(String.format("step-%06d", steps));
                    if (reference == null) reference = last;
                    else identical &= sameTensors(reference, last);
                }
            }
            if (!noPartition) {
                if (!json) {
                    err.printf(Locale.ROOT, "a partition from step %d on...%n", PARTITION_AFTER_STEPS);
                    err.flush();
                }
                partitionSeconds = partition(lab, dir);
            }
        } finally {
            deleteTree(dir);
        }
        double c = BenchTelemetryCommand.median(clean), l = BenchTelemetryCommand.median(lossy);
        if (json) {
            out.println("{\"loss_percent\":" + loss + ",\"steps\":" + steps + ",\"rounds\":" + rounds
                    + ",\"clean_median_step_seconds\":" + Json.num(c) + ",\"lossy_median_step_seconds\":" + Json.num(l)
                    + ",\"ratio\":" + Json.num(l / c) + ",\"clean_steps\":" + clean.size() + ",\"lossy_steps\":" + lossy.size()
                    + ",\"packets_dropped\":" + dropped + ",\"weights_identical\":" + identical
                    + (noPartition ? "" : ",\"partition_seconds\":" + Json.num(partitionSeconds)) + "}");
        } else {
            out.printf(Locale.ROOT, "two workers over a veth link (2 ranks, 4 blocks of width 64, 4 microbatches, 1F1B), %d rounds of"
                    + " %d steps, first step of each run left out:%n", rounds, steps);
            out.printf(Locale.ROOT, "  no loss:        median step %.1f ms (%d steps)%n", 1e3 * c, clean.size());
            out.printf(Locale.ROOT, "  %d%% loss:        median step %.1f ms (%d steps), %.2fx; %d packets dropped%n", loss, 1e3 * l,
                    lossy.size(), l / c, dropped);
            out.printf(Locale.ROOT, "  final weights of every run %s%n", identical ? "bit-identical" : "DIFFER (a lost packet changed the training)");
            if (!noPartition) {
                out.printf(Locale.ROOT, "  a partition (every packet dropped both ways from step %d on): rank 0 ended the job %.1f s after it%n",
                        PARTITION_AFTER_STEPS, partitionSeconds);
            }
        }
        out.flush();
        return Main.EXIT_OK;
    }

    /**
     * Seconds from cutting the link (after {@link #PARTITION_AFTER_STEPS} steps of a long job) to rank 0's exit; an
     * IOException when the job does not end within 120 s or ends well.
     */
    private static double partition(NetworkLab lab, Path dir) throws IOException, InterruptedException {
        Path cfg = dir.resolve("partition.yaml");
        Files.writeString(cfg, lab.config(400, dir.resolve("runs")));
        NetworkLab.Job job = lab.start(cfg, dir.resolve("partition"), dir.resolve("logs"), "partition");
        try {
            Path metrics = dir.resolve("partition").resolve("metrics.jsonl");
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (!(Files.isRegularFile(metrics) && Files.readAllLines(metrics).size() >= PARTITION_AFTER_STEPS)) {
                if (!job.rank0().isAlive()) throw new IOException("rank 0 ended before the partition:\n" + Files.readString(job.out0()));
                if (System.nanoTime() > deadline) {
                    throw new IOException("no " + PARTITION_AFTER_STEPS + " steps within 120 s:\n" + Files.readString(job.out0()));
                }
                Thread.sleep(20);
            }
            long t0 = System.nanoTime();
            lab.partition();
            if (!job.rank0().waitFor(120, TimeUnit.SECONDS)) {
                throw new IOException("the partitioned job did not end within 120 s:\n" + Files.readString(job.out0()));
            }
            double seconds = (System.nanoTime() - t0) / 1e9;
            if (job.rank0().exitValue() == 0) throw new IOException("the partitioned job ended well:\n" + Files.readString(job.out0()));
            return seconds;
        } finally {
            job.destroy();
            lab.heal();
        }
    }

    /** Each step's seconds from a run's metrics.jsonl, the first step (warm-up) left out. */
    static List<Double> stepSeconds(Path metrics) throws IOException {
        Pattern p = Pattern.compile("\"seconds\":([0-9.eE+-]+)");
        List<Double> s = new ArrayList<>();
        List<String> lines = Files.readAllLines(metrics);
        for (String line : lines.subList(Math.min(1, lines.size()), lines.size())) {
            Matcher m = p.matcher(line);
            if (m.find()) s.add(Double.parseDouble(m.group(1)));
        }
        return s;
    }

    /** Whether two checkpoint directories hold the same tensors, bit for bit. */
    public static boolean sameTensors(Path x, Path y) throws IOException {
        try (Stream<Path> files = Files.list(x)) {
            for (Path f : files.filter(p -> p.toString().endsWith(".safetensors")).toList()) {
                Path g = y.resolve(f.getFileName());
                if (!Files.isRegularFile(g)) return false;
                try (SafeTensors.Reader a = new SafeTensors.Reader(f); SafeTensors.Reader b = new SafeTensors.Reader(g)) {
                    if (!a.tensors().keySet().equals(b.tensors().keySet())) return false;
                    for (String n : a.tensors().keySet()) if (!Arrays.equals(a.read(n), b.read(n))) return false;
                }
            }
        }
        return true;
    }

    private static void deleteTree(Path dir) throws IOException {
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
        }
    }
}

package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.ActionEvent;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.stages.Partitioner;
import dev.ttpipe.stages.StageSlice;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

/**
 * Ranks and links that stay slower than their peers, named while the job runs.
 *
 * <p>A rank: each of its compute actions (F, B, I, W) of a step, divided by what the plan's cost
 * estimate says its stage costs ({@link Partitioner#costs}: its blocks, and the embedding or the head
 * where the stage holds them), is a time per unit of work. The median over the rank's actions of one
 * kind, divided by the median of the other ranks' medians of that kind, is the rank's slowdown in
 * that kind: 1.0 runs as planned, as fast as its peers, whatever its share of the blocks. What an
 * action would have taken at its peers' pace, its time over the slowdown, is the planned time. The
 * rank's slowdown is its kinds' measured time over their planned time, each kind counted as often as
 * the rank ran it.
 *
 * <p>A link (rank a to rank b): the time its tensors of the step took per byte, against the median
 * of the other links' (in a 2-rank job, the one the other way). That is the larger of two measures:
 * its SENDs (handing the tensor to the transport, back pressure included), and its frames' time on
 * the link at rank b, from each frame's first chunk's arrival to its last (where the transport times
 * its frames: Aeron, on which a SEND only queues the tensor, so that a link slow on the wire shows
 * only there); what a frame waited at the sender, behind earlier ones, is not in the latter. Only
 * a link whose time took at least {@value #LINK_FLOOR_PERCENT}% of the step's passes counts towards a
 * straggler; on the local transport, which hands tensors over in memory, there is no link to measure.
 * (A rank starved of CPU or stopped also receives slowly: the links into it may be named beside it.)
 *
 * <p>A rank or link whose slowdown stays at or above {@link #margin()} for {@link Thresholds#steps} steps
 * in a row is a straggler, until it stays below for as many steps in a row; each change is one line. The
 * first {@link Thresholds#warmupSteps} steps observed are left out ({@code telemetry.straggler_margin},
 * {@code straggler_steps}, {@code straggler_warmup_steps}). While a rank is a straggler, {@link View#blocksPerRank}
 * is the split that would even the ranks out with the stragglers at their measured pace and the others
 * as planned ({@link Partitioner#rebalanced}).
 * Not thread-safe: the training loop feeds it; what it hands out is immutable.
 */
public final class Stragglers {
    static final int LINK_FLOOR_PERCENT = 2;
    private static final ActionKind[] KINDS = {ActionKind.F, ActionKind.B, ActionKind.I, ActionKind.W};

    /**
     * When a rank or link is named: a slowdown at or above {@code margin} against the peers (times the ranks'
     * sharing of cores, {@link #margin()}) for {@code steps} steps in a row, and cleared after as many below;
     * the first {@code warmupSteps} steps observed are left out (the JIT compiles and buffers are allocated,
     * unevenly across ranks).
     */
    public record Thresholds(double margin, int steps, int warmupSteps) {
        /** The config's defaults: 1.5x, 3 steps, 5 warm-up steps. */
        public static final Thresholds DEFAULT = of(new TtpipeConfig.TelemetryConfig());

        /** {@code telemetry.straggler_margin}, {@code straggler_steps} and {@code straggler_warmup_steps}. */
        public static Thresholds of(TtpipeConfig.TelemetryConfig t) {
            return new Thresholds(t.stragglerMargin, t.stragglerSteps, t.stragglerWarmupSteps);
        }
    }

    /** One rank's {@code count} actions of one kind in the last step: the slowdown, the median time and the planned time. */
    public record RankTime(int rank, ActionKind kind, int count, double slowdown, double seconds, double plannedSeconds) {
        /** {@code rank 3 runs F 1.6x slower than planned: 42 ms vs 26 ms}. */
        public String describe() {
            return String.format(Locale.ROOT, "rank %d runs %s %.1fx slower than planned: %s vs %s", rank, kind, slowdown,
                    duration(seconds), duration(plannedSeconds));
        }
    }

    /** One link in the last step: the slowdown, its time per MiB and the other links' median. */
    public record LinkTime(int from, int to, double slowdown, double secondsPerMiB, double peersSecondsPerMiB) {
        /** {@code link 1 -> 2 is 2.4x slower than the others: 3.1 ms/MiB vs 1.3 ms/MiB}. */
        public String describe() {
            return String.format(Locale.ROOT, "link %d -> %d is %.1fx slower than the others: %s/MiB vs %s/MiB", from,
                    to, slowdown, duration(secondsPerMiB), duration(peersSecondsPerMiB));
        }
    }

    /**
     * What the last step said: the margin, every rank's and link's measure ({@code ranks}, {@code links}),
     * the stragglers with the step (from 1) at which each was named, and the suggested blocks per rank
     * while a rank is one (else null).
     */
    public record View(double margin, List<RankTime> ranks, List<LinkTime> links, Map<Integer, Integer> slowRanks,
                       Map<List<Integer>, Integer> slowLinks, int[] blocksPerRank) {
        static final View NONE = new View(Double.NaN, List.of(), List.of(), Map.of(), Map.of(), null);

        /** The kind in which {@code rank} is slowest in the last step, or null when it was not measured. */
        public RankTime worst(int rank) {
            return Stragglers.worst(ranks, rank);
        }

        public LinkTime link(int from, int to) {
            for (LinkTime t : links) if (t.from() == from && t.to() == to) return t;
            return null;
        }

        /** {@link #suggestion} of {@link #blocksPerRank}; empty while no rank is a straggler. */
        public List<String> suggestion() {
            return blocksPerRank == null ? List.of() : Stragglers.suggestion(blocksPerRank);
        }
    }

    private final Schedule schedule;
    private final double margin;
    private final int steps, warmupSteps;
    private final boolean links;
    private final int numBlocks;
    private final Partitioner.Costs costs;
    private final double[] stageCost;
    private final boolean[] embedding, head;
    private final Streak[] rankStreaks;
    private final Map<List<Integer>, Streak> linkStreaks = new TreeMap<>(Stragglers::compareLinks);
    private int observed;
    private View view = View.NONE;

    /** Above or below the margin, how many steps in a row, and since when named. */
    private final class Streak {
        int above, below, namedAt;

        /** Counts one step; true when the straggler was named or cleared by it. */
        boolean count(boolean slow, int step) {
            above = slow ? above + 1 : 0;
            below = slow ? 0 : below + 1;
            if (namedAt == 0 && above >= steps) {
                namedAt = step;
                return true;
            }
            if (namedAt != 0 && below >= steps) {
                namedAt = 0;
                return true;
            }
            return false;
        }
    }

    /** {@link #Stragglers(JobPlan, boolean, Thresholds)} at the {@link Thresholds#DEFAULT defaults}. */
    public Stragglers(JobPlan plan, boolean oneProcess) {
        this(plan, oneProcess, Thresholds.DEFAULT);
    }

    /**
     * @param oneProcess every rank of {@code plan} runs in this process (not worker processes): on the
     *                   cpu backend their threads then share this machine's cores
     */
    public Stragglers(JobPlan plan, boolean oneProcess, Thresholds thresholds) {
        this.schedule = plan.schedule();
        this.margin = thresholds.margin() * sharing(plan, oneProcess, Runtime.getRuntime().availableProcessors());
        this.steps = thresholds.steps();
        this.warmupSteps = thresholds.warmupSteps();
        this.links = plan.transport() != SocketType.LOCAL;
        this.numBlocks = plan.model().numBlocks();
        this.costs = Partitioner.costs(plan.model(), plan.seqLen());
        int ranks = schedule.ranks();
        this.stageCost = new double[schedule.stages()];
        this.embedding = new boolean[ranks];
        this.head = new boolean[ranks];
        for (StageSlice s : plan.slices()) {
            stageCost[s.index()] = costs.of(s);
            int r = schedule.rankOfStage(s.index());
            embedding[r] |= s.embedding();
            head[r] |= s.head();
        }
        this.rankStreaks = new Streak[ranks];
        for (int r = 0; r < ranks; r++) rankStreaks[r] = new Streak();
    }

    /**
     * How many times slower a rank can read only because it shares cores with the others: on the cpu
     * backend, the ranks' compute threads in one process over the cores (at least 1; 1 elsewhere: a
     * rank of its own devices, or the sim backend's modeled time). A rank's pace there depends on
     * which others run beside it.
     */
    static double sharing(JobPlan plan, boolean oneProcess, int cores) {
        if (plan.backend() != Backend.CPU || !oneProcess) return 1.0;
        int threads = plan.meshOptions().threads() > 0 ? plan.meshOptions().threads() : cores;
        return Math.max(1.0, (double) plan.ranks() * threads / cores);
    }

    /** The slowdown a rank or link must reach: {@link Thresholds#margin}, times how much the ranks share cores. */
    public double margin() {
        return margin;
    }

    /** The last step's verdict (empty before the second step). */
    public View view() {
        return view;
    }

    /**
     * Takes step {@code r} into account; returns the lines to print: a rank or link named a straggler
     * (with the suggested blocks_per_rank), or one that keeps up again. Empty when nothing changed.
     */
    public List<String> observe(Coordinator.StepReport r) {
        if (observed++ < warmupSteps) return List.of();
        int step = r.step() + 1;
        List<RankTime> ranks = rankTimes(r.events());
        List<LinkTime> links = new ArrayList<>();
        Map<List<Integer>, Double> linkSeconds = this.links ? linkTimes(r.events(), links) : Map.of();
        long passWall = 0;
        for (int i = 0; i < r.passStartNs().length; i++) passWall += r.passEndNs()[i] - r.passStartNs()[i];
        List<String> lines = new ArrayList<>();
        double[] rankSlowdown = overall(ranks);
        for (int rank = 0; rank < rankStreaks.length; rank++) {
            if (rankStreaks[rank].count(rankSlowdown[rank] >= margin, step)) {
                lines.add(rankStreaks[rank].namedAt != 0 ? worst(ranks, rank).describe()
                        : String.format(Locale.ROOT, "rank %d keeps up again (%.1fx planned)", rank, rankSlowdown[rank]));
            }
        }
        Map<Integer, Integer> slowRanks = new TreeMap<>();
        for (int rank = 0; rank < rankStreaks.length; rank++) if (rankStreaks[rank].namedAt != 0) slowRanks.put(rank, rankStreaks[rank].namedAt);
        double[] pace = new double[rankStreaks.length];                 // the stragglers at their pace, the others as planned
        for (int rank = 0; rank < pace.length; rank++) pace[rank] = slowRanks.containsKey(rank) ? rankSlowdown[rank] : 1.0;
        int[] blocks = slowRanks.isEmpty() ? null
                : Partitioner.rebalanced(numBlocks, schedule.virtualStages(), costs, embedding, head, pace);
        if (blocks != null && lines.stream().anyMatch(l -> l.contains("slower than planned"))) {
            lines.addAll(suggestion(blocks));
        }
        for (LinkTime t : links) {
            List<Integer> key = List.of(t.from(), t.to());
            boolean matters = linkSeconds.get(key) * 1e9 * 100 >= LINK_FLOOR_PERCENT * (double) passWall;
            Streak s = linkStreaks.computeIfAbsent(key, k -> new Streak());
            if (s.count(matters && t.slowdown() >= margin, step)) {
                lines.add(s.namedAt != 0 ? t.describe() : String.format(Locale.ROOT, "link %d -> %d keeps up again", t.from(), t.to()));
            }
        }
        Map<List<Integer>, Integer> slowLinks = new LinkedHashMap<>();
        linkStreaks.forEach((k, s) -> {
            if (s.namedAt != 0) slowLinks.put(k, s.namedAt);
        });
        view = new View(margin, List.copyOf(ranks), List.copyOf(links), Map.copyOf(slowRanks), Map.copyOf(slowLinks), blocks);
        return lines;
    }

    /** Every rank's slowdown in each kind it ran, against the other ranks' median. */
    private List<RankTime> rankTimes(List<ActionEvent> events) {
        int ranks = rankStreaks.length;
        List<List<List<double[]>>> samples = new ArrayList<>();          // [rank][kind] -> {seconds, seconds per unit}
        for (int r = 0; r < ranks; r++) {
            List<List<double[]>> byKind = new ArrayList<>();
            for (int k = 0; k < KINDS.length; k++) byKind.add(new ArrayList<>());
            samples.add(byKind);
        }
        for (ActionEvent e : events) {
            int k = Arrays.asList(KINDS).indexOf(e.kind());
            if (k < 0 || e.pass() < 0 || e.rank() < 0 || e.rank() >= ranks || stageCost[e.stage()] <= 0) continue;
            double s = e.durationNs() / 1e9;
            samples.get(e.rank()).get(k).add(new double[] {s, s / stageCost[e.stage()]});
        }
        double[][] unit = new double[ranks][KINDS.length], seconds = new double[ranks][KINDS.length];
        for (int r = 0; r < ranks; r++) {
            for (int k = 0; k < KINDS.length; k++) {
                List<double[]> xs = samples.get(r).get(k);
                unit[r][k] = xs.isEmpty() ? Double.NaN : median(xs.stream().mapToDouble(x -> x[1]).toArray());
                seconds[r][k] = xs.isEmpty() ? Double.NaN : median(xs.stream().mapToDouble(x -> x[0]).toArray());
            }
        }
        List<RankTime> out = new ArrayList<>();
        for (int r = 0; r < ranks; r++) {
            for (int k = 0; k < KINDS.length; k++) {
                if (Double.isNaN(unit[r][k])) continue;
                List<Double> peers = new ArrayList<>();
                for (int j = 0; j < ranks; j++) if (j != r && !Double.isNaN(unit[j][k])) peers.add(unit[j][k]);
                if (peers.isEmpty()) continue;
                double peer = median(peers.stream().mapToDouble(Double::doubleValue).toArray());
                if (!(peer > 0)) continue;
                double slowdown = unit[r][k] / peer;
                out.add(new RankTime(r, KINDS[k], samples.get(r).get(k).size(), slowdown, seconds[r][k], seconds[r][k] / slowdown));
            }
        }
        return out;
    }

    /**
     * Each link's time per MiB against the other links' median (into {@code out}); returns each link's
     * seconds in the step. A link's time is the larger of its SENDs' (handing the tensors to the
     * transport) and its frames' on the link at the receiver (a RECV's {@link ActionEvent#linkNs}, first
     * chunk to last: on Aeron, where a SEND only queues, the wire shows there), each over its bytes.
     */
    private Map<List<Integer>, Double> linkTimes(List<ActionEvent> events, List<LinkTime> out) {
        Map<List<Integer>, double[]> sums = new TreeMap<>(Stragglers::compareLinks);     // {send s, send bytes, recv s, recv bytes}
        for (ActionEvent e : events) {
            if (e.pass() < 0 || e.bytes() <= 0) continue;
            boolean send = e.kind() == ActionKind.SEND_F || e.kind() == ActionKind.SEND_B;
            boolean recv = (e.kind() == ActionKind.RECV_F || e.kind() == ActionKind.RECV_B) && e.linkNs() >= 0;
            if (!send && !recv) continue;
            boolean forward = e.kind() == ActionKind.SEND_F || e.kind() == ActionKind.RECV_F;
            int other = e.stage() + (send == forward ? 1 : -1);       // a SEND_F goes to the next stage, a RECV_F comes from the one before
            if (other < 0 || other >= schedule.stages()) continue;
            int otherRank = schedule.rankOfStage(other);
            if (otherRank == e.rank()) continue;
            double[] s = sums.computeIfAbsent(send ? List.of(e.rank(), otherRank) : List.of(otherRank, e.rank()), k -> new double[4]);
            int at = send ? 0 : 2;
            s[at] += (send ? e.durationNs() : e.linkNs()) / 1e9;
            s[at + 1] += e.bytes();
        }
        Map<List<Integer>, Double> seconds = new LinkedHashMap<>();
        Map<List<Integer>, Double> perMiB = new LinkedHashMap<>();
        sums.forEach((k, s) -> {
            double sendPerMiB = s[1] > 0 ? s[0] / (s[1] / (1 << 20)) : 0, recvPerMiB = s[3] > 0 ? s[2] / (s[3] / (1 << 20)) : 0;
            seconds.put(k, Math.max(s[0], s[2]));
            perMiB.put(k, Math.max(sendPerMiB, recvPerMiB));
        });
        perMiB.forEach((k, v) -> {
            double[] others = perMiB.entrySet().stream().filter(e -> !e.getKey().equals(k)).mapToDouble(Map.Entry::getValue).toArray();
            if (others.length == 0) return;
            double peer = median(others);
            if (peer > 0) out.add(new LinkTime(k.get(0), k.get(1), v / peer, v, peer));
        });
        return seconds;
    }

    private static List<String> suggestion(int[] blocksPerRank) {
        List<String> entries = new ArrayList<>();
        for (int r = 0; r < blocksPerRank.length; r++) entries.add(r + ": " + blocksPerRank[r]);
        return suggestion(entries);
    }

    /**
     * {@code   suggested blocks_per_rank: {0: 3, 1: 3, 2: 1, 3: 3}}, from the map's {@code entries}
     * ({@code "0: 3"}): a YAML flow map, wrapped to 80 columns (YAML reads it across the lines).
     */
    public static List<String> suggestion(List<String> entries) {
        List<String> lines = new ArrayList<>();
        StringBuilder line = new StringBuilder("  suggested blocks_per_rank: {");
        for (int i = 0; i < entries.size(); i++) {
            String e = entries.get(i) + (i + 1 < entries.size() ? "," : "}");
            if (line.length() + 1 + e.length() > 80) {
                lines.add(line.toString());
                line = new StringBuilder("   ");
            }
            line.append(line.charAt(line.length() - 1) == '{' ? "" : " ").append(e);
        }
        lines.add(line.toString());
        return lines;
    }

    /** Each rank's slowdown over all its kinds, weighted by their planned time (NaN where not measured). */
    private double[] overall(List<RankTime> ranks) {
        double[] measured = new double[rankStreaks.length], planned = new double[rankStreaks.length];
        for (RankTime t : ranks) {
            measured[t.rank()] += t.count() * t.seconds();
            planned[t.rank()] += t.count() * t.plannedSeconds();
        }
        double[] out = new double[rankStreaks.length];
        for (int r = 0; r < out.length; r++) out[r] = planned[r] > 0 ? measured[r] / planned[r] : Double.NaN;
        return out;
    }

    private static RankTime worst(List<RankTime> ranks, int rank) {
        RankTime w = null;
        for (RankTime t : ranks) if (t.rank() == rank && (w == null || t.slowdown() > w.slowdown())) w = t;
        return w;
    }

    private static int compareLinks(List<Integer> a, List<Integer> b) {
        int c = Integer.compare(a.get(0), b.get(0));
        return c != 0 ? c : Integer.compare(a.get(1), b.get(1));
    }

    private static double median(double[] xs) {
        double[] s = xs.clone();
        Arrays.sort(s);
        return StepAnalysis.Overhead.quantile(s, 0.5);
    }

    /** {@code 42 ms}, {@code 3.1 ms}, {@code 850 us}. */
    static String duration(double seconds) {
        double ms = seconds * 1e3;
        if (ms >= 9.95) return String.format(Locale.ROOT, "%.0f ms", ms);           // what rounds to 10.0 reads 10
        if (ms >= 0.9995) return String.format(Locale.ROOT, "%.1f ms", ms);
        return String.format(Locale.ROOT, "%.0f us", ms * 1e3);
    }
}

package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.PipelineFailure;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.runtime.StageStats;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.transport.DropReason;
import io.prometheus.metrics.exporter.common.PrometheusScrapeHandler;
import io.prometheus.metrics.model.registry.MultiCollector;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import io.prometheus.metrics.model.snapshots.CounterSnapshot;
import io.prometheus.metrics.model.snapshots.GaugeSnapshot;
import io.prometheus.metrics.model.snapshots.Labels;
import io.prometheus.metrics.model.snapshots.MetricSnapshot;
import io.prometheus.metrics.model.snapshots.MetricSnapshots;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.ToDoubleFunction;

/**
 * A running job's telemetry over HTTP, on the host of the Coordinator: {@code /metrics} in
 * Prometheus' text format (through the official Prometheus Java client: a {@link MultiCollector}
 * that asks every rank for its live state on each scrape) and {@code /status}, the same as JSON with
 * each rank's current action, how long it has run or waited, and its position in its row. Served by
 * {@link HttpEndpoint}: a bounded pool with read deadlines, so one stalled client blocks no one.
 */
public final class MetricsServer implements AutoCloseable {
    private HttpEndpoint server;
    private final PipelineRuntime runtime;
    private volatile Coordinator.StepReport lastStep;
    private volatile StepAnalysis lastAnalysis;
    private volatile Stragglers.View stragglers = Stragglers.View.NONE;
    /** Each rank's host and devices, as it last told them ({@code host}, {@code device} labels). */
    private final Map<Integer, Labels> places = new ConcurrentHashMap<>();

    private final List<Integer> ranks;

    private MetricsServer(PipelineRuntime runtime, List<Integer> ranks) {
        this.runtime = runtime;
        this.ranks = ranks;
    }

    /**
     * Serves {@code runtime}'s telemetry on {@code host:port}.
     *
     * @throws IOException when the address cannot be bound (the message names it)
     */
    public static MetricsServer start(PipelineRuntime runtime, String host, int port) throws IOException {
        List<Integer> all = new ArrayList<>();
        for (int r = 0; r < runtime.plan().ranks(); r++) all.add(r);
        return start(runtime, host, port, all);
    }

    /** As {@link #start(PipelineRuntime, String, int)}, reporting only {@code ranks} (a worker's own). */
    public static MetricsServer start(PipelineRuntime runtime, String host, int port, List<Integer> ranks) throws IOException {
        MetricsServer m = new MetricsServer(runtime, List.copyOf(ranks));
        PrometheusRegistry registry = new PrometheusRegistry();
        registry.register(m.new Collector());
        PrometheusScrapeHandler metrics = new PrometheusScrapeHandler(registry);
        m.server = HttpEndpoint.start(host, port, Map.of("/metrics", metrics::handleRequest, "/status", m::status));
        return m;
    }

    /** {@code http://host:port}. */
    public String url() {
        InetSocketAddress a = server.address();
        return "http://" + a.getHostString() + ":" + a.getPort();
    }

    private volatile int totalSteps;

    /** The run's length, for /status. */
    public void totalSteps(int steps) {
        totalSteps = steps;
    }

    /** The training loop reports each finished step, what it says, and the stragglers it names. */
    public void stepped(Coordinator.StepReport r, StepAnalysis a, Stragglers.View s) {
        lastStep = r;
        lastAnalysis = a;
        stragglers = s;
    }

    private volatile double validationLoss = Double.NaN;
    private volatile int validationStep;

    /** The training loop reports each validation loss it measures (training_config.eval_every), after step {@code step} (from 1). */
    public void validated(int step, double loss) {
        validationStep = step;
        validationLoss = loss;
    }

    private volatile String lastMark = null;

    /**
     * The training loop reports a resume, recovery or restart ({@link StepMetrics.Mark}) before its first step:
     * /status gives the last as {@code "mark":{"kind":..,"from_step":N}}, so {@code top} can mark it.
     */
    public void marked(StepMetrics.Mark mark) {
        lastMark = "{\"kind\":" + Json.str(mark.kind()) + ",\"from_step\":" + mark.fromStep() + "}";
    }

    /** Each reported rank's live state, null where it did not answer; indexed by position in {@link #ranks}. */
    private List<StageStats> stats() {
        List<StageStats> out = new ArrayList<>();
        for (int r : ranks) {
            try {
                StageStats s = runtime.stats(r, Duration.ofSeconds(2));
                places.put(r, Labels.of("rank", Integer.toString(r), "host", s.host(), "device", devices(s.devices())));
                out.add(s);
            } catch (PipelineFailure e) {
                out.add(null);
            }
        }
        return out;
    }

    /** {@code 0,1}: the ids of a rank's devices, as its {@code device} label has them. */
    static String devices(int[] ids) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < ids.length; i++) sb.append(i == 0 ? "" : ",").append(ids[i]);
        return sb.toString();
    }

    /**
     * Rank {@code r}'s labels: {@code rank}, and {@code host} and {@code device} as the rank last told
     * them (empty, which Prometheus reads as absent, before it has answered).
     */
    private Labels rank(int r) {
        Labels known = places.get(r);
        return known != null ? known : Labels.of("rank", Integer.toString(r), "host", "", "device", "");
    }

    private final class Collector implements MultiCollector {
        @Override
        public MetricSnapshots collect() {
            List<StageStats> stats = stats();
            Coordinator.StepReport step = lastStep;
            StepAnalysis analysis = lastAnalysis;
            List<MetricSnapshot> out = new ArrayList<>();
            out.add(perRank("ttpipe_rank_up", "1 when the rank answered this scrape", stats, s -> 1.0, true));
            out.add(perRank("ttpipe_rank_buffered_arrivals", "Tensors arrived and not yet used", stats,
                    s -> (double) s.bufferedArrivals(), false));
            out.add(perRank("ttpipe_rank_stashed_microbatches", "Microbatches whose activations the rank holds", stats,
                    s -> (double) s.stashedMicrobatches(), false));
            out.add(perRank("ttpipe_rank_queue_depth", "Compute actions on the rank's device queue", stats,
                    s -> (double) s.queuedActions(), false));
            out.add(perRank("ttpipe_rank_device_memory_bytes", "Device memory in use (largest device of the submesh)", stats,
                    s -> (double) s.memoryInUse(), false));
            out.add(perRank("ttpipe_rank_device_memory_peak_bytes", "Device memory high-water mark this step", stats,
                    s -> (double) s.memoryPeak(), false));
            out.add(perRank("ttpipe_rank_waiting_seconds", "How long the rank's row has waited on its current RECV", stats,
                    s -> s.waiting().waitingMs() / 1e3, false));
            CounterSnapshot.Builder actions = CounterSnapshot.builder().name("ttpipe_rank_actions").help("Compute actions run, by kind");
            for (int r = 0; r < stats.size(); r++) {
                StageStats st = stats.get(r);
                if (st == null) continue;
                for (ActionKind k : ActionKind.values()) {
                    if (!k.isCompute()) continue;
                    actions.dataPoint(CounterSnapshot.CounterDataPointSnapshot.builder()
                            .labels(rank(st.rank()).add("kind", k.name()))
                            .value(st.actionsByKind()[k.ordinal()]).build());
                }
            }
            out.add(actions.build());
            out.add(droppedFrames(stats));
            if (step != null && analysis != null) {
                JobPlan plan = runtime.plan();
                GaugeSnapshot.Builder busy = GaugeSnapshot.builder().name("ttpipe_rank_busy_seconds").help("Compute time of the last step");
                GaugeSnapshot.Builder bubble = GaugeSnapshot.builder().name("ttpipe_rank_bubble_ratio").help("Idle share of the last step's passes");
                for (int r = 0; r < plan.ranks(); r++) {
                    busy.dataPoint(GaugeSnapshot.GaugeDataPointSnapshot.builder().labels(rank(r)).value(analysis.busySeconds(r)).build());
                    bubble.dataPoint(GaugeSnapshot.GaugeDataPointSnapshot.builder().labels(rank(r)).value(analysis.bubble(r)).build());
                }
                out.add(busy.build());
                out.add(bubble.build());
                out.addAll(stragglerMetrics(plan.ranks()));
                out.addAll(traffic(step));
                out.add(job("ttpipe_step", "Steps finished", step.step() + 1));
                out.add(job("ttpipe_loss", "Loss of the last step", step.loss()));
                out.add(job("ttpipe_tokens_per_second", "Tokens per second of the last step", step.tokens() / Math.max(1e-9, step.seconds())));
                out.add(job("ttpipe_step_seconds", "Wall time of the last step", step.seconds()));
                out.add(job("ttpipe_learning_rate", "Learning rate of the last step", step.lr()));
                out.add(job("ttpipe_grad_norm", "Global gradient norm of the last step", step.gradNorm()));
                out.add(job("ttpipe_bubble_ratio", "Idle share of the last step over all ranks", analysis.bubble()));
            }
            if (!Double.isNaN(validationLoss)) {
                out.add(job("ttpipe_val_loss", "Validation loss at the last evaluation (training_config.eval_every)", validationLoss));
                out.add(job("ttpipe_val_loss_step", "The step after which the last validation loss was measured", validationStep));
            }
            return new MetricSnapshots(out);
        }

        /** The last step's slowdowns against the plan and the peers, and which ranks and links are stragglers ({@link Stragglers}). */
        private List<MetricSnapshot> stragglerMetrics(int ranks) {
            Stragglers.View v = stragglers;
            GaugeSnapshot.Builder slowdown = GaugeSnapshot.builder().name("ttpipe_rank_slowdown")
                    .help("The rank's time per unit of planned work in the last step over its peers' median, by kind (1: as planned)");
            for (Stragglers.RankTime t : v.ranks()) {
                slowdown.dataPoint(GaugeSnapshot.GaugeDataPointSnapshot.builder().labels(rank(t.rank()).add("kind", t.kind().name()))
                        .value(t.slowdown()).build());
            }
            GaugeSnapshot.Builder straggler = GaugeSnapshot.builder().name("ttpipe_rank_straggler")
                    .help("1 while the rank is named a straggler: slower than planned by the margin (/status has it) for "
                            + "telemetry.straggler_steps steps in a row");
            for (int r = 0; r < ranks; r++) {
                straggler.dataPoint(GaugeSnapshot.GaugeDataPointSnapshot.builder().labels(rank(r))
                        .value(v.slowRanks().containsKey(r) ? 1 : 0).build());
            }
            GaugeSnapshot.Builder link = GaugeSnapshot.builder().name("ttpipe_link_slowdown")
                    .help("The link's time per byte in the last step (the slower of its SENDs and its frames on the wire,"
                            + " first chunk to last at the receiver) over the other links' median");
            GaugeSnapshot.Builder slowLink = GaugeSnapshot.builder().name("ttpipe_link_straggler")
                    .help("1 while the link is named a straggler");
            for (Stragglers.LinkTime t : v.links()) {
                Labels l = Labels.of("from", Integer.toString(t.from()), "to", Integer.toString(t.to()));
                link.dataPoint(GaugeSnapshot.GaugeDataPointSnapshot.builder().labels(l).value(t.slowdown()).build());
                slowLink.dataPoint(GaugeSnapshot.GaugeDataPointSnapshot.builder().labels(l)
                        .value(v.slowLinks().containsKey(List.of(t.from(), t.to())) ? 1 : 0).build());
            }
            return List.of(slowdown.build(), straggler.build(), link.build(), slowLink.build());
        }

        /** Every reason for every rank that answered, zeros included, so that a rate over it is defined from the start. */
        private CounterSnapshot droppedFrames(List<StageStats> stats) {
            CounterSnapshot.Builder b = CounterSnapshot.builder().name("ttpipe_rank_frames_dropped")
                    .help("Frames addressed to the rank that its transport dropped, by reason (foreign_job: another job's id;"
                            + " wrong_peer: another receiver or sender than its stream; corrupt: checksum, header or chunks;"
                            + " no_room: no device memory for it)");
            for (StageStats st : stats) {
                if (st == null) continue;
                for (DropReason reason : DropReason.values()) {
                    b.dataPoint(CounterSnapshot.CounterDataPointSnapshot.builder()
                            .labels(rank(st.rank()).add("reason", reason.label()))
                            .value(st.droppedFrames().count(reason)).build());
                }
            }
            return b.build();
        }

        private List<MetricSnapshot> traffic(Coordinator.StepReport step) {
            Traffic t = Traffic.of(step.events(), runtime.plan().schedule());
            GaugeSnapshot.Builder sent = GaugeSnapshot.builder().name("ttpipe_rank_sent_bytes").help("Bytes sent to a peer in the last step");
            GaugeSnapshot.Builder received = GaugeSnapshot.builder().name("ttpipe_rank_received_bytes")
                    .help("Bytes received from a peer in the last step");
            for (int from = 0; from < t.bytes().length; from++) {
                for (int to = 0; to < t.bytes().length; to++) {
                    double b = t.bytes()[from][to];
                    if (b <= 0) continue;
                    sent.dataPoint(GaugeSnapshot.GaugeDataPointSnapshot.builder()
                            .labels(rank(from).add("peer", Integer.toString(to))).value(b).build());
                    received.dataPoint(GaugeSnapshot.GaugeDataPointSnapshot.builder()
                            .labels(rank(to).add("peer", Integer.toString(from))).value(b).build());
                }
            }
            GaugeSnapshot.Builder wait = GaugeSnapshot.builder().name("ttpipe_rank_recv_wait_seconds")
                    .help("Time the rank waited on receives in the last step");
            for (int r = 0; r < t.recvWaitSeconds().length; r++) {
                wait.dataPoint(GaugeSnapshot.GaugeDataPointSnapshot.builder().labels(rank(r)).value(t.recvWaitSeconds()[r]).build());
            }
            return List.of(sent.build(), received.build(), wait.build());
        }
    }

    private static GaugeSnapshot job(String name, String help, double value) {
        return GaugeSnapshot.builder().name(name).help(help).dataPoint(GaugeSnapshot.GaugeDataPointSnapshot.builder().value(value).build())
                .build();
    }

    private GaugeSnapshot perRank(String name, String help, List<StageStats> stats,
                                  ToDoubleFunction<StageStats> f, boolean withDown) {
        GaugeSnapshot.Builder b = GaugeSnapshot.builder().name(name).help(help);
        for (int r = 0; r < stats.size(); r++) {
            StageStats s = stats.get(r);
            if (s == null && !withDown) continue;
            b.dataPoint(GaugeSnapshot.GaugeDataPointSnapshot.builder().labels(rank(ranks.get(r)))
                    .value(s == null ? 0 : f.applyAsDouble(s)).build());
        }
        return b.build();
    }

    private void status(HttpEndpoint.Exchange ex) throws IOException {
        List<StageStats> stats = stats();
        Coordinator.StepReport step = lastStep;
        StepAnalysis a = lastAnalysis;
        Stragglers.View v = stragglers;
        StringBuilder sb = new StringBuilder("{\"step\":").append(step == null ? 0 : step.step() + 1)
                .append(",\"steps\":").append(totalSteps)
                .append(",\"loss\":").append(step == null ? "null" : Json.num(step.loss()))
                .append(",\"val_loss\":").append(Json.num(validationLoss)).append(",\"val_step\":").append(validationStep)
                .append(",\"mark\":").append(lastMark == null ? "null" : lastMark)
                .append(",\"tokens_per_second\":").append(step == null ? "null" : Json.num(step.tokens() / Math.max(1e-9, step.seconds())))
                .append(",\"step_seconds\":").append(step == null ? "null" : Json.num(step.seconds()))
                .append(",\"bubble\":").append(a == null ? "null" : Json.num(a.bubble()))
                .append(",\"predicted_bubble\":").append(a == null || a.predicted() == null ? "null" : Json.num(a.predicted().bubbleFraction()))
                .append(",\"stragglers\":").append(stragglersJson(v))
                .append(",\"ranks\":[");
        for (int r = 0; r < stats.size(); r++) {
            StageStats s = stats.get(r);
            sb.append(r == 0 ? "" : ",").append("{\"rank\":").append(ranks.get(r));
            if (s == null) {
                sb.append(",\"up\":false}");
                continue;
            }
            StageStats.Waiting w = s.waiting();
            sb.append(",\"up\":true,\"host\":").append(Json.str(s.host())).append(",\"devices\":[").append(devices(s.devices()))
                    .append("],\"slowdown\":{");
            String sep = "";
            for (Stragglers.RankTime t : v.ranks()) {
                if (t.rank() != ranks.get(r)) continue;
                sb.append(sep).append(Json.str(t.kind().name())).append(':').append(Json.num(t.slowdown()));
                sep = ",";
            }
            sb.append("},\"running\":").append(Json.str(w.running())).append(",\"running_ms\":").append(w.runningMs())
                    .append(",\"waiting_for\":").append(Json.str(w.waitingFor())).append(",\"waiting_from_rank\":").append(w.waitingFromRank())
                    .append(",\"waiting_ms\":").append(w.waitingMs()).append(",\"last_finished\":").append(Json.str(w.lastFinished()))
                    .append(",\"since_finished_ms\":").append(w.sinceFinishedMs()).append(",\"row_position\":").append(s.rowPosition())
                    .append(",\"row_length\":").append(s.rowLength()).append(",\"queue_depth\":").append(s.queuedActions())
                    .append(",\"buffered_arrivals\":").append(s.bufferedArrivals()).append(",\"stashed\":").append(s.stashedMicrobatches())
                    .append(",\"memory_bytes\":").append(s.memoryInUse()).append(",\"actions_run\":").append(s.actionsRun())
                    .append(",\"bubble\":").append(a == null ? "null" : Json.num(a.bubble(ranks.get(r))))
                    .append(",\"frames_dropped\":{");
            for (DropReason reason : DropReason.values()) {
                sb.append(reason.ordinal() == 0 ? "" : ",").append(Json.str(reason.label())).append(':')
                        .append(s.droppedFrames().count(reason));
            }
            sb.append("}}");
        }
        ex.send(200, "application/json; charset=utf-8", sb.append("]}\n").toString().getBytes(StandardCharsets.UTF_8));
    }

    /**
     * {@code {"margin": 1.5, "ranks": [...], "links": [...], "blocks_per_rank": {...}}}: each straggler with its last
     * step's figures, the step it was named at and the line that named it; the suggested split or null.
     */
    private String stragglersJson(Stragglers.View v) {
        StringBuilder sb = new StringBuilder("{\"margin\":").append(Json.num(v.margin())).append(",\"ranks\":[");
        String sep = "";
        for (Map.Entry<Integer, Integer> e : v.slowRanks().entrySet()) {
            Stragglers.RankTime t = v.worst(e.getKey());
            if (t == null) continue;
            sb.append(sep).append("{\"rank\":").append(t.rank()).append(",\"kind\":").append(Json.str(t.kind().name()))
                    .append(",\"slowdown\":").append(Json.num(t.slowdown())).append(",\"ms\":").append(Json.num(t.seconds() * 1e3))
                    .append(",\"planned_ms\":").append(Json.num(t.plannedSeconds() * 1e3)).append(",\"since_step\":").append(e.getValue())
                    .append(",\"text\":").append(Json.str(t.describe())).append('}');
            sep = ",";
        }
        sb.append("],\"links\":[");
        sep = "";
        for (Map.Entry<List<Integer>, Integer> e : v.slowLinks().entrySet()) {
            Stragglers.LinkTime t = v.link(e.getKey().get(0), e.getKey().get(1));
            if (t == null) continue;
            sb.append(sep).append("{\"from\":").append(t.from()).append(",\"to\":").append(t.to())
                    .append(",\"slowdown\":").append(Json.num(t.slowdown())).append(",\"ms_per_mib\":")
                    .append(Json.num(t.secondsPerMiB() * 1e3)).append(",\"since_step\":").append(e.getValue())
                    .append(",\"text\":").append(Json.str(t.describe())).append('}');
            sep = ",";
        }
        sb.append("],\"blocks_per_rank\":");
        if (v.blocksPerRank() == null) return sb.append("null}").toString();
        sb.append('{');
        for (int r = 0; r < v.blocksPerRank().length; r++) {
            sb.append(r == 0 ? "" : ",").append(Json.str(Integer.toString(r))).append(':').append(v.blocksPerRank()[r]);
        }
        return sb.append("}}").toString();
    }

    @Override
    public void close() {
        server.close();
    }
}

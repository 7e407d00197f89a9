package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.ConfigWriter;
import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.telemetry.ActionEvent;
import dev.ttpipe.actors.telemetry.ChromeTrace;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.telemetry.StepAnalysis;
import dev.ttpipe.schedules.SimResult;
import dev.ttpipe.stages.Evaluation;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.StageSlice;
import dev.ttpipe.stages.data.ArithmeticCorpus;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * A training job run by {@code ttpipe train}: the pipeline runtime stepping through the batches,
 * a progress line, and a run directory with the resolved config, the vocabulary,
 * {@code metrics.jsonl} (one line per step) and {@code trace.json} (the measured timeline).
 */
final class TrainingRun {
    /** Steps whose timelines go into trace.json: the first ones and the last (keeps the file small). */
    static final int TRACED_STEPS = 10;

    private final TtpipeConfig cfg;
    private final RunData data;
    private final JobPlan plan;
    private final Path runDir;
    private final PrintStream out;

    TrainingRun(TtpipeConfig cfg, RunData data, JobPlan plan, Path runDir, PrintStream out) {
        this.cfg = cfg;
        this.data = data;
        this.plan = plan;
        this.runDir = runDir;
        this.out = out;
    }

    static Path newRunDir(TtpipeConfig cfg, Path explicit) throws IOException {
        Path dir = explicit;
        if (dir == null) {
            String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
            String name = cfg.training.projectName.replaceAll("[^A-Za-z0-9._-]", "_");
            dir = Path.of(cfg.training.runsDir, stamp + "-" + name);
            for (int i = 2; Files.exists(dir); i++) dir = Path.of(cfg.training.runsDir, stamp + "-" + name + "-" + i);
        }
        Files.createDirectories(dir);
        return dir;
    }

    void run() throws IOException {
        try (PipelineRuntime runtime = PipelineRuntime.start(plan)) {
            run(runtime);
        }
    }

    /** Trains with a runtime started elsewhere (rank 0 of a multi-process job); does not close it. */
    void run(PipelineRuntime runtime) throws IOException {
        int steps = cfg.training.maxSteps;
        out.println(describe());
        out.println("run directory: " + runDir);
        Files.writeString(runDir.resolve("config.yaml"), ConfigWriter.toYaml(cfg), StandardCharsets.UTF_8);
        data.dataset().tokenizer().save(runDir.resolve("vocab.txt"));
        List<ActionEvent> traced = new ArrayList<>();
        long traceOrigin = 0;
        StepAnalysis lastAnalysis = null;
        Coordinator.StepReport last = null;
        double firstLoss = Double.NaN;
        try (BufferedWriter metrics = Files.newBufferedWriter(runDir.resolve("metrics.jsonl"), StandardCharsets.UTF_8)) {
            Progress progress = new Progress(out, steps);
            long tokensTotal = 0;
            double secondsTotal = 0;
            for (int step = 0; step < steps; step++) {
                Coordinator.StepReport r = runtime.step(step, batches(step));
                long passWall = 0;
                for (int i = 0; i < r.passStartNs().length; i++) passWall += r.passEndNs()[i] - r.passStartNs()[i];
                StepAnalysis a = new StepAnalysis(plan.schedule(), r.events(), passWall);
                if (step == 0) firstLoss = r.loss();
                if (step < TRACED_STEPS || step == steps - 1) {
                    if (traced.isEmpty()) traceOrigin = r.startNs();
                    traced.addAll(r.events());
                }
                Double val = null;
                if (cfg.training.evalEvery > 0 && (step + 1) % cfg.training.evalEvery == 0 && step + 1 < steps && allLocal(runtime)) {
                    val = validationLoss(runtime);
                }
                metrics.write(metricsLine(r, a, val));
                metrics.newLine();
                metrics.flush();
                if (step > 0) {                 // the first step includes warm-up (JIT, allocations)
                    tokensTotal += r.tokens();
                    secondsTotal += r.seconds();
                }
                double tps = r.tokens() / Math.max(1e-9, r.seconds());
                progress.update(step + 1, String.format(Locale.ROOT, "loss %s | %s tok/s | bubble %.0f%%%s",
                        lossText(r.loss()), human(tps), 100 * a.bubble(),
                        a.predicted() == null ? "" : String.format(Locale.ROOT, " (sim %.0f%%)", 100 * a.predicted().bubbleFraction())));
                last = r;
                lastAnalysis = a;
            }
            ChromeTrace.write(runDir.resolve("trace.json"), plan.schedule(), traced, traceOrigin);
            out.println();
            out.printf(Locale.ROOT, "%s over %d steps; %s tokens/s (steps 2..%d)%n",
                    Double.isNaN(last.loss()) ? "no loss values (the sim backend models time only)"
                            : "loss " + lossText(firstLoss) + " -> " + lossText(last.loss()), steps,
                    secondsTotal > 0 ? human(tokensTotal / secondsTotal) : "n/a", steps);
            printStageTable(lastAnalysis, last);
            if ("sim".equals(plan.backend())) {
                out.println("(sim backend: no values, so no validation loss or samples)");
            } else if (!allLocal(runtime)) {
                out.println("(multi-process job: validation loss and samples need every stage in one process; run `ttpipe train` with"
                        + " the same config to see them)");
            } else {
                out.printf(Locale.ROOT, "validation loss: %s nats/char%n", lossText(validationLoss(runtime)));
                printSamples(runtime);
            }
        }
        out.println("wrote " + runDir.resolve("metrics.jsonl") + ", " + runDir.resolve("trace.json")
                + " (open in https://ui.perfetto.dev)");
    }

    private static boolean allLocal(PipelineRuntime runtime) {
        return runtime.deployment() == null;
    }

    String describe() {
        StringBuilder sb = new StringBuilder();
        sb.append(String.format(Locale.ROOT, "ttpipe train: %s %d blocks x %d dim, %d heads, vocab %d | %d stages on %d ranks, %s%s, %d microbatches of %d x %d tokens | %s backend, mesh %s per rank%s",
                plan.model().type().name().toLowerCase(Locale.ROOT), plan.model().numBlocks(), plan.model().embeddingDim(),
                plan.model().numHeads(), plan.model().vocabSize(), plan.stages(), plan.ranks(), plan.schedule().name(),
                plan.readyFirst() ? " (ready-first)" : "", plan.microbatches(), plan.microbatchSize(), plan.seqLen(),
                plan.backend(), plan.rankMesh(), parallelText()));
        sb.append("\ndata: ").append(data.description());
        StringBuilder split = new StringBuilder();
        for (StageSlice s : plan.slices()) split.append(split.length() == 0 ? "" : ", ").append(s.blocks());
        sb.append("\nblocks per stage: [").append(split).append("]");
        return sb.toString();
    }

    private String parallelText() {
        var p = plan.parallelism();
        if (!p.ddp() && !p.tp()) return "";
        return " (" + (p.ddp() ? "DDP " + p.ddpSize() : "") + (p.ddp() && p.tp() ? " x " : "") + (p.tp() ? "TP " + p.tpSize() : "") + ")";
    }

    List<Batch> batches(int step) {
        List<Batch> out = new ArrayList<>();
        for (int a = 0; a < plan.accumulation(); a++) {
            out.add(data.dataset().trainBatch(plan.seed(), step * plan.accumulation() + a, plan.batchSize(), plan.seqLen()));
        }
        return out;
    }

    private String metricsLine(Coordinator.StepReport r, StepAnalysis a, Double val) {
        StringBuilder sb = new StringBuilder("{");
        sb.append("\"step\":").append(r.step());
        sb.append(",\"loss\":").append(Json.num(r.loss()));
        sb.append(",\"grad_norm\":").append(Json.num(r.gradNorm()));
        sb.append(",\"lr\":").append(Json.num(r.lr()));
        sb.append(",\"clip\":").append(Json.num(r.clip()));
        sb.append(",\"tokens\":").append(r.tokens());
        sb.append(",\"seconds\":").append(Json.num(r.seconds()));
        sb.append(",\"tokens_per_second\":").append(Json.num(r.tokens() / Math.max(1e-9, r.seconds())));
        sb.append(",\"bubble\":").append(Json.num(a.bubble()));
        sb.append(",\"bubble_per_rank\":").append(Json.nums(a.bubblePerRank()));
        SimResult p = a.predicted();
        if (p != null) {
            sb.append(",\"predicted_bubble\":").append(Json.num(p.bubbleFraction()));
            sb.append(",\"predicted_pass_seconds\":").append(Json.num(p.makespan()));
        }
        sb.append(",\"pass_seconds\":").append(Json.num(a.wallSeconds() / r.passStartNs().length));
        sb.append(",\"memory_peak_bytes\":").append(Json.nums(r.memoryPeak()));
        if (a.dispatchSamples() > 0) sb.append(",\"dispatch_overhead_us\":").append(Json.num(a.dispatchMedianUs()));
        if (val != null) sb.append(",\"val_loss\":").append(Json.num(val));
        return sb.append('}').toString();
    }

    private void printStageTable(StepAnalysis a, Coordinator.StepReport r) {
        SimResult p = a.predicted();
        out.printf(Locale.ROOT, "last step: %.3f s; passes %.3f s wall, simulator predicts %s for the measured costs%n",
                r.seconds(), a.wallSeconds(), p == null ? "n/a" : String.format(Locale.ROOT, "%.3f s", p.makespan() * r.passStartNs().length));
        if (a.dispatchSamples() > 0) {
            out.printf(Locale.ROOT, "runtime overhead between back-to-back actions: median %.0f us, mean %.0f us (%d pairs)%n",
                    a.dispatchMedianUs(), a.dispatchMeanUs(), a.dispatchSamples());
        }
        out.printf("%-5s %-10s %10s %10s %12s %12s%n", "rank", "stages", "busy", "bubble", "sim bubble", "peak memory");
        for (int rank = 0; rank < plan.ranks(); rank++) {
            StringBuilder st = new StringBuilder();
            for (StageSlice s : plan.slicesOfRank(rank)) st.append(st.length() == 0 ? "" : ",").append(s.index());
            out.printf(Locale.ROOT, "%-5d %-10s %9.3fs %9.1f%% %11s %12s%n", rank, st, a.busySeconds(rank), 100 * a.bubble(rank),
                    p == null ? "n/a" : String.format(Locale.ROOT, "%.1f%%", 100 * p.bubbleFraction(rank)),
                    Sizes.format(r.memoryPeak()[rank]));
        }
        out.printf(Locale.ROOT, "all   %-10s %10s %9.1f%% %11s%n", "", "", 100 * a.bubble(),
                p == null ? "n/a" : String.format(Locale.ROOT, "%.1f%%", 100 * p.bubbleFraction()));
    }

    /** All stages in order, gathered from their ranks (the pipeline is idle between steps). */
    static List<Stage> stagesInOrder(PipelineRuntime runtime) {
        Stage[] ordered = new Stage[runtime.plan().stages()];
        for (int r = 0; r < runtime.plan().ranks(); r++) {
            List<Stage> local = runtime.onDevice(r, stages -> stages);
            for (Stage s : local) ordered[s.index()] = s;
        }
        return List.of(ordered);
    }

    private double validationLoss(PipelineRuntime runtime) {
        TextDataset d = data.dataset();
        if (d.validationTokens() < plan.seqLen() + 2) return Double.NaN;
        List<Batch> val = new ArrayList<>();
        int b = Math.max(1, Math.min(plan.batchSize(), 16));
        if (plan.parallelism().ddp()) b = Math.max(plan.parallelism().ddpSize(), b - b % plan.parallelism().ddpSize());
        for (int i = 0; i < cfg.training.evalBatches; i++) val.add(d.validationBatch(plan.seed(), i, b, plan.seqLen()));
        List<Stage> stages = stagesInOrder(runtime);
        return runtime.onDevice(0, ignored -> Evaluation.meanLoss(stages, val));
    }

    private void printSamples(PipelineRuntime runtime) {
        List<Stage> stages = stagesInOrder(runtime);
        var tok = data.dataset().tokenizer();
        double temperature = cfg.eval.temperature;
        out.println("samples (" + (temperature > 0 ? "temperature " + temperature : "greedy") + "):");
        if (data.arithmetic()) {
            java.util.Random rng = new java.util.Random(cfg.training.seed + 1);
            int correct = 0, n = 8;
            for (int i = 0; i < n; i++) {
                int x = rng.nextInt(RunData.ARITHMETIC_MAX + 1), y = rng.nextInt(RunData.ARITHMETIC_MAX + 1);
                String prompt = "\n" + x + "+" + y + "=";
                int[] ids = runtime.onDevice(0, ignored -> Evaluation.generate(stages, tok.encode(prompt), 4, temperature,
                        cfg.eval.topK, cfg.training.seed));
                String text = tok.decode(ids).substring(1);
                int nl = text.indexOf('\n');
                String line = nl < 0 ? text : text.substring(0, nl);
                boolean ok = ArithmeticCorpus.isCorrect(line);
                if (ok) correct++;
                out.printf("  %-10s %s%n", line, ok ? "right" : "wrong (" + (x + y) + ")");
            }
            out.printf("%d of %d sums right%n", correct, n);
        } else {
            String prompt = cfg.eval.prompt != null && tok.canEncode(cfg.eval.prompt) ? cfg.eval.prompt
                    : tok.decode(data.dataset().validationBatch(plan.seed(), 0, 1, Math.min(16, plan.seqLen())).inputs());
            int n = Math.max(1, cfg.eval.sampleTokens);
            int[] ids = runtime.onDevice(0, ignored -> Evaluation.generate(stages, tok.encode(prompt), n, temperature,
                    cfg.eval.topK, cfg.training.seed));
            out.println("---");
            out.println(tok.decode(ids));
            out.println("---");
        }
    }

    static String lossText(double loss) {
        return Double.isNaN(loss) ? "n/a" : String.format(Locale.ROOT, "%.4f", loss);
    }

    static String human(double v) {
        if (v >= 1e6) return String.format(Locale.ROOT, "%.2fM", v / 1e6);
        if (v >= 1e3) return String.format(Locale.ROOT, "%.1fk", v / 1e3);
        return String.format(Locale.ROOT, "%.0f", v);
    }
}

package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.schedules.Schedule;

import java.nio.file.Path;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * One line of {@code metrics.jsonl}: a finished step's numbers as a JSON object, {@code step} counted
 * from 1 (as the progress line counts) and {@code time} the wall-clock time it was written (ISO-8601, UTC).
 */
public final class StepMetrics {
    private StepMetrics() {
    }

    private static double[] ms(double[] seconds) {
        double[] out = new double[seconds.length];
        for (int k = 0; k < out.length; k++) out[k] = seconds[k] * 1e3;
        return out;
    }

    /**
     * What came before a step other than the step before it, written into that step's line as
     * {@code "mark":{"kind":..,"from_step":N,"checkpoint":..}}: a {@code resume} from a checkpoint, a
     * {@code recovery} (a failed step rolled back to a checkpoint, or to the start: from_step 0), a {@code restart}
     * from the beginning into a run directory that already has metrics. The steps after a mark supersede any line
     * of the same step written before it ({@code ttpipe report} keeps the last).
     *
     * @param checkpoint null: none (the initial weights)
     */
    public record Mark(String kind, int fromStep, Path checkpoint) {
        String json() {
            return "{\"kind\":" + Json.str(kind) + ",\"from_step\":" + fromStep + ",\"checkpoint\":"
                    + (checkpoint == null ? "null" : Json.str(checkpoint.toString())) + "}";
        }
    }

    /**
     * The step's scalars for TensorBoard, tagged {@code train/...} ({@code val/loss} when {@code val} is not null),
     * the same numbers as its {@code metrics.jsonl} line.
     */
    public static Map<String, Double> scalars(Coordinator.StepReport r, StepAnalysis a, Double val) {
        Map<String, Double> out = new LinkedHashMap<>();
        out.put("train/loss", r.loss());
        out.put("train/grad_norm", r.gradNorm());
        out.put("train/lr", r.lr());
        out.put("train/tokens_per_second", r.tokens() / Math.max(1e-9, r.seconds()));
        out.put("train/step_seconds", r.seconds());
        out.put("train/bubble", a.bubble());
        if (val != null) out.put("val/loss", val);
        return out;
    }

    /**
     * {@code val} is the validation loss when it was measured after this step, else null; {@code schedule} the job's;
     * {@code mark} what came before this step (null: the step before it).
     */
    public static String jsonLine(Coordinator.StepReport r, StepAnalysis a, Double val, Schedule schedule, Mark mark) {
        StringBuilder sb = new StringBuilder("{");
        sb.append("\"step\":").append(r.step() + 1);                   // counted from 1, as the progress line
        sb.append(",\"time\":").append(Json.str(Instant.now().toString()));
        if (mark != null) sb.append(",\"mark\":").append(mark.json());
        sb.append(",\"loss\":").append(Json.num(r.loss()));
        sb.append(",\"grad_norm\":").append(Json.num(r.gradNorm()));
        if (!r.applied()) sb.append(",\"not_applied\":").append(Json.str(r.nonFinite()));
        sb.append(",\"lr\":").append(Json.num(r.lr()));
        sb.append(",\"clip\":").append(Json.num(r.clip()));
        sb.append(",\"tokens\":").append(r.tokens());
        sb.append(",\"seconds\":").append(Json.num(r.seconds()));
        sb.append(",\"tokens_per_second\":").append(Json.num(r.tokens() / Math.max(1e-9, r.seconds())));
        sb.append(",\"bubble\":").append(Json.num(a.bubble()));
        sb.append(",\"bubble_per_rank\":").append(Json.nums(a.bubblePerRank()));
        double[] busy = new double[a.ranks()];
        for (int k = 0; k < busy.length; k++) busy[k] = a.busySeconds(k);
        sb.append(",\"busy_seconds_per_rank\":").append(Json.nums(busy));
        StepAnalysis.Prediction p = a.predicted();
        if (p != null) {
            sb.append(",\"predicted_bubble\":").append(Json.num(p.bubbleFraction()));
            sb.append(",\"predicted_pass_seconds\":").append(Json.num(p.makespan()));
            double[] pb = new double[a.ranks()];
            for (int k = 0; k < pb.length; k++) pb[k] = p.bubbleFraction(k);
            sb.append(",\"predicted_bubble_per_rank\":").append(Json.nums(pb));
        }
        Traffic t = Traffic.of(r.events(), schedule);
        sb.append(",\"sent_bytes_per_rank\":").append(Json.nums(t.sent()));
        sb.append(",\"received_bytes_per_rank\":").append(Json.nums(t.received()));
        sb.append(",\"recv_wait_seconds_per_rank\":").append(Json.nums(t.recvWaitSeconds()));
        sb.append(",\"pass_seconds\":").append(Json.num(a.wallSeconds() / r.passStartNs().length));
        sb.append(",\"memory_peak_bytes\":").append(Json.nums(r.memoryPeak()));
        StepAnalysis.Overhead o = a.overhead();
        if (o.pairs() > 0) {
            sb.append(",\"overhead_us\":{\"median\":").append(Json.num(o.medianUs())).append(",\"p90\":").append(Json.num(o.p90Us()))
                    .append(",\"p99\":").append(Json.num(o.p99Us())).append(",\"pairs\":").append(o.pairs())
                    .append(",\"waited_for_data\":").append(o.waitedForData()).append('}');
        }
        StepAnalysis.StageCosts c = a.costs();
        sb.append(",\"stage_ms\":{\"f\":").append(Json.nums(ms(c.f()))).append(",\"b\":").append(Json.nums(ms(c.b())))
                .append(",\"i\":").append(Json.nums(ms(c.i()))).append(",\"w\":").append(Json.nums(ms(c.w())))
                .append(",\"comm\":").append(Json.num(c.comm() * 1e3)).append('}');
        if (val != null) sb.append(",\"val_loss\":").append(Json.num(val));
        return sb.append('}').toString();
    }
}

package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.telemetry.ActionEvent;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.stages.Optimizer;
import dev.ttpipe.stages.data.Batch;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.javadsl.AbstractBehavior;
import org.apache.pekko.actor.typed.javadsl.ActorContext;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.javadsl.Receive;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * One per job. Runs the step protocol: for each forward pass of the step it splits the batch into
 * microbatches, sends the inputs to the first stage's rank and the targets to the last stage's,
 * and waits for every rank to finish its row; then every rank all-reduces its gradients and reports
 * its gradient sum of squares; the Coordinator answers with the clip factor and learning rate;
 * every rank steps its optimizer; the step ends with the loss, norms and every rank's timings.
 * A rank that fails ends the step with an error naming the rank, stage, action and microbatch.
 */
public final class Coordinator extends AbstractBehavior<Coordinator.Command> {

    public sealed interface Command {
    }

    /** Runs one optimizer step over {@code batches} (one per accumulation pass). */
    public record RunStep(int step, List<Batch> batches, ActorRef<StepOutcome> replyTo) implements Command {
    }

    public record PassDone(int rank, int pass, List<ActionEvent> events, Map<Integer, LossOutput> losses) implements Command, ClusterMessage {
    }

    public record GradReport(int rank, double sumSquares, ActionEvent event) implements Command, ClusterMessage {
    }

    public record OptimizerDone(int rank, ActionEvent event, long memoryPeak) implements Command, ClusterMessage {
    }

    public record RankFailed(int rank, String message) implements Command, ClusterMessage {
    }

    /** What a step ended with. */
    public sealed interface StepOutcome {
    }

    /**
     * A finished step. {@code passStartNs} holds each pass's start; {@code events} every rank's
     * measured actions; {@code memoryPeak} each rank's device high-water mark during the step.
     */
    public record StepReport(int step, double loss, double gradNorm, double lr, double clip, long tokens,
                             long startNs, long endNs, long[] passStartNs, long[] passEndNs, List<ActionEvent> events,
                             long[] memoryPeak) implements StepOutcome {
        public double seconds() {
            return (endNs - startNs) / 1e9;
        }
    }

    public record StepFailed(int step, String message) implements StepOutcome {
    }

    public static Behavior<Command> create(JobPlan plan, List<ActorRef<StageActor.Command>> ranks) {
        return Behaviors.setup(ctx -> new Coordinator(ctx, plan, ranks));
    }

    private final JobPlan plan;
    private final List<ActorRef<StageActor.Command>> ranks;

    private RunStep current;
    private boolean failed;
    private int passIndex;
    private int waiting;
    private long counted;
    private double lossSum;
    private double sumSquares;
    private long stepStart;
    private long[] passStart, passEnd;
    private final List<ActionEvent> events = new ArrayList<>();
    private final TreeMap<Integer, LossOutput> passLosses = new TreeMap<>();
    private long[] memoryPeak;
    private double clip;
    private double lr;

    private Coordinator(ActorContext<Command> ctx, JobPlan plan, List<ActorRef<StageActor.Command>> ranks) {
        super(ctx);
        this.plan = plan;
        this.ranks = ranks;
    }

    @Override
    public Receive<Command> createReceive() {
        return newReceiveBuilder()
                .onMessage(RunStep.class, this::onRunStep)
                .onMessage(PassDone.class, this::onPassDone)
                .onMessage(GradReport.class, this::onGradReport)
                .onMessage(OptimizerDone.class, this::onOptimizerDone)
                .onMessage(RankFailed.class, this::onRankFailed)
                .build();
    }

    private Behavior<Command> onRunStep(RunStep m) {
        if (current != null) {
            m.replyTo().tell(new StepFailed(m.step(), "step " + current.step() + " is still running"));
            return this;
        }
        current = m;
        failed = false;
        passIndex = 0;
        lossSum = 0;
        sumSquares = 0;
        events.clear();
        counted = 0;
        for (Batch b : m.batches()) counted += b.countedTargets(-100);
        memoryPeak = new long[ranks.size()];
        passStart = new long[m.batches().size()];
        passEnd = new long[m.batches().size()];
        stepStart = System.nanoTime();
        beginPass();
        return this;
    }

    private void beginPass() {
        RunStep m = current;
        Batch batch = m.batches().get(passIndex);
        int mbs = plan.microbatches(), b = plan.microbatchSize();
        int[][] inputs = new int[mbs][];
        int[][] targets = new int[mbs][];
        for (int i = 0; i < mbs; i++) {
            Batch mb = batch.slice(i * b, b);
            inputs[i] = mb.inputs();
            targets[i] = mb.targets();
        }
        MicrobatchData data = new MicrobatchData(b, batch.seqLen(), inputs, targets, (float) (1.0 / Math.max(1, counted)));
        int pass = m.step() * m.batches().size() + passIndex;
        waiting = ranks.size();
        passLosses.clear();
        passStart[passIndex] = System.nanoTime();
        for (int r = 0; r < ranks.size(); r++) {
            boolean needsData = r == plan.firstStageRank() || r == plan.lastStageRank();
            ranks.get(r).tell(new StageActor.BeginPass(m.step(), pass, needsData ? data : null, getContext().getSelf()));
        }
    }

    private Behavior<Command> onPassDone(PassDone m) {
        if (current == null || failed) return this;
        events.addAll(m.events());
        passLosses.putAll(m.losses());
        if (--waiting > 0) return this;
        passEnd[passIndex] = System.nanoTime();
        for (LossOutput l : passLosses.values()) lossSum += l.sum();   // microbatch order
        passIndex++;
        if (passIndex < current.batches().size()) {
            beginPass();
            return this;
        }
        waiting = ranks.size();
        for (ActorRef<StageActor.Command> r : ranks) r.tell(new StageActor.FinishStep(current.step(), getContext().getSelf()));
        return this;
    }

    private Behavior<Command> onGradReport(GradReport m) {
        if (current == null || failed) return this;
        sumSquares += m.sumSquares();
        events.add(m.event());
        if (--waiting > 0) return this;
        clip = plan.clipMaxNorm() > 0 && Double.isFinite(sumSquares) ? Optimizer.clipFactor(sumSquares, plan.clipMaxNorm()) : 1.0;
        lr = plan.lr().at(current.step());
        waiting = ranks.size();
        for (ActorRef<StageActor.Command> r : ranks) {
            r.tell(new StageActor.ApplyOptimizer(current.step(), lr, clip, getContext().getSelf()));
        }
        return this;
    }

    private Behavior<Command> onOptimizerDone(OptimizerDone m) {
        if (current == null || failed) return this;
        events.add(m.event());
        memoryPeak[m.rank()] = m.memoryPeak();
        if (--waiting > 0) return this;
        RunStep done = current;
        current = null;
        long tokens = (long) plan.batchSize() * plan.seqLen() * done.batches().size();
        done.replyTo().tell(new StepReport(done.step(), lossSum / Math.max(1, counted), Math.sqrt(sumSquares), lr, clip,
                tokens, stepStart, System.nanoTime(), passStart, passEnd, List.copyOf(events), memoryPeak));
        return this;
    }

    private Behavior<Command> onRankFailed(RankFailed m) {
        if (current == null) {
            getContext().getLog().warn("between steps: {}", m.message());
            return this;
        }
        if (!failed) {
            failed = true;
            RunStep step = current;
            current = null;
            step.replyTo().tell(new StepFailed(step.step(), m.message()));
        }
        return this;
    }

    /** A throwable as a one-line reason. */
    static String describe(Throwable t) {
        Throwable root = t;
        while (root.getCause() != null && root.getCause() != root && root.getMessage() == null) root = root.getCause();
        String msg = root.getMessage();
        return msg == null ? root.getClass().getSimpleName() : msg;
    }
}

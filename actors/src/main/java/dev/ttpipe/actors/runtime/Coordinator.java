package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.cluster.ClusterMessage;
import dev.ttpipe.device.LossOutput;
import dev.ttpipe.stages.Optimizer;
import dev.ttpipe.stages.Sampler;
import dev.ttpipe.stages.data.Batch;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.javadsl.ActorContext;
import org.apache.pekko.actor.typed.javadsl.BehaviorBuilder;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.javadsl.StashBuffer;
import org.apache.pekko.pattern.StatusReply;

import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.IntConsumer;

/**
 * One per job. A small state machine over the step protocol:
 * <pre>
 *   joining --every rank joined--> idle --RunStep--> passes --last pass--> gradients --> optimizer --> idle
 *                                   ^                  \___________ a rank failed: the step fails ________/
 *                                   |
 *                                   +--RunEval / RunGenerate--> evaluating / generating --last pass--> idle
 *                                   +--CheckLinks--> checking links --the check answered--> idle
 * </pre>
 * <ul>
 *   <li><b>joining</b>: tells every rank the job's random id (its transport adopts it, so frames of
 *   any other job are dropped) and the plan's fingerprint (a rank started from a different config
 *   refuses); steps asked for meanwhile wait in a stash.</li>
 *   <li><b>passes</b>: for each forward pass of the step, splits the batch into microbatches, sends
 *   the inputs to the first stage's rank and the targets to the last stage's, and waits for every
 *   rank to finish its row.</li>
 *   <li><b>gradients</b>: every rank all-reduces its gradients and reports its sum of squares.</li>
 *   <li><b>optimizer</b>: with the clip factor and learning rate, every rank steps its optimizer; the
 *   step ends with the loss, norms and every rank's timings. A step whose loss or gradient norm is
 *   not finite is not applied: every rank drops its gradients instead, and the report says where
 *   the non-finite value first appeared.</li>
 *   <li><b>checking links</b> (a multi-process job, before step 1 and after a recovery): a {@link LinkCheck} actor
 *   checks every control and data link; requests wait in the stash until it has answered.</li>
 *   <li><b>rejoining</b> (after a failed step, when the job recovers): every rank joins again under a
 *   fresh job id; a rank whose process died is waited for until its replacement registers.</li>
 *   <li><b>evaluating</b>, <b>generating</b> (a forward-only plan: {@code ttpipe eval}, {@code ttpipe generate};
 *   evaluating also between the steps of a training plan, its ranks on their rows of {@link JobPlan#evalSchedule}):
 *   inference passes ({@link Inference}) instead of steps: the batches scored by the last stage, or the
 *   prompt and then each new token decoded against the ranks' key/value caches, the next token picked here.</li>
 * </ul>
 * A rank that fails ends the step (or the inference) with an error naming the rank, stage, action and microbatch.
 */
public final class Coordinator {

    public sealed interface Command {
    }

    /** What a caller asks for and is answered: a training step, an evaluation, a generation. */
    public sealed interface Request extends Command {
        /** Answers that it will not run, and why. */
        void refuse(String why);
    }

    /** Runs one optimizer step over {@code batches} (one per accumulation pass); answers with its report or why it failed. */
    public record RunStep(int step, List<Batch> batches, ActorRef<StatusReply<StepReport>> replyTo) implements Request {
        @Override
        public void refuse(String why) {
            replyTo.tell(StatusReply.error(why));
        }
    }

    /**
     * Evaluation: each batch one microbatch (all of one size and sequence length), as many per pass as the plan
     * has microbatches, the last stage scoring each against its targets; answers with the losses summed in
     * batch order. On a forward-only plan ({@link JobPlan.Builder#forwardOnly}) the passes run its schedule; on a
     * training plan, between steps, they run {@link JobPlan#evalSchedule} on the same ranks: no activation kept
     * for a backward, no optimizer state or dropout generator touched, so training goes on as without it.
     */
    public record RunEval(List<Batch> batches, ActorRef<StatusReply<EvalReport>> replyTo) implements Request {
        @Override
        public void refuse(String why) {
            replyTo.tell(StatusReply.error(why));
        }
    }

    /**
     * An evaluation's result: the cross-entropy summed over {@code counted} targets (batch after batch, as
     * {@link dev.ttpipe.stages.Evaluation#meanLoss} adds them), the tokens run, and when it started and ended.
     */
    public record EvalReport(double lossSum, long counted, long tokens, long startNs, long endNs) {
        public double loss() {
            return counted == 0 ? Double.NaN : lossSum / counted;
        }

        public double seconds() {
            return (endNs - startNs) / 1e9;
        }
    }

    /**
     * Generation, on a forward-only plan of one-token microbatches: the prompt runs through the ranks in one
     * pass (its tokens pipelined as microbatches, each rank filling its stages' key/value caches), then every
     * new token in a pass of its own. The last stage's logits come back here, a {@link Sampler} of
     * {@code temperature}, {@code topK} and {@code seed} picks the next token, {@code onToken} sees it (on the
     * Coordinator's thread: it must not block) and it goes to the first stage. The prompt must fit the plan's
     * microbatches, prompt and new tokens the model's context.
     */
    public record RunGenerate(int[] prompt, int newTokens, double temperature, int topK, long seed, int sampledIds,
                              IntConsumer onToken,
                              ActorRef<StatusReply<GenerateReport>> replyTo) implements Request {
        @Override
        public void refuse(String why) {
            replyTo.tell(StatusReply.error(why));
        }
    }

    /** A generation's result: the prompt's ids and the new ones; when it started and ended. */
    public record GenerateReport(int[] ids, long startNs, long endNs) {
        public double seconds() {
            return (endNs - startNs) / 1e9;
        }
    }

    /**
     * Before step 1 of a multi-process job (and after a recovery): checks every link of {@code plan}
     * ({@link LinkCheck}); answers with every link's figures, or with the one line naming the link that failed.
     */
    public record CheckLinks(LinkCheck.Plan plan, ActorRef<StatusReply<LinkCheck.Report>> replyTo) implements Request {
        @Override
        public void refuse(String why) {
            replyTo.tell(StatusReply.error(why));
        }
    }

    /** The link check's actor ended (it answered its asker). */
    private record LinksChecked() implements Command {
    }

    /** A rank's answer to {@link StageActor.JoinJob} of job {@code jobId}: {@code problem} null when it joined. */
    public record Joined(int rank, long jobId, String problem) implements Command, ClusterMessage {
    }

    /**
     * A rank's actor was replaced: its process died and a new one registered ({@link HostGuardian}
     * sees it in the Receptionist). The Coordinator talks to {@code ref} from now on.
     */
    public record RankReplaced(int rank, ActorRef<StageActor.Command> ref) implements Command {
    }

    /**
     * Between steps, after a failed one: makes every rank join again under a fresh job id (frames of
     * the failed step, still in flight, carry the old one and are dropped; each rank drops what it
     * held of that step), waiting for ranks whose process died until their replacement registers.
     */
    public record Rejoin(ActorRef<StatusReply<Long>> replyTo) implements Command {
    }

    /** A rank ran its row of pass {@code pass}: its events, and by microbatch what its last stage handed back. */
    public record PassDone(int rank, int pass, List<ActionEvent> events, Map<Integer, LossOutput> losses, Map<Integer, float[]> logits)
            implements Command, ClusterMessage {
    }

    /**
     * A rank's gradients after the reduction. {@code stageSums}: by stage index, the sum of squares of
     * each of that stage's gradients, in its parameter order. {@code nonFinite}: where a non-finite
     * gradient first appeared on this rank ("stage 2, h.3.attn.c_attn.weight"), or null.
     * {@code tiedGrads}: this rank's halves of a token embedding tied across stages (first stage's, then
     * last's), or empty.
     */
    public record GradReport(int rank, TreeMap<Integer, double[]> stageSums, String nonFinite, int nonFiniteStage, float[][] tiedGrads, ActionEvent event)
            implements Command, ClusterMessage {
    }

    public record OptimizerDone(int rank, ActionEvent event, long memoryPeak) implements Command, ClusterMessage {
    }

    public record RankFailed(int rank, String message) implements Command, ClusterMessage {
    }

    /**
     * A finished step. {@code passStartNs} holds each pass's start; {@code events} every rank's
     * measured actions; {@code memoryPeak} each rank's device high-water mark during the step.
     * {@code nonFinite}: null when the step was applied; else why it was not (a non-finite loss or
     * gradient, and where it first appeared): no weight and no optimizer state changed.
     */
    public record StepReport(int step, double loss, double gradNorm, double lr, double clip, long tokens,
                             long startNs, long endNs, long[] passStartNs, long[] passEndNs, List<ActionEvent> events,
                             long[] memoryPeak, String nonFinite) {
        public double seconds() {
            return (endNs - startNs) / 1e9;
        }

        public boolean applied() {
            return nonFinite == null;
        }
    }

    public static Behavior<Command> create(JobPlan plan, List<ActorRef<StageActor.Command>> ranks) {
        return create(plan, ranks, Faults.NONE);
    }

    /** A Coordinator with {@code faults} injected (its {@link Faults#lossScale}). */
    public static Behavior<Command> create(JobPlan plan, List<ActorRef<StageActor.Command>> ranks, Faults faults) {
        return Behaviors.withStash(64, stash -> Behaviors.setup(ctx -> new Coordinator(ctx, stash, plan, ranks, faults).joining()));
    }

    private final ActorContext<Command> ctx;
    private final StashBuffer<Command> stash;
    private final JobPlan plan;
    private final Faults faults;
    /** Each rank's actor; a rank whose process was restarted gets its new one ({@link RankReplaced}). */
    private final List<ActorRef<StageActor.Command>> ranks;
    /** The job id every rank stamps on its frames: the plan's, then a fresh one per {@link Rejoin}. */
    private long jobId;
    /**
     * The number of the latest inference pass (0, 1, ... on a forward-only plan; -1, -2, ... on a training
     * plan, so that its ranks tell them from training passes); a PassDone of another number is late and ignored.
     */
    private int inferencePass = Integer.MIN_VALUE;
    /** Inference passes begun. */
    private int inferencePasses;
    /** Link checks run so far: each one's frames carry its number. */
    private int linkChecks;

    private Coordinator(ActorContext<Command> ctx, StashBuffer<Command> stash, JobPlan plan,
                        List<ActorRef<StageActor.Command>> ranks, Faults faults) {
        this.ctx = ctx;
        this.faults = faults;
        this.stash = stash;
        this.plan = plan;
        this.ranks = new ArrayList<>(ranks);
        this.jobId = plan.jobId();
    }

    // ---- joining ------------------------------------------------------------------------------------

    private Behavior<Command> joining() {
        for (ActorRef<StageActor.Command> r : ranks) {
            r.tell(new StageActor.JoinJob(jobId, plan.fingerprint(), ctx.getSelf()));
        }
        Set<Integer> waiting = new HashSet<>();
        for (int r = 0; r < ranks.size(); r++) waiting.add(r);
        return Behaviors.receive(Command.class)
                .onMessage(Joined.class, m -> {
                    if (m.jobId() != jobId) return Behaviors.same();
                    if (m.problem() != null) return refusing("rank " + m.rank() + " cannot join the job: " + m.problem());
                    waiting.remove(m.rank());
                    return waiting.isEmpty() ? stash.unstashAll(idle()) : Behaviors.same();
                })
                .onMessage(RankFailed.class, m -> refusing(m.message()))
                .onMessage(RankReplaced.class, this::onReplaced)
                .onMessage(Request.class, m -> {
                    stash.stash(m);
                    return Behaviors.same();
                })
                .onAnyMessage(m -> Behaviors.same())
                .build();
    }

    private Behavior<Command> onReplaced(RankReplaced m) {
        ranks.set(m.rank(), m.ref());
        return Behaviors.same();
    }

    // ---- rejoining after a failed step -------------------------------------------------------------------

    /**
     * Every rank joins again under a fresh job id; a rank whose process died is waited for until its
     * replacement registers. Answers {@code replyTo} with the new id once all have joined.
     */
    private Behavior<Command> rejoining(Rejoin request) {
        jobId = new SecureRandom().nextLong();
        Set<Integer> waiting = new HashSet<>();
        for (int r = 0; r < ranks.size(); r++) {
            waiting.add(r);
            ranks.get(r).tell(new StageActor.JoinJob(jobId, plan.fingerprint(), ctx.getSelf()));
        }
        return Behaviors.receive(Command.class)
                .onMessage(Joined.class, m -> {
                    if (m.jobId() != jobId) return Behaviors.same();           // a join of an earlier id
                    if (m.problem() != null) {
                        request.replyTo().tell(StatusReply.error("rank " + m.rank() + " cannot rejoin the job: " + m.problem()));
                        return idle();
                    }
                    waiting.remove(m.rank());
                    if (!waiting.isEmpty()) return Behaviors.same();
                    request.replyTo().tell(StatusReply.success(jobId));
                    return idle();
                })
                .onMessage(RankReplaced.class, m -> {
                    ranks.set(m.rank(), m.ref());
                    m.ref().tell(new StageActor.JoinJob(jobId, plan.fingerprint(), ctx.getSelf()));
                    return Behaviors.same();
                })
                .onMessage(Request.class, m -> {
                    m.refuse("the job is recovering from a failed step");
                    return Behaviors.same();
                })
                .onAnyMessage(m -> Behaviors.same())     // failures and late answers of the failed step
                .build();
    }

    // ---- checking links --------------------------------------------------------------------------------

    /** The check runs in an actor of its own; requests wait in the stash until it has answered. */
    private Behavior<Command> checkingLinks(CheckLinks m) {
        ActorRef<LinkCheck.Command> check = ctx.spawnAnonymous(LinkCheck.create(m.plan(), List.copyOf(ranks), ++linkChecks, m.replyTo()));
        ctx.watchWith(check, new LinksChecked());
        return Behaviors.receive(Command.class)
                .onMessage(LinksChecked.class, d -> stash.unstashAll(idle()))
                .onMessage(RankReplaced.class, this::onReplaced)
                .onMessage(RankFailed.class, f -> {
                    ctx.getLog().warn("during the link check: {}", f.message());
                    return Behaviors.same();
                })
                .onMessage(Request.class, r -> {
                    stash.stash(r);
                    return Behaviors.same();
                })
                .onMessage(Rejoin.class, r -> {
                    stash.stash(r);
                    return Behaviors.same();
                })
                .onAnyMessage(r -> Behaviors.same())
                .build();
    }

    /** The job could not start: every step is answered with why. */
    private Behavior<Command> refusing(String why) {
        stash.forEach(m -> {
            if (m instanceof Request r) r.refuse(why);
        });
        stash.clear();
        return Behaviors.receive(Command.class)
                .onMessage(Request.class, m -> {
                    m.refuse(why);
                    return Behaviors.same();
                })
                .onAnyMessage(m -> Behaviors.same())
                .build();
    }

    // ---- idle ----------------------------------------------------------------------------------------

    private Behavior<Command> idle() {
        return Behaviors.receive(Command.class)
                .onMessage(RunStep.class, m -> passes(new StepState(m)))
                .onMessage(RunEval.class, this::evaluating)
                .onMessage(RunGenerate.class, this::generating)
                .onMessage(CheckLinks.class, this::checkingLinks)
                .onMessage(Rejoin.class, this::rejoining)
                .onMessage(RankReplaced.class, this::onReplaced)
                .onMessage(RankFailed.class, m -> {
                    ctx.getLog().warn("between steps: {}", m.message());
                    return Behaviors.same();
                })
                .onAnyMessage(m -> Behaviors.same())     // late replies of a failed step
                .build();
    }

    /** What one step has gathered so far. */
    private final class StepState {
        final RunStep request;
        final long startNs = System.nanoTime();
        final long[] passStart, passEnd;
        final long[] memoryPeak = new long[ranks.size()];
        final List<ActionEvent> events = new ArrayList<>();
        final long counted;
        int pass;
        double lossSum;
        double sumSquares;
        final TreeMap<Integer, double[]> stageSums = new TreeMap<>();
        String nonFinite;
        int nonFiniteStage = -1;
        double clip = 1.0;
        double lr;
        /** The tied embedding's gradient halves, by rank (the first stage's rank is the lower one, or the same rank first). */
        final TreeMap<Integer, float[][]> tiedGrads = new TreeMap<>();
        float[] tiedSum;

        StepState(RunStep request) {
            this.request = request;
            long c = 0;
            for (Batch b : request.batches()) c += b.countedTargets(-100);
            this.counted = c;
            this.passStart = new long[request.batches().size()];
            this.passEnd = new long[request.batches().size()];
        }
    }

    /** Handles what every phase of a running step handles the same way: a failure, or a second step. */
    private BehaviorBuilder<Command> during(StepState st) {
        return Behaviors.receive(Command.class)
                .onMessage(RankFailed.class, m -> {
                    st.request.replyTo().tell(StatusReply.error(m.message()));
                    return idle();
                })
                .onMessage(RankReplaced.class, m -> {
                    ranks.set(m.rank(), m.ref());
                    st.request.replyTo().tell(StatusReply.error("rank " + m.rank() + " was restarted during the step"));
                    return idle();
                })
                .onMessage(Request.class, m -> {
                    m.refuse("step " + st.request.step() + " is still running");
                    return Behaviors.same();
                });
    }

    // ---- passes ----------------------------------------------------------------------------------------

    private Behavior<Command> passes(StepState st) {
        TreeMap<Integer, LossOutput> losses = new TreeMap<>();
        int[] waiting = {beginPass(st)};
        return during(st)
                .onMessage(PassDone.class, m -> {
                    if (m.pass() != st.request.step() * st.request.batches().size() + st.pass) {
                        return Behaviors.same();                  // a late answer from a step that failed
                    }
                    st.events.addAll(m.events());
                    losses.putAll(m.losses());
                    if (--waiting[0] > 0) return Behaviors.same();
                    st.passEnd[st.pass] = System.nanoTime();
                    for (LossOutput l : losses.values()) st.lossSum += l.sum();   // microbatch order
                    losses.clear();
                    st.pass++;
                    if (st.pass < st.request.batches().size()) {
                        waiting[0] = beginPass(st);
                        return Behaviors.same();
                    }
                    return gradients(st);
                })
                .onAnyMessage(m -> Behaviors.same())
                .build();
    }

    /** Sends pass {@code st.pass} to every rank; returns how many answers to wait for. */
    private int beginPass(StepState st) {
        Batch batch = st.request.batches().get(st.pass);
        int mbs = plan.microbatches(), b = plan.microbatchSize();
        int[][] inputs = new int[mbs][];
        int[][] targets = new int[mbs][];
        for (int i = 0; i < mbs; i++) {
            Batch mb = batch.slice(i * b, b);
            inputs[i] = mb.inputs();
            targets[i] = mb.targets();
        }
        double lossScale = faults.lossScale() / Math.max(1, st.counted);
        MicrobatchData data = new MicrobatchData(b, batch.seqLen(), inputs, targets, (float) lossScale);
        int pass = st.request.step() * st.request.batches().size() + st.pass;
        st.passStart[st.pass] = System.nanoTime();
        return tellRanks(st.request.step(), pass, data, null);
    }

    /** Begins pass {@code pass} on every rank, the data to the first and last stages' ranks; returns how many answers to wait for. */
    private int tellRanks(int step, int pass, MicrobatchData data, Inference inference) {
        for (int r = 0; r < ranks.size(); r++) {
            boolean needsData = r == plan.firstStageRank() || r == plan.lastStageRank();
            ranks.get(r).tell(new StageActor.BeginPass(step, pass, needsData ? data : null, inference, ctx.getSelf()));
        }
        return ranks.size();
    }

    // ---- gradients -------------------------------------------------------------------------------------

    private Behavior<Command> gradients(StepState st) {
        for (ActorRef<StageActor.Command> r : ranks) r.tell(new StageActor.FinishStep(st.request.step(), ctx.getSelf()));
        int[] waiting = {ranks.size()};
        return during(st)
                .onMessage(GradReport.class, m -> {
                    st.stageSums.putAll(m.stageSums());
                    if (m.tiedGrads() != null && m.tiedGrads().length > 0) st.tiedGrads.put(m.rank(), m.tiedGrads());
                    if (m.nonFinite() != null && m.nonFiniteStage() > st.nonFiniteStage) {
                        st.nonFinite = m.nonFinite();     // backward runs from the last stage down: the highest saw it first
                        st.nonFiniteStage = m.nonFiniteStage();
                    }
                    st.events.add(m.event());
                    if (--waiting[0] > 0) return Behaviors.same();
                    // stage after stage, parameter after parameter, whatever order the ranks answered in: the
                    // reference trainer's sequence of additions, so the norm (and the clip factor) has its bits
                    for (double[] sums : st.stageSums.values()) for (double v : sums) st.sumSquares += v;
                    sumTied(st);
                    return optimizer(st);
                })
                .onAnyMessage(m -> Behaviors.same())
                .build();
    }

    /**
     * Megatron's tied embedding: the first stage's gradient plus the last stage's copy's, summed in that
     * order (both ranks then apply the same sum, so the copies stay equal bit for bit), counted once in
     * the gradient norm.
     */
    private void sumTied(StepState st) {
        if (st.tiedGrads.isEmpty()) return;
        float[] sum = null;
        for (float[][] halves : st.tiedGrads.values()) {
            for (float[] g : halves) {
                if (sum == null) {
                    sum = g.clone();
                } else {
                    for (int i = 0; i < sum.length; i++) sum[i] += g[i];
                }
            }
        }
        double ss = 0;
        for (float v : sum) ss += (double) v * v;
        st.sumSquares += ss;
        if (!Double.isFinite(ss) && st.nonFinite == null) st.nonFinite = "the tied token embedding (embed.tokens, first and last stage)";
        st.tiedSum = sum;
    }

    // ---- optimizer -------------------------------------------------------------------------------------

    private Behavior<Command> optimizer(StepState st) {
        st.clip = plan.clipMaxNorm() > 0 && Double.isFinite(st.sumSquares)
                ? Optimizer.clipFactor(st.sumSquares, plan.clipMaxNorm()) : 1.0;
        st.lr = plan.lr().at(st.request.step());
        String skip = null;
        // The sim backend's values are placeholders (NaN by design): its steps are always applied.
        boolean valuesAreReal = plan.backend() != Backend.SIM;
        if (valuesAreReal && (!Double.isFinite(st.lossSum) || !Double.isFinite(st.sumSquares))) {
            skip = (Double.isFinite(st.lossSum) ? "" : "non-finite loss (" + st.lossSum + ")"
                    + (Double.isFinite(st.sumSquares) ? "" : " and "))
                    + (Double.isFinite(st.sumSquares) ? "" : "non-finite gradient"
                    + (st.nonFinite != null ? ", first at " + st.nonFinite : ""));
        }
        st.nonFinite = skip;
        for (ActorRef<StageActor.Command> r : ranks) {
            r.tell(new StageActor.ApplyOptimizer(st.request.step(), st.lr, st.clip, skip != null,
                    st.tiedGrads.containsKey(ranks.indexOf(r)) ? st.tiedSum : null, ctx.getSelf()));
        }
        int[] waiting = {ranks.size()};
        return during(st)
                .onMessage(OptimizerDone.class, m -> {
                    st.events.add(m.event());
                    st.memoryPeak[m.rank()] = m.memoryPeak();
                    if (--waiting[0] > 0) return Behaviors.same();
                    RunStep done = st.request;
                    long tokens = (long) plan.batchSize() * plan.seqLen() * done.batches().size();
                    done.replyTo().tell(StatusReply.success(new StepReport(done.step(), st.lossSum / Math.max(1, st.counted),
                            Math.sqrt(st.sumSquares), st.lr, st.clip, tokens, st.startNs, System.nanoTime(), st.passStart,
                            st.passEnd, List.copyOf(st.events), st.memoryPeak, st.nonFinite)));
                    return idle();
                })
                .onAnyMessage(m -> Behaviors.same())
                .build();
    }

    // ---- inference: evaluation and generation ----------------------------------------------------------

    /** What every phase of an inference request handles the same way: a failure, or another request meanwhile. */
    private BehaviorBuilder<Command> inferring(Request running) {
        return Behaviors.receive(Command.class)
                .onMessage(RankFailed.class, m -> {
                    running.refuse(m.message());
                    return idle();
                })
                .onMessage(RankReplaced.class, m -> {
                    ranks.set(m.rank(), m.ref());
                    running.refuse("rank " + m.rank() + " was restarted during the pass");
                    return idle();
                })
                .onMessage(Request.class, m -> {
                    m.refuse("an evaluation or generation is still running");
                    return Behaviors.same();
                });
    }

    private Behavior<Command> evaluating(RunEval request) {
        if (request.batches().isEmpty()) {
            request.refuse("evaluation: no batches given, expected at least one");
            return Behaviors.same();
        }
        Scoring sc = new Scoring(request);
        int[] waiting = {beginScore(sc)};
        return inferring(request)
                .onMessage(PassDone.class, m -> {
                    if (m.pass() != inferencePass) return Behaviors.same();
                    sc.losses.putAll(m.losses());
                    if (--waiting[0] > 0) return Behaviors.same();
                    for (LossOutput l : sc.losses.values()) {     // batch order
                        sc.lossSum += l.sum();
                        sc.counted += l.count();
                    }
                    sc.losses.clear();
                    sc.next += plan.microbatches();
                    if (sc.next < sc.batches.size()) {
                        waiting[0] = beginScore(sc);
                        return Behaviors.same();
                    }
                    long tokens = 0;
                    for (Batch b : sc.batches) tokens += (long) b.size() * b.seqLen();
                    request.replyTo().tell(StatusReply.success(new EvalReport(sc.lossSum, sc.counted, tokens, sc.startNs,
                            System.nanoTime())));
                    return idle();
                })
                .onAnyMessage(m -> Behaviors.same())
                .build();
    }

    /** What an evaluation has gathered so far. */
    private static final class Scoring {
        final List<Batch> batches;
        final long startNs = System.nanoTime();
        /** The running pass's losses, by microbatch. */
        final TreeMap<Integer, LossOutput> losses = new TreeMap<>();
        double lossSum;
        long counted;
        /** The first batch of the running pass. */
        int next;

        Scoring(RunEval request) {
            this.batches = request.batches();
        }
    }

    /** Begins the pass that scores batches {@code sc.next ..}, as many as the plan has microbatches. */
    private int beginScore(Scoring sc) {
        int n = Math.min(plan.microbatches(), sc.batches.size() - sc.next);
        int[][] inputs = new int[n][], targets = new int[n][];
        for (int i = 0; i < n; i++) {
            inputs[i] = sc.batches.get(sc.next + i).inputs();
            targets[i] = sc.batches.get(sc.next + i).targets();
        }
        Batch b = sc.batches.get(sc.next);
        return tellRanks(-1, nextInferencePass(), new MicrobatchData(b.size(), b.seqLen(), inputs, targets, 1f), new Inference.Score(n));
    }

    /** Numbers the next inference pass ({@link #inferencePass}). */
    private int nextInferencePass() {
        int n = inferencePasses++;
        inferencePass = plan.forwardOnly() ? n : -1 - n;
        return inferencePass;
    }

    private Behavior<Command> generating(RunGenerate request) {
        if (!plan.forwardOnly()) {
            request.refuse("generation runs on a forward-only plan, and this plan's schedule is " + plan.schedule().name());
            return Behaviors.same();
        }
        if (request.prompt().length == 0 || request.prompt().length > plan.microbatches() || request.newTokens() < 1) {
            request.refuse("generation: " + request.prompt().length + " prompt tokens and " + request.newTokens() + " new ones given,"
                    + " expected 1.." + plan.microbatches() + " prompt tokens (the plan's microbatches) and at least one new one");
            return Behaviors.same();
        }
        Generation g = new Generation(request);
        int[] waiting = {beginDecode(g.ids, 0, g.known)};
        return inferring(request)
                .onMessage(PassDone.class, m -> {
                    if (m.pass() != inferencePass) return Behaviors.same();
                    if (!m.logits().isEmpty()) g.logits = m.logits().values().iterator().next();  // the pass's last token's
                    if (--waiting[0] > 0) return Behaviors.same();
                    int next = g.sampler.next(g.logits);
                    g.ids[g.known++] = next;
                    try {
                        request.onToken().accept(next);
                    } catch (RuntimeException e) {
                        request.refuse("generation: the token listener failed: " + describe(e));
                        return idle();
                    }
                    if (g.known < g.ids.length) {
                        waiting[0] = beginDecode(g.ids, g.known - 1, 1);
                        return Behaviors.same();
                    }
                    request.replyTo().tell(StatusReply.success(new GenerateReport(g.ids, g.startNs, System.nanoTime())));
                    return idle();
                })
                .onAnyMessage(m -> Behaviors.same())
                .build();
    }

    /** What a generation has so far. */
    private static final class Generation {
        final long startNs = System.nanoTime();
        /** The prompt, then each token as it is picked. */
        final int[] ids;
        final Sampler sampler;
        /** Ids known so far. */
        int known;
        /** The last stage's logits of the running pass's last token. */
        float[] logits;

        Generation(RunGenerate request) {
            this.ids = Arrays.copyOf(request.prompt(), request.prompt().length + request.newTokens());
            this.sampler = new Sampler(request.temperature(), request.topK(), request.seed(), request.sampledIds());
            this.known = request.prompt().length;
        }
    }

    /** Begins the pass that decodes {@code count} tokens of {@code ids} from {@code position} (position 0: new caches). */
    private int beginDecode(int[] ids, int position, int count) {
        int[][] tokens = new int[count][];
        for (int i = 0; i < count; i++) tokens[i] = new int[]{ids[position + i]};
        return tellRanks(-1, nextInferencePass(), new MicrobatchData(1, 1, tokens, null, 1f),
                new Inference.Decode(count, position, ids.length));
    }

    /** A throwable as a one-line reason. */
    static String describe(Throwable t) {
        Throwable root = t;
        while (root.getCause() != null && root.getCause() != root && root.getMessage() == null) root = root.getCause();
        String msg = root.getMessage();
        return msg == null ? root.getClass().getSimpleName() : msg;
    }
}

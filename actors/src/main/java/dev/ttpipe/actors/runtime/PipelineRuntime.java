package dev.ttpipe.actors.runtime;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.transport.LocalTransport;
import dev.ttpipe.transport.Transport;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.javadsl.AskPattern;

import java.time.Duration;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Function;

/**
 * A pipeline job inside one JVM: one ActorSystem, a {@link HostGuardian} with a StageActor per rank,
 * the Coordinator, one mesh carved into a submesh per rank, and the in-process transport. The
 * calling thread drives it step by step; everything else runs in actors and device queues.
 */
public final class PipelineRuntime implements AutoCloseable {
    private final JobPlan plan;
    private final MeshDevice mesh;
    private final Transport transport;
    private final ActorSystem<HostGuardian.Command> system;
    private final ActorRef<Coordinator.Command> coordinator;
    private final Duration stepTimeout;

    private PipelineRuntime(JobPlan plan, MeshDevice mesh, Transport transport, ActorSystem<HostGuardian.Command> system,
                            Duration stepTimeout) {
        this.plan = plan;
        this.mesh = mesh;
        this.transport = transport;
        this.system = system;
        this.stepTimeout = stepTimeout;
        this.coordinator = ask(system, HostGuardian.GetCoordinator::new, Duration.ofSeconds(30));
    }

    /** Opens the mesh and starts the actors. */
    public static PipelineRuntime start(JobPlan plan) {
        return start(plan, Duration.ofMinutes(30));
    }

    public static PipelineRuntime start(JobPlan plan, Duration stepTimeout) {
        MeshShape rankMesh = plan.rankMesh();
        MeshDevice mesh = Backends.open(plan.backend(),
                new MeshShape(rankMesh.rows() * plan.ranks(), rankMesh.cols()), plan.meshOptions());
        try {
            List<Submesh> subs = mesh.createSubmeshes(rankMesh);
            Map<Integer, Submesh> byRank = new HashMap<>();
            for (int r = 0; r < plan.ranks(); r++) byRank.put(r, subs.get(r));
            Transport transport = new LocalTransport();
            ActorSystem<HostGuardian.Command> system = ActorSystem.create(
                    HostGuardian.create(plan, byRank, transport), "ttpipe", localConfig());
            return new PipelineRuntime(plan, mesh, transport, system, stepTimeout);
        } catch (RuntimeException e) {
            mesh.close();
            throw e;
        }
    }

    /** Pekko settings for a single-process job: local provider, logging through SLF4J. */
    static Config localConfig() {
        return ConfigFactory.parseString(String.join("\n",
                "pekko.actor.provider = local",
                "pekko.loggers = [\"org.apache.pekko.event.slf4j.Slf4jLogger\"]",
                "pekko.logging-filter = \"org.apache.pekko.event.slf4j.Slf4jLoggingFilter\"",
                "pekko.loglevel = INFO",
                "pekko.log-dead-letters = off",
                "pekko.log-dead-letters-during-shutdown = off",
                "pekko.coordinated-shutdown.run-by-jvm-shutdown-hook = off"))
                .withFallback(ConfigFactory.load());
    }

    public JobPlan plan() {
        return plan;
    }

    public MeshDevice mesh() {
        return mesh;
    }

    public Transport transport() {
        return transport;
    }

    /** Runs one optimizer step; throws {@link PipelineFailure} naming where it failed. */
    public Coordinator.StepReport step(int step, List<Batch> batches) {
        Coordinator.StepOutcome out = ask(coordinator, r -> new Coordinator.RunStep(step, batches, r), stepTimeout);
        if (out instanceof Coordinator.StepFailed f) {
            throw new PipelineFailure("step " + f.step() + " failed: " + f.message());
        }
        return (Coordinator.StepReport) out;
    }

    public ActorRef<StageActor.Command> rank(int r) {
        return ask(system, reply -> new HostGuardian.GetRank(r, reply), Duration.ofSeconds(10));
    }

    public StageActor.StageStats stats(int r, Duration timeout) {
        ActorRef<StageActor.Command> ref = rank(r);
        return ask(ref, StageActor.GetStats::new, timeout);
    }

    /** Every parameter's value on the host, by name, gathered from all ranks. */
    public Map<String, float[]> weights() {
        Map<String, float[]> out = new LinkedHashMap<>();
        for (int r = 0; r < plan.ranks(); r++) {
            ActorRef<StageActor.Command> ref = rank(r);
            out.putAll(ask(ref, StageActor.GetWeights::new, Duration.ofMinutes(5)));
        }
        return out;
    }

    /** Runs {@code work} on rank {@code r}'s device queue with its stages and returns its result. */
    @SuppressWarnings("unchecked")
    public <T> T onDevice(int r, Function<List<Stage>, T> work) {
        ActorRef<StageActor.Command> ref = rank(r);
        Object result = ask(ref, reply -> new StageActor.RunOnDevice(stages -> work.apply(stages), reply), Duration.ofMinutes(30));
        if (result instanceof RuntimeException e) throw e;
        if (result instanceof Throwable t) throw new PipelineFailure("rank " + r + ": " + t.getMessage(), t);
        return (T) result;
    }

    private <Req, Res> Res ask(ActorRef<Req> target, Function<ActorRef<Res>, Req> message, Duration timeout) {
        CompletionStage<Res> f = AskPattern.ask(target, message::apply, timeout, system.scheduler());
        try {
            return f.toCompletableFuture().get(timeout.toMillis() + 1000, TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof TimeoutException || c instanceof java.util.concurrent.TimeoutException
                    || (c != null && c.getClass().getSimpleName().contains("Timeout"))) {
                throw new PipelineFailure("no answer from " + target.path().name() + " within " + timeout.toSeconds() + " s");
            }
            throw new PipelineFailure(String.valueOf(c == null ? e.getMessage() : c.getMessage()), c == null ? e : c);
        } catch (TimeoutException e) {
            throw new PipelineFailure("no answer from " + target.path().name() + " within " + timeout.toSeconds() + " s");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new PipelineFailure("interrupted");
        }
    }

    @Override
    public void close() {
        system.terminate();
        try {
            system.getWhenTerminated().toCompletableFuture().get(60, TimeUnit.SECONDS);
        } catch (Exception e) {
            // fall through: free the devices anyway
        }
        transport.close();
        mesh.close();
    }
}

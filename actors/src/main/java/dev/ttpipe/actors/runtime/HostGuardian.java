package dev.ttpipe.actors.runtime;

import dev.ttpipe.device.Submesh;
import dev.ttpipe.transport.Transport;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.javadsl.AbstractBehavior;
import org.apache.pekko.actor.typed.javadsl.ActorContext;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.javadsl.Receive;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The root actor of a host process: spawns a {@link StageActor} for every rank bound to this host
 * (each with its submesh) and, on the host that runs it, the job's {@link Coordinator}. It watches
 * the stage actors: one that stops unexpectedly fails the running step with its rank named.
 */
public final class HostGuardian extends AbstractBehavior<HostGuardian.Command> {

    public sealed interface Command {
    }

    public record GetCoordinator(ActorRef<ActorRef<Coordinator.Command>> replyTo) implements Command {
    }

    public record GetRank(int rank, ActorRef<ActorRef<StageActor.Command>> replyTo) implements Command {
    }

    private record RankStopped(int rank) implements Command {
    }

    /**
     * @param submeshes submesh of each local rank (by rank)
     */
    public static Behavior<Command> create(JobPlan plan, Map<Integer, Submesh> submeshes, Transport transport) {
        return Behaviors.setup(ctx -> new HostGuardian(ctx, plan, submeshes, transport));
    }

    private final List<ActorRef<StageActor.Command>> ranks = new ArrayList<>();
    private final ActorRef<Coordinator.Command> coordinator;

    private HostGuardian(ActorContext<Command> ctx, JobPlan plan, Map<Integer, Submesh> submeshes, Transport transport) {
        super(ctx);
        for (int r = 0; r < plan.ranks(); r++) {
            Submesh sub = submeshes.get(r);
            ActorRef<StageActor.Command> ref = ctx.spawn(StageActor.create(plan, r, sub, transport), "rank-" + r);
            ctx.watchWith(ref, new RankStopped(r));
            ranks.add(ref);
        }
        coordinator = ctx.spawn(Coordinator.create(plan, List.copyOf(ranks)), "coordinator");
    }

    @Override
    public Receive<Command> createReceive() {
        return newReceiveBuilder()
                .onMessage(GetCoordinator.class, m -> {
                    m.replyTo().tell(coordinator);
                    return this;
                })
                .onMessage(GetRank.class, m -> {
                    m.replyTo().tell(ranks.get(m.rank()));
                    return this;
                })
                .onMessage(RankStopped.class, m -> {
                    coordinator.tell(new Coordinator.RankFailed(m.rank(), "rank " + m.rank() + " stopped unexpectedly"));
                    return this;
                })
                .build();
    }
}

package dev.ttpipe.actors.cluster;

import java.util.List;

/** Every class that travels in a cross-process message, registered with Kryo in this order on every worker. */
public final class ClusterMessages {
    private ClusterMessages() {
    }

    public static final List<String> CLASSES = List.of(
            "dev.ttpipe.actors.runtime.StageActor$JoinJob",
            "dev.ttpipe.actors.runtime.StageActor$BeginPass",
            "dev.ttpipe.actors.runtime.StageActor$FinishStep",
            "dev.ttpipe.actors.runtime.StageActor$ApplyOptimizer",
            "dev.ttpipe.actors.runtime.StageActor$Reinitialize",
            "dev.ttpipe.actors.runtime.StageActor$GetStats",
            "dev.ttpipe.actors.runtime.StageStats",
            "dev.ttpipe.actors.runtime.StageStats$Waiting",
            "dev.ttpipe.transport.DroppedFrames",
            "dev.ttpipe.actors.runtime.StageActor$GetWeights",
            "dev.ttpipe.actors.runtime.StageActor$Weights",
            "dev.ttpipe.actors.runtime.StageActor$SaveState",
            "dev.ttpipe.actors.runtime.StageActor$AwaitSaved",
            "dev.ttpipe.actors.runtime.StageActor$SavedFiles",
            "dev.ttpipe.actors.runtime.StageActor$LoadState",
            "dev.ttpipe.actors.runtime.Coordinator$Joined",
            "dev.ttpipe.actors.runtime.Coordinator$PassDone",
            "dev.ttpipe.actors.runtime.Coordinator$GradReport",
            "dev.ttpipe.actors.runtime.Coordinator$OptimizerDone",
            "dev.ttpipe.actors.runtime.Coordinator$RankFailed",
            "dev.ttpipe.actors.runtime.HostGuardian$EndJob",
            "dev.ttpipe.actors.runtime.MicrobatchData",
            "dev.ttpipe.actors.runtime.ActionEvent",
            "dev.ttpipe.schedules.Action",
            "dev.ttpipe.schedules.ActionKind",
            "dev.ttpipe.device.LossOutput",
            "dev.ttpipe.actors.runtime.HostGuardian$Preempt",
            "dev.ttpipe.actors.runtime.Inference$Score",
            "dev.ttpipe.actors.runtime.Inference$Decode",
            "dev.ttpipe.actors.runtime.StageActor$Ping",
            "dev.ttpipe.actors.runtime.StageActor$ProbeLink",
            "dev.ttpipe.actors.runtime.StageActor$GetProbesSeen",
            "dev.ttpipe.actors.runtime.LinkCheck$Pong",
            "dev.ttpipe.actors.runtime.LinkCheck$Probed",
            "dev.ttpipe.actors.runtime.LinkCheck$Seen",
            "dev.ttpipe.actors.runtime.Rendezvous$Endpoint",
            "dev.ttpipe.actors.runtime.Rendezvous$Announce",
            "dev.ttpipe.actors.runtime.Rendezvous$Table",
            "dev.ttpipe.actors.runtime.Rendezvous$Refused");
}

package dev.ttpipe.actors.runtime;

import java.util.List;

/** Every class that travels in a cross-process message, registered with Kryo in this order on every worker. */
final class ClusterMessages {
    private ClusterMessages() {
    }

    static final List<String> CLASSES = List.of(
            "dev.ttpipe.actors.runtime.StageActor$BeginPass",
            "dev.ttpipe.actors.runtime.StageActor$FinishStep",
            "dev.ttpipe.actors.runtime.StageActor$ApplyOptimizer",
            "dev.ttpipe.actors.runtime.StageActor$GetStats",
            "dev.ttpipe.actors.runtime.StageActor$StageStats",
            "dev.ttpipe.actors.runtime.StageActor$GetWeights",
            "dev.ttpipe.actors.runtime.StageActor$Weights",
            "dev.ttpipe.actors.runtime.Coordinator$PassDone",
            "dev.ttpipe.actors.runtime.Coordinator$GradReport",
            "dev.ttpipe.actors.runtime.Coordinator$OptimizerDone",
            "dev.ttpipe.actors.runtime.Coordinator$RankFailed",
            "dev.ttpipe.actors.runtime.HostGuardian$EndJob",
            "dev.ttpipe.actors.runtime.MicrobatchData",
            "dev.ttpipe.actors.telemetry.ActionEvent",
            "dev.ttpipe.device.LossOutput");
}

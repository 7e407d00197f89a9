package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.cluster.ClusterMessage;
import dev.ttpipe.transport.DroppedFrames;

/**
 * What a rank is doing, for monitoring ({@code ttpipe top}, {@code /metrics}, the hang watchdog).
 *
 * @param currentAction the oldest compute action on the device queue (running, or next to run), or null
 * @param queuedActions compute actions on the device queue, at most {@link RankExecutor#QUEUE_DEPTH}
 * @param droppedFrames frames addressed to this rank that its transport dropped since it started, by reason
 * @param host          the name of the machine the rank runs on ({@link HostName})
 * @param devices       the ids of the devices of the rank's submesh, in its row-major order
 */
public record StageStats(int rank, String currentAction, boolean busy, int queuedActions, int rowPosition, int rowLength,
                         int bufferedArrivals, int stashedMicrobatches, long memoryInUse, long memoryPeak,
                         long actionsRun, Waiting waiting, long[] actionsByKind, DroppedFrames droppedFrames,
                         String host, int[] devices)
        implements ClusterMessage {

    /**
     * What a rank is doing for the hang watchdog, in durations (processes do not share a clock):
     * the compute action on its device ({@code running}, for {@code runningMs}), the RECV its row waits
     * for ({@code waitingFor}, from rank {@code waitingFromRank}, for {@code waitingMs}), and the last
     * action it finished, {@code sinceFinishedMs} ago (-1: none yet).
     */
    public record Waiting(String running, long runningMs, String waitingFor, int waitingFromRank, long waitingMs,
                          String lastFinished, long sinceFinishedMs, boolean inPass) implements ClusterMessage {
    }
}

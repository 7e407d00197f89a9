package dev.ttpipe.transport;

import java.util.ArrayList;
import java.util.List;

/**
 * How many frames addressed to one local rank a transport has dropped since it started, by
 * {@link DropReason}. A snapshot: immutable, taken by {@link Transport#droppedFrames(int)}.
 */
public record DroppedFrames(long foreignJob, long wrongPeer, long corrupt, long noRoom) {
    public static final DroppedFrames NONE = new DroppedFrames(0, 0, 0, 0);

    public long count(DropReason reason) {
        return switch (reason) {
            case FOREIGN_JOB -> foreignJob;
            case WRONG_PEER -> wrongPeer;
            case CORRUPT -> corrupt;
            case NO_ROOM -> noRoom;
        };
    }

    public long total() {
        return foreignJob + wrongPeer + corrupt + noRoom;
    }

    /** {@code 3 foreign_job, 1 corrupt}: the reasons with a count, or {@code none}. */
    @Override
    public String toString() {
        List<String> parts = new ArrayList<>();
        for (DropReason r : DropReason.values()) {
            if (count(r) > 0) parts.add(count(r) + " " + r.label());
        }
        return parts.isEmpty() ? "none" : String.join(", ", parts);
    }
}

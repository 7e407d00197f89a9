package dev.ttpipe.transport;

import java.util.Locale;

/** Why the receiving end of a transport dropped a frame instead of delivering it; see {@link DroppedFrames}. */
public enum DropReason {
    /**
     * Stamped with another job's id: after a recovery gave the job a fresh id, the frames of the
     * abandoned step still in flight; or another job (or anyone) sending to this rank's data port.
     */
    FOREIGN_JOB,
    /**
     * This job's id, but addressed to another rank, or claiming a sender other than the stream
     * session it came on, or on a session that is no rank of the job.
     */
    WRONG_PEER,
    /**
     * Not a ttpipe frame, a header or payload checksum that fails, a header that does not parse or
     * does not fit its payload, chunks missing, cut short or out of order.
     */
    CORRUPT,
    /** Intact and addressed here, but its tensor found no room on the receiving submesh. */
    NO_ROOM;

    /** The name in metrics and status: {@code foreign_job}, {@code wrong_peer}, {@code corrupt}, {@code no_room}. */
    public String label() {
        return name().toLowerCase(Locale.ROOT);
    }
}

package dev.ttpipe.schedules;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.List;

/**
 * A pipeline schedule: for every rank, the ordered list of actions it runs in one training step.
 *
 * <p>A rank may hold several stages (virtual stages): {@link #stages()} is {@code ranks() *
 * virtualStages()}. Which rank holds which stage is read off the rows, so any layout works
 * (interleaved: rank r holds r, r+P, ...; V-shape: rank r holds r and 2P-1-r); every stage must
 * appear on exactly one rank and every rank must hold the same number of stages. The number of
 * microbatches is the largest microbatch index plus one.
 *
 * <p>A schedule is immutable. Construction checks only this shape; whether the actions are
 * complete, ordered and free of deadlock is the {@link Validator}'s job. Two schedules are equal
 * when their rows are equal; the name is a label and takes no part.
 */
public final class Schedule {
    private final String name;
    private final List<List<Action>> rows;
    private final int stages;
    private final int microbatches;
    private final int[] rankOfStage;
    private final int[][] stagesOfRank;
    private final boolean lowered;
    private final int size;

    private Schedule(String name, List<List<Action>> rows, int stages, int microbatches,
                     int[] rankOfStage, int[][] stagesOfRank, boolean lowered, int size) {
        this.name = name;
        this.rows = rows;
        this.stages = stages;
        this.microbatches = microbatches;
        this.rankOfStage = rankOfStage;
        this.stagesOfRank = stagesOfRank;
        this.lowered = lowered;
        this.size = size;
    }

    /**
     * A schedule from its rows, one per rank.
     *
     * @throws ScheduleException when there are no rows, a stage appears on two ranks, a stage
     *                           number is skipped, or the ranks hold different numbers of stages
     */
    public static Schedule of(String name, List<? extends List<Action>> rows) {
        if (rows.isEmpty()) throw new ScheduleException("schedule " + name + " has no ranks");
        int ranks = rows.size();
        int maxStage = -1;
        int maxMicrobatch = -1;
        int size = 0;
        boolean lowered = false;
        List<List<Action>> copy = new ArrayList<>(ranks);
        for (List<Action> row : rows) {
            List<Action> r = List.copyOf(row);
            copy.add(r);
            for (Action a : r) {
                maxStage = Math.max(maxStage, a.stage());
                maxMicrobatch = Math.max(maxMicrobatch, a.microbatch());
                lowered |= a.kind().isComm();
            }
            size += r.size();
        }
        if (maxStage < 0) throw new ScheduleException("schedule " + name + " has no actions");
        // Every stage 0..maxStage has at least one action, so a stage number beyond the action count
        // leaves a gap: found without the per-stage arrays below (one cell "999999999F0" made them 4 GB).
        if (maxStage >= size) throw gapInStages(name, copy, maxStage, size);
        int stages = maxStage + 1;
        int[] rankOfStage = new int[stages];
        Arrays.fill(rankOfStage, -1);
        int[] count = new int[ranks];
        for (int r = 0; r < ranks; r++) {
            for (Action a : copy.get(r)) {
                int s = a.stage();
                if (rankOfStage[s] == -1) {
                    rankOfStage[s] = r;
                    count[r]++;
                } else if (rankOfStage[s] != r) {
                    throw new ScheduleException("schedule " + name + ": stage " + s + " appears on rank "
                            + rankOfStage[s] + " and on rank " + r + " (" + a + "); a stage must live on exactly one rank");
                }
            }
        }
        for (int s = 0; s < stages; s++) {
            if (rankOfStage[s] == -1) {
                throw new ScheduleException("schedule " + name + ": stage " + s + " appears on no rank, but stage "
                        + maxStage + " does; stages must be numbered 0.." + (stages - 1) + " without gaps");
            }
        }
        if (stages % ranks != 0) {
            throw new ScheduleException("schedule " + name + ": " + stages + " stages cannot be spread evenly over "
                    + ranks + " ranks; expected a multiple of " + ranks + " stages");
        }
        int perRank = stages / ranks;
        int[][] stagesOfRank = new int[ranks][perRank];
        int[] filled = new int[ranks];
        for (int r = 0; r < ranks; r++) {
            if (count[r] != perRank) {
                throw new ScheduleException("schedule " + name + ": rank " + r + " holds " + count[r] + " stages, expected "
                        + perRank + " (" + stages + " stages over " + ranks + " ranks)");
            }
        }
        for (int s = 0; s < stages; s++) {
            int r = rankOfStage[s];
            stagesOfRank[r][filled[r]++] = s;
        }
        return new Schedule(name, List.copyOf(copy), stages, maxMicrobatch + 1, rankOfStage, stagesOfRank, lowered, size);
    }

    /**
     * The error for a stage number no action has, the smallest, when {@code maxStage} is at least the
     * number of actions {@code size}: at most {@code size} stages are present, so it is below {@code size}.
     */
    private static ScheduleException gapInStages(String name, List<List<Action>> rows, int maxStage, int size) {
        BitSet present = new BitSet(size);
        for (List<Action> row : rows) {
            for (Action a : row) if (a.stage() < size) present.set(a.stage());
        }
        int missing = present.nextClearBit(0);
        return new ScheduleException("schedule " + name + ": stage " + missing + " appears on no rank, but stage "
                + maxStage + " does; stages must be numbered 0.." + maxStage + " without gaps");
    }

    public String name() {
        return name;
    }

    /** Number of ranks (P), one row each. */
    public int ranks() {
        return rows.size();
    }

    /** Number of stages, {@code ranks() * virtualStages()}. */
    public int stages() {
        return stages;
    }

    /** Number of microbatches (M): the largest microbatch index plus one. */
    public int microbatches() {
        return microbatches;
    }

    /** Stages per rank (V). */
    public int virtualStages() {
        return stages / rows.size();
    }

    /** The rank that holds {@code stage}. */
    public int rankOfStage(int stage) {
        return rankOfStage[stage];
    }

    /** The stages {@code rank} holds, ascending. */
    public int[] stagesOfRank(int rank) {
        return stagesOfRank[rank].clone();
    }

    /** The actions of {@code rank}, in the order it runs them (unmodifiable). */
    public List<Action> row(int rank) {
        return rows.get(rank);
    }

    /** All rows, rank 0 first (unmodifiable). */
    public List<List<Action>> rows() {
        return rows;
    }

    /** Whether the schedule holds communication actions (SEND/RECV), i.e. has been lowered. */
    public boolean isLowered() {
        return lowered;
    }

    /** Total number of actions over all ranks. */
    public int size() {
        return size;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Schedule other && rows.equals(other.rows);
    }

    @Override
    public int hashCode() {
        return rows.hashCode();
    }

    @Override
    public String toString() {
        return name + " (P=" + ranks() + ", V=" + virtualStages() + ", M=" + microbatches + ", "
                + size + " actions" + (lowered ? ", lowered" : "") + ")";
    }
}

package dev.ttpipe.actors.tune;

import java.util.Arrays;

/**
 * One point of the search: a schedule with its stages per rank, the number of microbatches, the
 * blocks of each rank (TTML's {@code blocks_per_rank}) and whether blocks recompute their
 * activations in backward ({@code runner_type: memory_efficient}).
 */
public record Candidate(String schedule, int virtualStages, int microbatches, int[] blocksPerRank, boolean recompute) {
    public int ranks() {
        return blocksPerRank.length;
    }

    /** {@code {0: 1, 1: 2, ...}}, as a config writes it. */
    public String split() {
        StringBuilder b = new StringBuilder();
        for (int r = 0; r < blocksPerRank.length; r++) b.append(r == 0 ? "" : ",").append(blocksPerRank[r]);
        return b.toString();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Candidate c && c.schedule.equals(schedule) && c.virtualStages == virtualStages
                && c.microbatches == microbatches && Arrays.equals(c.blocksPerRank, blocksPerRank) && c.recompute == recompute;
    }

    @Override
    public int hashCode() {
        return ((schedule.hashCode() * 31 + virtualStages) * 31 + microbatches) * 31 + Arrays.hashCode(blocksPerRank)
                + (recompute ? 1 : 0);
    }

    @Override
    public String toString() {
        return schedule + (virtualStages > 1 ? " V=" + virtualStages : "") + ", M=" + microbatches + ", split [" + split() + "]"
                + (recompute ? ", recompute" : "");
    }
}

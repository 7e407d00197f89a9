package dev.ttpipe.stages;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Splits a model's blocks into pipeline stages. Either TTML's {@code blocks_per_rank} (rank ->
 * count, covering ranks 0..P-1 and summing to num_blocks) or an automatic split balanced by
 * estimated cost, in which the embedding and the head weigh on the end stages. With V virtual
 * stages per rank there are P x V stages; stage s runs on rank s mod P (interleaved order), and a
 * rank's blocks are divided as evenly as possible among its V stages.
 */
public final class Partitioner {
    private Partitioner() {
    }

    /** The split TTML's blocks_per_rank gives. */
    public static List<StageSlice> fromBlocksPerRank(List<Integer> blocksPerRank, int numBlocks, int virtualStages) {
        int ranks = blocksPerRank.size();
        String key = "multihost_config.pipeline_parallel_config.blocks_per_rank";
        if (ranks == 0) throw new StagesException(key + ": empty, expected a count for each rank 0..P-1");
        int sum = 0;
        for (int r = 0; r < ranks; r++) {
            int n = blocksPerRank.get(r);
            if (n < 1) throw new StagesException(key + ": rank " + r + " is missing or has " + n + " blocks, expected >= 1 for every rank 0.." + (ranks - 1));
            if (n < virtualStages) {
                throw new StagesException(key + ": rank " + r + " has " + n + " blocks for " + virtualStages
                        + " virtual stages, expected at least one block per virtual stage");
            }
            sum += n;
        }
        if (sum != numBlocks) {
            throw new StagesException(key + ": " + blocksPerRank + " sums to " + sum + ", expected num_blocks = " + numBlocks
                    + " (" + (sum > numBlocks ? (sum - numBlocks) + " too many" : (numBlocks - sum) + " too few") + ")");
        }
        int stages = ranks * virtualStages;
        int[] perStage = new int[stages];
        for (int r = 0; r < ranks; r++) {
            int n = blocksPerRank.get(r);
            for (int v = 0; v < virtualStages; v++) {
                perStage[v * ranks + r] = n / virtualStages + (v < n % virtualStages ? 1 : 0);
            }
        }
        return slices(perStage, ranks);
    }

    /**
     * A contiguous split over {@code ranks x virtualStages} stages minimising the most expensive
     * stage, where a block costs {@code blockCost}, and the first and last stages also pay for the
     * embedding and the head ({@code embeddingCost}, {@code headCost}, in the same unit).
     */
    public static List<StageSlice> balanced(int numBlocks, int ranks, int virtualStages, double blockCost,
                                            double embeddingCost, double headCost) {
        int stages = ranks * virtualStages;
        if (stages > numBlocks) {
            throw new StagesException("multihost_config.pipeline_parallel_config: " + stages + " stages for " + numBlocks
                    + " blocks, expected at most one stage per block");
        }
        // Binary search on the bottleneck cost; greedy fill checks feasibility (every stage >= 1 block).
        double lo = 0, hi = embeddingCost + headCost + numBlocks * blockCost;
        int[] best = null;
        for (int iter = 0; iter < 60; iter++) {
            double mid = (lo + hi) / 2;
            int[] fit = fill(numBlocks, stages, blockCost, embeddingCost, headCost, mid);
            if (fit != null) {
                best = fit;
                hi = mid;
            } else {
                lo = mid;
            }
        }
        if (best == null) best = fill(numBlocks, stages, blockCost, embeddingCost, headCost, hi);
        return slices(best, ranks);
    }

    /** What a block, the embedding and the head cost, in one unit (FLOPs of one sequence, forward and backward). */
    public record Costs(double block, double embedding, double head) {
        /** What {@code slice} costs: its blocks, plus the embedding and the head where it holds them. */
        public double of(StageSlice slice) {
            return slice.blocks() * block + (slice.embedding() ? embedding : 0) + (slice.head() ? head : 0);
        }
    }

    /** Default cost estimate: training FLOPs of a block, the head and a small embedding cost. */
    public static Costs costs(ModelSpec spec, int seqLen) {
        double block = spec.blockTrainingFlops(seqLen, seqLen);
        double head = spec.headTrainingFlops(seqLen) + block * 0.05;  // plus norm and loss
        double embed = 4.0 * spec.embeddingDim() * seqLen;             // lookups and scatter-adds: memory bound
        return new Costs(block, embed, head);
    }

    /** {@link #balanced} with the {@link #costs default cost estimate}. */
    public static List<StageSlice> balanced(ModelSpec spec, int ranks, int virtualStages, int seqLen) {
        Costs c = costs(spec, seqLen);
        return balanced(spec.numBlocks(), ranks, virtualStages, c.block(), c.embedding(), c.head());
    }

    /**
     * Blocks per rank for ranks of unequal speed: rank r takes {@code slowdown[r]} times as long as
     * planned for the same work, and holds the embedding ({@code embedding[r]}) and the head
     * ({@code head[r]}) where it does now. Minimises the slowest rank's time: every rank starts with
     * one block per virtual stage and each further block goes to the rank that would then finish
     * first (which is optimal, each rank's time growing with its blocks).
     */
    public static int[] rebalanced(int numBlocks, int virtualStages, Costs costs, boolean[] embedding, boolean[] head,
                                   double[] slowdown) {
        int ranks = slowdown.length;
        int[] blocks = new int[ranks];
        Arrays.fill(blocks, virtualStages);
        int left = numBlocks - ranks * virtualStages;
        if (left < 0) throw new StagesException(numBlocks + " blocks for " + ranks + " ranks of " + virtualStages
                + " virtual stages, expected at least one block per stage");
        for (; left > 0; left--) {
            int best = 0;
            double bestTime = Double.MAX_VALUE, bestNow = Double.MAX_VALUE;
            for (int r = 0; r < ranks; r++) {
                double now = time(r, blocks[r], costs, embedding, head, slowdown);
                double t = time(r, blocks[r] + 1, costs, embedding, head, slowdown);
                if (t < bestTime || t == bestTime && now < bestNow) {     // a tie: the rank with less to do now
                    bestTime = t;
                    bestNow = now;
                    best = r;
                }
            }
            blocks[best]++;
        }
        return blocks;
    }

    private static double time(int r, int blocks, Costs costs, boolean[] embedding, boolean[] head, double[] slowdown) {
        return slowdown[r] * (blocks * costs.block() + (embedding[r] ? costs.embedding() : 0) + (head[r] ? costs.head() : 0));
    }

    private static int[] fill(int numBlocks, int stages, double blockCost, double embedCost, double headCost, double cap) {
        int[] counts = new int[stages];
        int remaining = numBlocks;
        for (int s = 0; s < stages; s++) {
            int stagesLeft = stages - s - 1;
            double budget = cap - (s == 0 ? embedCost : 0) - (s == stages - 1 ? headCost : 0);
            int n = (int) Math.floor(budget / blockCost + 1e-9);
            n = Math.min(n, remaining - stagesLeft);   // leave one block for every later stage
            if (s == stages - 1) {
                if (remaining > n) return null;
                n = remaining;
            }
            if (n < 1) return null;
            counts[s] = n;
            remaining -= n;
        }
        return remaining == 0 ? counts : null;
    }

    private static List<StageSlice> slices(int[] blocksPerStage, int ranks) {
        List<StageSlice> out = new ArrayList<>();
        int first = 0;
        for (int s = 0; s < blocksPerStage.length; s++) {
            int end = first + blocksPerStage[s];
            out.add(new StageSlice(s, s % ranks, first, end, s == 0, s == blocksPerStage.length - 1));
            first = end;
        }
        return out;
    }
}

package dev.ttpipe.actors.tune;

import dev.ttpipe.actors.config.ConfigValidator;
import dev.ttpipe.actors.config.Sizes;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.train.TrainingData;
import dev.ttpipe.schedules.Schedules;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.StageSlice;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;

/**
 * A tune of one config: what it leaves free to search ({@code --fix} keeps the config's schedule,
 * microbatches, split or recompute; {@code --ranks} frees the number of pipeline ranks), the candidate
 * the config itself is, and the config a candidate becomes (everything else as the config has it).
 */
public final class Tuning {
    private final TtpipeConfig cfg;
    private final Set<String> fixed;
    private final JobPlan plan;
    private final List<Integer> ranks;

    public Tuning(TtpipeConfig cfg, Set<String> fixed) {
        this(cfg, fixed, null);
    }

    /** @param ranks the pipeline rank counts to search; null: the config's */
    public Tuning(TtpipeConfig cfg, Set<String> fixed, List<Integer> ranks) {
        this.cfg = cfg;
        this.fixed = fixed;
        this.plan = JobPlan.from(cfg, vocab(cfg));
        this.ranks = ranks == null ? List.of(plan.ranks()) : List.copyOf(ranks);
    }

    /** The rank counts searched. */
    public List<Integer> ranks() {
        return ranks;
    }

    /** The vocabulary the job trains with: the config's vocab_size, else its data's (as `ttpipe train` builds it). */
    public static int vocab(TtpipeConfig cfg) {
        return cfg.transformer.vocabSize > 0 ? cfg.transformer.vocabSize
                : TrainingData.load(cfg).dataset().tokenizer().vocabSize();
    }

    /** The config's own candidate: its schedule, V, M, split (the automatic one resolved) and runner type. */
    public Candidate shipped() {
        return new Candidate(Schedules.canonicalName(cfg.pipeline().schedule), plan.schedule().virtualStages(), plan.microbatches(),
                splitOf(plan), plan.model().recompute());
    }

    private static int[] splitOf(JobPlan plan) {
        int[] split = new int[plan.ranks()];
        // blocks_per_rank as Partitioner.fromBlocksPerRank reads it: rank r's blocks are stages r, r + P, ...
        for (StageSlice s : plan.slices()) split[s.index() % plan.ranks()] += s.blocks();
        return split;
    }

    /** The search space the config and {@code --fix} leave. */
    public Search.Space space() {
        Candidate own = shipped();
        List<String> schedules = fixed.contains("schedule") ? List.of(own.schedule()) : Schedules.names();
        List<Integer> microbatches = new ArrayList<>();
        int batch = cfg.training.batchSize;
        int ddp = ConfigValidator.ddpSize(cfg.device);
        if (fixed.contains("microbatches")) {
            microbatches.add(own.microbatches());
        } else {
            for (int m = 1; m <= batch; m++) if (batch % m == 0 && (batch / m) % ddp == 0) microbatches.add(m);
        }
        List<int[]> splits = fixed.contains("split") ? List.<int[]>of(own.blocksPerRank()) : null;
        List<Boolean> recompute = fixed.contains("recompute") ? List.of(own.recompute()) : List.of(false, true);
        int maxV = fixed.contains("schedule") && own.virtualStages() > 1 ? own.virtualStages() : 4;
        return new Search.Space(schedules, microbatches, splits, recompute, ranks, maxV);
    }

    /** How many candidates the space holds, at most (1: nothing to tune). */
    public long size(Search.Space s) {
        long splits = 0;
        for (int p : s.ranks()) splits += s.splits() != null ? s.splits().size() : plan.model().numBlocks() > p ? 2 : 1;
        return (long) s.schedules().size() * s.microbatches().size() * splits * s.recompute().size();
    }

    /** Which keys or flags leave each dimension no choice, for the "nothing to tune" line. */
    public String whyFixed() {
        List<String> why = new ArrayList<>();
        for (String d : List.of("schedule", "microbatches", "split", "recompute")) {
            if (fixed.contains(d)) why.add(d + " fixed by --fix");
        }
        if (!fixed.contains("microbatches") && space().microbatches().size() == 1) {
            why.add("microbatches fixed by training_config.batch_size " + cfg.training.batchSize);
        }
        if (!fixed.contains("split") && ranks.size() == 1 && plan.model().numBlocks() == plan.ranks()) {
            why.add("split fixed by num_blocks " + plan.model().numBlocks() + " = " + plan.ranks() + " ranks");
        }
        return String.join(", ", why);
    }

    /**
     * Refuses a device memory that cannot hold even an even share of the parameters with their gradients
     * and optimizer state: no split would fit.
     */
    public void checkMemory(String given) {
        ModelSpec m = plan.model();
        double params = m.numBlocks() * (double) m.blockParameters() + Calibration.embedParams(m) + Calibration.headParams(m);
        int most = Collections.max(ranks);
        double perRank = params * Calibration.stateBytesPerParam(cfg) / most / ConfigValidator.tpSize(cfg.device);
        if (cfg.device.memoryPerDevice < perRank) {
            throw new UserInputException(given + " per device is below the parameters' share of one rank: "
                    + Sizes.format((long) params) + " parameters x " + (int) Calibration.stateBytesPerParam(cfg)
                    + " bytes (weights, gradients, optimizer state) over " + most + " ranks = "
                    + Sizes.format((long) perRank) + "; expected at least that");
        }
    }

    /** The config {@code c} becomes: a copy of this one with its schedule, V, M, split and runner type. */
    public TtpipeConfig configOf(Candidate c) {
        TtpipeConfig out = Trial.copy(cfg);
        TtpipeConfig.PipelineConfig pc = out.pipeline();
        pc.schedule = c.schedule();
        pc.virtualStages = c.virtualStages();
        pc.numMicrobatches = c.microbatches();
        pc.autoSplit = false;
        pc.numRanks = 0;
        pc.blocksPerRank.clear();
        for (int b : c.blocksPerRank()) pc.blocksPerRank.add(b);
        if (out.multihost.numWorkers > 0 && c.ranks() != plan.ranks()) out.multihost.numWorkers = c.ranks();   // one per rank, as given
        out.transformer.runnerType = c.recompute() ? "memory_efficient" : "default";
        return out;
    }
}

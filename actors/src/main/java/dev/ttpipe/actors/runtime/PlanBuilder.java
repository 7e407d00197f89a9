package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.schedules.Lowering;
import dev.ttpipe.schedules.Schedule;
import dev.ttpipe.schedules.Schedules;
import dev.ttpipe.stages.LrSchedule;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.Partitioner;
import dev.ttpipe.stages.StageSlice;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/** Turns a validated config (and the data's vocabulary size) into a {@link JobPlan}. */
public final class PlanBuilder {
    private PlanBuilder() {
    }

    public static JobPlan build(TtpipeConfig cfg, int dataVocabSize) {
        ModelSpec model = model(cfg, dataVocabSize);
        if (model.weightTying() && cfg.pipeline().ranks() * cfg.pipeline().effectiveVirtualStages() > 1) {
            throw new dev.ttpipe.actors.config.ConfigException(cfg.origins.where("transformer_config.weight_tying")
                    + ": true given with " + cfg.pipeline().ranks() + " pipeline ranks; the token embedding (first stage) and"
                    + " the LM head (last stage) would be on different stages, expected weight_tying: false for a pipeline");
        }
        TtpipeConfig.PipelineConfig pc = cfg.pipeline();
        int ranks = pc.ranks();
        int v = pc.effectiveVirtualStages();
        Schedule schedule = Lowering.lower(Schedules.generate(pc.schedule, ranks, pc.numMicrobatches, v, null));
        int seq = cfg.transformer.effectiveSequenceLength();
        List<StageSlice> slices = pc.autoSplit
                ? Partitioner.balanced(model, ranks, schedule.virtualStages(), seq)
                : Partitioner.fromBlocksPerRank(pc.blocksPerRank, model.numBlocks(), schedule.virtualStages());
        slices = onRanks(slices, schedule);
        MeshShape rankMesh = new MeshShape(cfg.device.meshRows(), cfg.device.meshCols());
        Parallelism par = Parallelism.of(rankMesh, cfg.device.enableDdp, cfg.device.enableTp);
        TtpipeConfig.TrainingConfig t = cfg.training;
        int mbSize = t.batchSize / pc.numMicrobatches;
        return new JobPlan(t.projectName, t.seed, model, par, rankMesh, slices, schedule,
                "ready_first".equals(pc.mode), pc.numMicrobatches, mbSize, seq, t.gradientAccumulationSteps,
                optimizer(t), lrSchedule(t), t.useClipGradNorm ? t.clipGradNormMaxNorm : 0.0,
                cfg.device.backend, meshOptions(cfg, ranks), cfg.multihost.socketType);
    }

    public static ModelSpec model(TtpipeConfig cfg, int dataVocabSize) {
        TtpipeConfig.TransformerConfig tc = cfg.transformer;
        boolean llama = "llama".equals(tc.modelType);
        int vocab = tc.vocabSize > 0 ? tc.vocabSize : dataVocabSize;
        if (tc.vocabSize > 0 && tc.vocabSize < dataVocabSize) {
            throw new dev.ttpipe.actors.config.ConfigException(cfg.origins.where("transformer_config.vocab_size") + ": "
                    + tc.vocabSize + " given, but the data has " + dataVocabSize + " distinct characters; expected >= "
                    + dataVocabSize + " (or leave it out to take the data's)");
        }
        int kv = tc.numGroups > 0 ? tc.numGroups : tc.numHeads;
        int ff = tc.intermediateDim > 0 ? tc.intermediateDim
                : llama ? ModelSpec.llamaIntermediate(tc.embeddingDim) : 4 * tc.embeddingDim;
        return new ModelSpec(llama ? ModelSpec.ModelType.LLAMA : ModelSpec.ModelType.GPT2, vocab, tc.embeddingDim,
                tc.numHeads, kv, tc.numBlocks, ff, tc.maxSequenceLength, (float) tc.dropoutProb, tc.weightTying,
                (float) tc.theta, "memory_efficient".equals(tc.runnerType));
    }

    static OptimizerSpec optimizer(TtpipeConfig.TrainingConfig t) {
        if ("sgd".equals(t.optimizer)) {
            return new OptimizerSpec(OptimizerSpec.Kind.SGD, t.learningRate, t.weightDecay, t.beta1, t.beta2, t.epsilon,
                    t.momentum, t.dampening, t.nesterov);
        }
        return new OptimizerSpec(OptimizerSpec.Kind.ADAMW, t.learningRate, t.weightDecay, t.beta1, t.beta2, t.epsilon,
                t.momentum, t.dampening, t.nesterov);
    }

    static LrSchedule lrSchedule(TtpipeConfig.TrainingConfig t) {
        LrSchedule.Kind kind = LrSchedule.Kind.valueOf(t.schedulerType.toUpperCase(Locale.ROOT));
        return new LrSchedule(kind, t.learningRate, t.warmupSteps, t.maxSteps, t.minLearningRate);
    }

    static MeshOptions meshOptions(TtpipeConfig cfg, int ranks) {
        TtpipeConfig.SimCostConfig s = cfg.device.sim;
        // Auto: the pipeline's ranks already keep the cores busy; kernels split further only when cores are left over.
        int threads = cfg.device.threads > 0 ? cfg.device.threads
                : Math.max(1, Runtime.getRuntime().availableProcessors() / Math.max(1, ranks));
        return new MeshOptions(cfg.device.memoryPerDevice, threads,
                new SimCosts(s.gflops, s.memoryGbps, s.opLatencyUs, s.linkGbps, 1.0), cfg.device.bridgeLibrary);
    }

    /** Puts each stage on the rank the schedule runs it on (interleaved: s mod P; V-shaped schedules differ). */
    static List<StageSlice> onRanks(List<StageSlice> slices, Schedule schedule) {
        List<StageSlice> out = new ArrayList<>();
        for (StageSlice s : slices) {
            out.add(new StageSlice(s.index(), schedule.rankOfStage(s.index()), s.firstBlock(), s.endBlock(), s.embedding(), s.head()));
        }
        return out;
    }

}

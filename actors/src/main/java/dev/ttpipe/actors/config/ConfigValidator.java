package dev.ttpipe.actors.config;

import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.cpu.CpuKernels;
import dev.ttpipe.device.cpu.MatmulTable;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * The checks that span keys (blocks_per_rank against num_blocks, heads against the embedding, the
 * mesh shape against the enabled strategies, ...), run after flags have overridden the file. Every
 * problem names the file and line of the key (or the flag that set it).
 */
public final class ConfigValidator {
    private ConfigValidator() {
    }

    public static void validate(TtpipeConfig cfg) {
        ConfigProblems p = cfg.origins;
        p.problems().clear(); // validate may run again after more flags were applied
        HfShape.applyShape(cfg);
        checkModel(cfg, p);
        checkPipeline(cfg, p);
        checkMesh(cfg, p);
        checkBatch(cfg, p);
        checkRankBindings(cfg, p);
        checkNotSupportedYet(cfg, p);
        checkTtmlKeys(cfg, p);
        checkModelFamily(cfg, p);
        checkEnvironment(cfg, p);
        checkContradictions(cfg, p);
        TlsCheck.check(cfg, p);
        p.throwIfAny();
    }

    /** Where transformer_config's {@code key} was given (training_config.transformer_config, a model_config file, ...). */
    private static String whereTransformer(TtpipeConfig cfg, String key) {
        String at = cfg.transformer.givenAt.get(key);
        return at != null ? at : cfg.origins.where("transformer_config." + key);
    }

    /**
     * TTML's training keys whose ttpipe meaning is narrower than TTML's: the values ttpipe cannot honour
     * are refused by name (TTML's defaults, and values that mean what ttpipe does, are accepted).
     */
    private static void checkTtmlKeys(TtpipeConfig cfg, ConfigProblems p) {
        TtpipeConfig.TrainingConfig t = cfg.training;
        String tc = "training_config.";
        if (t.useKahanSummation) {
            p.add(tc + "use_kahan_summation", "true given: not supported (ttpipe's AdamW update is not Kahan-compensated;"
                    + " its weights and moments are fp32), expected false or the key left out");
        }
        if (t.useMorehAdamw && (t.useNoOp || !"adamw".equals(t.optimizer))) {
            p.add(tc + "use_moreh_adamw", "true given with " + (t.useNoOp ? cfg.origins.where(tc + "use_no_op") + ": true"
                    : cfg.origins.where(tc + "optimizer") + ": " + t.optimizer) + " (MorehAdamW is an AdamW), expected optimizer"
                    + " adamw, or use_moreh_adamw false");
        }
        if (t.useNoOp && cfg.origins.given(tc + "optimizer")) {
            p.add(tc + "use_no_op", "true given beside " + cfg.origins.where(tc + "optimizer") + ": " + t.optimizer
                    + " (use_no_op is TTML's NoOp optimizer, which updates nothing), expected one of them");
        }
        if (t.saveAndExit != null) {
            Path dir = Path.of(t.saveAndExit);
            if (cfg.device.backend == Backend.SIM) {
                p.add(tc + "save_and_exit", "'" + t.saveAndExit + "' given with " + cfg.origins.where("device_config.backend")
                        + ": sim (its weights are placeholders, there is nothing to save), expected backend cpu or ttnn, or the"
                        + " key left out");
            } else if (Files.exists(dir) && !Files.isDirectory(dir)) {
                p.add(tc + "save_and_exit", "'" + t.saveAndExit + "' given: a file, expected a folder for the checkpoint (it"
                        + " gets step-NNNNNN/ and latest)");
            }
        }
        if (cfg.transformer.useCompositeLayernorm) {
            p.addRaw(whereTransformer(cfg, "experimental.use_composite_layernorm") + ": true given: not supported (ttpipe has one"
                    + " LayerNorm kernel per backend; TTML's composite LayerNorm is a choice of kernel), expected false or the"
                    + " key left out");
        }
    }

    /**
     * Keys of one model family given for the other: the Llama family's (theta, rope_scaling, head_dim) for a GPT-2
     * (whether transformer_config or training_config chose it), and rope_scaling where the backend cannot apply it.
     */
    private static void checkModelFamily(TtpipeConfig cfg, ConfigProblems p) {
        TtpipeConfig.TransformerConfig t = cfg.transformer;
        if (!t.llamaFamily()) {
            String chosen = cfg.origins.given("training_config.model_type") ? cfg.origins.where("training_config.model_type")
                    : t.givenAt.containsKey("model_type") ? t.givenAt.get("model_type") : "the default";
            for (String key : List.of("theta", "rope_scaling", "head_dim")) {
                if (key.equals("rope_scaling") ? t.ropeScaling != null : t.givenAt.containsKey(key)) {   // rope_scaling: null is none
                    String why = key.equals("head_dim") ? "gpt2's head size is embedding_dim / num_heads"
                            : key + " sets RoPE, which gpt2 does not use";
                    p.addRaw(whereTransformer(cfg, key) + ": given for model_type " + t.modelType + " (" + chosen + "), expected it"
                            + " only for llama or qwen3 (" + why + ")");
                }
            }
        } else if (t.ropeScaling != null && cfg.device.backend == Backend.TTNN) {
            p.addRaw(whereTransformer(cfg, "rope_scaling") + ": " + t.ropeScaling + " given with " + cfg.origins.where("device_config.backend")
                    + ": ttnn: not supported (the bridge's rope op takes theta only), expected backend cpu or sim, or the key left out");
        }
    }

    /** Variables ttpipe launch sets for each rank itself (from rank_bindings and max_restarts). */
    static final List<String> SET_PER_RANK = List.of("TT_MESH_ID", "TT_MESH_HOST_RANK", "TTPIPE_LAUNCHED", "TTPIPE_MAX_RESTARTS");

    /**
     * A path the config names that is not there: one line naming every place looked when the file gave it relative
     * and it is in none ({@link ConfigProblems#notFound}), else {@code otherwise}.
     */
    private static void missing(ConfigProblems p, String key, String expected, String otherwise) {
        String nowhere = p.notFound(key, expected);
        if (nowhere != null) p.addRaw(nowhere);
        else p.add(key, otherwise);
    }

    /** global_env and mesh_graph_desc_path. */
    private static void checkEnvironment(TtpipeConfig cfg, ConfigProblems p) {
        for (String name : SET_PER_RANK) {
            if (cfg.globalEnv.containsKey(name)) {
                p.add("global_env." + name, "'" + cfg.globalEnv.get(name) + "' given: ttpipe launch sets " + name + " for each rank"
                        + " itself (from rank_bindings and training_config.max_restarts), expected the variable left out");
            }
        }
        checkMatmulSettings(cfg, p);
        String mgd = cfg.meshGraphDescPath;
        if (mgd == null) return;
        if (!Files.isRegularFile(Path.of(mgd))) {
            String expected = "a tt-metal mesh graph descriptor (.textproto), which ttpipe passes on as " + TtpipeConfig.MESH_GRAPH_DESC_ENV;
            missing(p, "mesh_graph_desc_path", expected, "'" + mgd + "' given: no such file, expected " + expected);
        }
        String env = cfg.globalEnv.get(TtpipeConfig.MESH_GRAPH_DESC_ENV);
        if (env != null && !env.equals(mgd)) {
            p.add("global_env." + TtpipeConfig.MESH_GRAPH_DESC_ENV, "'" + env + "' given beside " + cfg.origins.where("mesh_graph_desc_path")
                    + ": '" + mgd + "', expected one of them");
        }
    }

    /**
     * The cpu backend's matmul engines ({@code TTPIPE_BLAS}, {@code TTPIPE_BF16_GEMM}) are names it knows, and its
     * matmul table ({@code -Dttpipe.matmul.table}, else global_env's or the process's {@code TTPIPE_MATMUL_TABLE})
     * reads, with no fixed kernel ({@code TTPIPE_BLAS}) asked for beside it: checked here so a bad setting is one
     * line before anything runs, not a failure when the first mesh opens.
     */
    private static void checkMatmulSettings(TtpipeConfig cfg, ConfigProblems p) {
        if (cfg.device.backend != Backend.CPU) return;
        Setting table = setting(cfg, "TTPIPE_MATMUL_TABLE", "ttpipe.matmul.table");
        Setting kernel = setting(cfg, "TTPIPE_BLAS", "ttpipe.blas");
        Setting bf16 = setting(cfg, "TTPIPE_BF16_GEMM", "ttpipe.bf16.gemm");
        checkEngine(kernel, CpuKernels.FP32_ENGINES, p);
        checkEngine(bf16, CpuKernels.BF16_ENGINES, p);
        if (table == null) return;
        if (kernel != null && !kernel.value().equalsIgnoreCase("auto")) {
            p.addRaw(table.where() + ": '" + table.value() + "' given beside TTPIPE_BLAS=" + kernel.value() + ", expected one of"
                    + " them (the table picks the matmul kernel per shape)");
            return;
        }
        try {
            MatmulTable.read(Path.of(table.value()));
        } catch (DeviceException | java.nio.file.InvalidPathException e) {
            p.addRaw(table.where() + ": " + e.getMessage());
        }
    }

    private static void checkEngine(Setting engine, List<String> names, ConfigProblems p) {
        if (engine != null && !names.contains(engine.value().toLowerCase(Locale.ROOT))) {
            p.addRaw(engine.where() + ": '" + engine.value() + "' given, expected one of " + String.join(", ", names));
        }
    }

    /** A cpu backend setting's value (trimmed) and where it was given, or null where it is not. */
    private record Setting(String value, String where) {
    }

    /** {@code -Dproperty}, else global_env's {@code name}, else the process's: the order the cpu backend reads them in. */
    private static Setting setting(TtpipeConfig cfg, String name, String property) {
        String v = System.getProperty(property);
        if (v != null && !v.isBlank()) return new Setting(v.trim(), "-D" + property);
        v = cfg.globalEnv.get(name);
        if (v != null) return v.isBlank() ? null : new Setting(v.trim(), cfg.origins.where("global_env." + name));
        v = System.getenv(name);
        return v == null || v.isBlank() ? null : new Setting(v.trim(), name + " (the environment)");
    }

    /** Keys that each make sense alone but not together: the problem names both. */
    private static void checkContradictions(TtpipeConfig cfg, ConfigProblems p) {
        if (cfg.multihost.enabled && cfg.multihost.socketType == SocketType.LOCAL) {
            p.add("multihost_config.enabled", "true given with " + cfg.origins.where("multihost_config.socket_type")
                    + ": local (an in-process hand-over cannot cross processes), expected socket_type: aeron for ranks in"
                    + " separate processes, or enabled: false");
        }
    }

    /**
     * Keys ttpipe reads (TTML's files carry them) but does not implement yet: their default values are
     * accepted, any value that would change what a run does is refused by name, never ignored.
     */
    private static void checkNotSupportedYet(TtpipeConfig cfg, ConfigProblems p) {
        TtpipeConfig.TrainingConfig t = cfg.training;
        String tc = "training_config.";
        if (!cfg.device.deviceIds.isEmpty()) {
            p.add("device_config.device_ids", cfg.device.deviceIds + " given: not supported yet (each rank takes its"
                    + " mesh_shape of devices in order), expected [] or the key left out");
        }
        if (t.numEpochs != 1) {
            p.add(tc + "num_epochs", t.numEpochs + " given: not supported yet (a run lasts max_steps steps), expected 1"
                    + " or the key left out; set max_steps instead");
        }
        if (t.initFrom != null && !Files.isDirectory(Path.of(t.initFrom))
                && !"latest".equals(t.initFrom)) {
            String key = tc + (cfg.origins.given(tc + "model_path") ? "model_path" : "init_from");
            String expected = "a Hugging Face model directory (config.json + model.safetensors) or a ttpipe checkpoint";
            if (Files.isRegularFile(Path.of(t.initFrom))) {
                p.add(key, "'" + t.initFrom + "' given: a file, expected a directory: " + expected + " (a TTML .msgpack is not"
                        + " read; a Hugging Face model.safetensors is read from its folder, with its config.json)");
            } else {
                missing(p, key, expected, "'" + t.initFrom + "' given: no such directory, expected " + expected);
            }
        }
        if (t.dataPath == null && t.valDataPath != null) {       // the generated corpus holds out its own share
            p.add(tc + "val_data_path", "given without data_path (the generated arithmetic corpus holds out its own validation"
                    + " share), expected data_path beside it, or the key left out");
        }
        if (t.dataPath == null && t.tokenizerPath != null && "char".equals(t.tokenizerType)) {
            p.add(tc + "tokenizer_path", "given for tokenizer_type char without data_path (the generated arithmetic corpus has"
                    + " its own characters), expected data_path beside it, or the key left out");
        }
        if (t.tokenizerPath != null && t.tokenizerPath.endsWith(".json") && !"bpe".equals(t.tokenizerType)) {
            p.add(tc + "tokenizer_path", "'" + t.tokenizerPath + "' given with tokenizer_type " + t.tokenizerType
                    + ", expected tokenizer_type: bpe for a Hugging Face tokenizer.json");
        } else if (t.tokenizerPath != null && "bpe".equals(t.tokenizerType)
                && !TtpipeConfig.BUNDLED_TOKENIZERS.contains(t.tokenizerPath)
                && !Files.isRegularFile(Path.of(t.tokenizerPath))
                && !Files.isRegularFile(Path.of(t.tokenizerPath).resolve("tokenizer.json"))
                && !Files.isRegularFile(Path.of(t.tokenizerPath).resolve("tokenizer.txt"))) {
            String expected = "gpt2 (GPT-2's BPE, bundled), a Hugging Face tokenizer.json (or its folder) or a folder written by"
                    + " ttpipe prepare --tokenizer gpt2";
            missing(p, tc + "tokenizer_path", expected, "'" + t.tokenizerPath + "' given for tokenizer_type bpe, expected " + expected);
        }
        if (cfg.eval.topP != 1.0) {
            p.add("eval_config.top_p", cfg.eval.topP + " given: not supported yet (sampling uses temperature and"
                    + " top_k), expected 1.0 or the key left out");
        }
        if (cfg.eval.repetitionPenalty != 1.0) {
            p.add("eval_config.repetition_penalty", cfg.eval.repetitionPenalty + " given: not supported yet, expected 1.0"
                    + " or the key left out");
        }
        if (cfg.device.sim.calibration != null) {
            p.add("device_config.sim.calibration", "'" + cfg.device.sim.calibration + "' given: not supported yet"
                    + " (set gflops, memory_gbps, op_latency_us and link_gbps), expected the key left out");
        }
        String pos = cfg.transformer.positionalEmbeddingType;
        String expectedPos = cfg.transformer.llamaFamily() ? "rope" : "trainable";
        if (!expectedPos.equals(pos)) {
            p.add("transformer_config.positional_embedding_type", "'" + pos + "' given for model_type "
                    + cfg.transformer.modelType + ": not supported (" + cfg.transformer.modelType + " uses " + expectedPos
                    + " positions), expected " + expectedPos + " or the key left out");
        }
    }

    private static void checkModel(TtpipeConfig cfg, ConfigProblems p) {
        TtpipeConfig.TransformerConfig t = cfg.transformer;
        String tc = "transformer_config.";
        if (t.headDim == 0 && t.embeddingDim % t.numHeads != 0) {
            p.add(tc + "num_heads", t.numHeads + " heads do not divide embedding_dim " + t.embeddingDim
                    + ", expected a divisor of " + t.embeddingDim + " (or head_dim given, for llama and qwen3)");
        } else if (t.effectiveHeadDim() % 2 != 0 && "rope".equals(t.positionalEmbeddingType)) {
            p.add(tc + (t.headDim > 0 ? "head_dim" : "num_heads"), "head size " + t.effectiveHeadDim()
                    + " is odd, expected an even head size for rope (head_dim, or embedding_dim / num_heads)");
        }
        if (t.numGroups > 0 && t.numHeads % t.numGroups != 0) {
            p.add(tc + "num_groups", t.numGroups + " key/value groups do not divide num_heads " + t.numHeads
                    + ", expected a divisor of " + t.numHeads);
        }
        if ("gpt2".equals(t.modelType) && t.numGroups > 0 && t.numGroups != t.numHeads) {
            p.add(tc + "num_groups", t.numGroups + " given for model_type gpt2, expected it absent (grouped-query attention is llama's)");
        }
        if (t.sequenceLength > t.maxSequenceLength) {
            p.add(tc + "sequence_length", t.sequenceLength + " is longer than max_sequence_length "
                    + t.maxSequenceLength + ", expected <= " + t.maxSequenceLength);
        }
    }

    private static void checkPipeline(TtpipeConfig cfg, ConfigProblems p) {
        TtpipeConfig.PipelineConfig pc = cfg.pipeline();
        String pp = "multihost_config.pipeline_parallel_config.";
        int numBlocks = cfg.transformer.numBlocks;
        if (pc.numBlocks > 0 && pc.numBlocks != numBlocks) {
            p.add(pp + "num_blocks", pc.numBlocks + " given, expected transformer_config.num_blocks = " + numBlocks);
        }
        if (!pc.autoSplit) {
            List<Integer> bpr = pc.blocksPerRank;
            StringBuilder missing = new StringBuilder();
            int sum = 0;
            for (int r = 0; r < bpr.size(); r++) {
                if (bpr.get(r) == 0) missing.append(missing.length() == 0 ? "" : ", ").append(r);
                sum += bpr.get(r);
            }
            if (missing.length() > 0) {
                p.add(pp + "blocks_per_rank", "ranks 0.." + (bpr.size() - 1) + " must each be given at least one block; missing or zero: rank "
                        + missing);
            } else if (sum != numBlocks) {
                p.add(pp + "blocks_per_rank", bpr + " sums to " + sum + ", expected num_blocks = " + numBlocks
                        + " (" + (sum > numBlocks ? sum - numBlocks + " too many" : numBlocks - sum + " too few") + ")");
            }
            if (pc.numRanks > 0 && pc.numRanks != bpr.size()) {
                p.add(pp + "num_ranks", pc.numRanks + " given, but blocks_per_rank names " + bpr.size()
                        + " ranks, expected them to agree");
            }
        }
        int ranks = pc.ranks();
        int stages = ranks * pc.effectiveVirtualStages();
        if (pc.autoSplit && stages > numBlocks) {
            p.add(pp + (pc.effectiveVirtualStages() > 1 ? "virtual_stages" : "num_ranks"), ranks + " ranks x " + pc.effectiveVirtualStages()
                    + " virtual stages = " + stages + " stages for " + numBlocks + " blocks, expected at most one stage per block");
        }
        if (!pc.autoSplit && pc.effectiveVirtualStages() > 1) {
            for (int r = 0; r < pc.blocksPerRank.size(); r++) {
                if (pc.blocksPerRank.get(r) > 0 && pc.blocksPerRank.get(r) < pc.effectiveVirtualStages()) {
                    p.add(pp + "blocks_per_rank", "rank " + r + " has " + pc.blocksPerRank.get(r) + " blocks for "
                            + pc.effectiveVirtualStages() + " virtual stages, expected at least one block per virtual stage");
                    break;
                }
            }
        }
        if (cfg.multihost.numWorkers > 0 && cfg.multihost.numWorkers != ranks) {
            p.add("multihost_config.num_workers", cfg.multihost.numWorkers + " given for " + ranks + " pipeline ranks: not supported"
                    + " (ttpipe runs one worker process per pipeline rank), expected " + ranks + " or the key left out");
        }
        ScheduleCheck.check(cfg, p);
    }

    /**
     * Mirrors TTML's ParallelismContext: DDP takes the first mesh axis, TP the next; with a [1, N]
     * mesh and one strategy enabled, that strategy uses the N devices. Every axis with more than one
     * device must be used by a strategy.
     */
    private static void checkMesh(TtpipeConfig cfg, ConfigProblems p) {
        TtpipeConfig.DeviceConfig d = cfg.device;
        int rows = d.meshRows(), cols = d.meshCols();
        String shape = "[" + rows + ", " + cols + "]";
        String strategies = strategies(d);
        String expected;
        if (d.enableDdp && d.enableTp) {
            if (rows > 1 && cols > 1) return;
            expected = "[D, T] with D > 1 and T > 1 (DDP on axis 0, TP on axis 1), or enable one strategy";
        } else if (d.enableDdp || d.enableTp) {
            if (rows == 1 || cols == 1) return;
            expected = "a [1, N] mesh for one strategy, or enable both enable_ddp and enable_tp for " + shape;
        } else {
            if (rows == 1 && cols == 1) return;
            expected = "[1, 1] when neither enable_ddp nor enable_tp is set";
        }
        p.add("device_config.mesh_shape", shape + " with " + strategies + " cannot be used, expected " + expected);
    }

    static String strategies(TtpipeConfig.DeviceConfig d) {
        return "enable_ddp: " + d.enableDdp + ", enable_tp: " + d.enableTp;
    }

    /** Data-parallel and tensor-parallel sizes of one rank's mesh (valid once checkMesh passed). */
    public static int ddpSize(TtpipeConfig.DeviceConfig d) {
        if (!d.enableDdp) return 1;
        return d.enableTp ? d.meshRows() : d.meshRows() * d.meshCols();
    }

    public static int tpSize(TtpipeConfig.DeviceConfig d) {
        if (!d.enableTp) return 1;
        return d.enableDdp ? d.meshCols() : d.meshRows() * d.meshCols();
    }

    private static void checkBatch(TtpipeConfig cfg, ConfigProblems p) {
        int batch = cfg.training.batchSize;
        int m = cfg.pipeline().numMicrobatches;
        if (batch % m != 0) {
            p.add("multihost_config.pipeline_parallel_config.num_microbatches", m + " microbatches do not divide batch_size "
                    + batch + ", expected a divisor of " + batch);
            return;
        }
        int perMicrobatch = batch / m;
        int ddp = ddpSize(cfg.device);
        if (ddp > 1 && perMicrobatch % ddp != 0) {
            p.add("training_config.batch_size", batch + " / " + m + " microbatches = " + perMicrobatch
                    + " samples per microbatch, expected a multiple of the DDP size " + ddp + " (mesh_shape "
                    + cfg.device.meshShape + ")");
        }
        int tp = tpSize(cfg.device);
        TtpipeConfig.TransformerConfig t = cfg.transformer;
        if (tp > 1) {
            if (t.numHeads % tp != 0) {
                p.add("transformer_config.num_heads", t.numHeads + " heads cannot be split over TP size " + tp
                        + " (mesh_shape " + cfg.device.meshShape + "), expected a multiple of " + tp);
            }
            int kv = t.numGroups > 0 ? t.numGroups : t.numHeads;
            if (kv % tp != 0 && t.numHeads % tp == 0) {
                p.add("transformer_config.num_groups", kv + " key/value groups cannot be split over TP size " + tp
                        + ", expected a multiple of " + tp);
            }
            if (t.intermediateDim > 0 && t.intermediateDim % tp != 0) {
                p.add("transformer_config.intermediate_dim", t.intermediateDim + " cannot be split over TP size " + tp
                        + ", expected a multiple of " + tp);
            }
        }
    }

    private static void checkRankBindings(TtpipeConfig cfg, ConfigProblems p) {
        if (cfg.rankBindings.isEmpty()) return;
        Set<Integer> seen = new HashSet<>();
        for (int i = 0; i < cfg.rankBindings.size(); i++) {
            int r = cfg.rankBindings.get(i).rank;
            if (r < 0) continue;
            if (!seen.add(r)) {
                p.add("rank_bindings[" + i + "].rank", r + " is bound twice, expected each rank bound once");
            }
        }
        int workers = cfg.pipeline().ranks();                   // one worker process per rank (num_workers is checked to agree)
        for (int r = 0; r < workers; r++) {
            if (!seen.contains(r)) {
                p.add("rank_bindings", "rank " + r + " is missing, expected a binding for every rank 0.." + (workers - 1));
            }
        }
        for (int r : seen) {
            if (r >= workers) {
                p.add("rank_bindings", "rank " + r + " is bound but the job has " + workers
                        + " workers, expected ranks 0.." + (workers - 1));
            }
        }
    }
}

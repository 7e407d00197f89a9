package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.ConfigValidator;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.PipelineMode;
import dev.ttpipe.actors.config.YamlSection;
import dev.ttpipe.actors.telemetry.Terminal;
import dev.ttpipe.stages.data.TokenFiles;
import picocli.CommandLine.Option;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * The flags that override a config's keys, shared by train, verify, worker and launch: one flag per common key,
 * and {@code --set KEY=VALUE} for any key. Each is recorded as the origin of its key, so a problem with it names
 * the flag.
 */
public final class JobOptions {
    @Option(names = "--data", paramLabel = "FILE", description = "Train on this UTF-8 text file or token files (.bin, a directory or a glob; training_config.data_path).")
    Path data;

    @Option(names = "--stages", paramLabel = "P", description = "Pipeline ranks (replaces blocks_per_rank with an automatic split when they differ).")
    Integer stages;

    @Option(names = "--microbatches", paramLabel = "M", description = "Microbatches per batch (pipeline_parallel_config.num_microbatches).")
    Integer microbatches;

    @Option(names = "--schedule", paramLabel = "NAME", description = "gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-greedy, dualpipev.")
    String schedule;

    @Option(names = "--virtual-stages", paramLabel = "V", description = "Stages per rank for interleaved schedules.")
    Integer virtualStages;

    @Option(names = "--max-steps", paramLabel = "N", description = "Optimizer steps (training_config.max_steps).")
    Integer maxSteps;

    @Option(names = "--batch-size", paramLabel = "B", description = "Sequences per step (training_config.batch_size).")
    Integer batchSize;

    @Option(names = "--backend", paramLabel = "NAME", description = "cpu, sim or ttnn (device_config.backend).")
    String backend;

    @Option(names = "--mode", paramLabel = "MODE", description = "static (the schedule's order) or ready-first.")
    String mode;

    @Option(names = "--seed", paramLabel = "N", description = "Seed for weights, data and dropout (training_config.seed).")
    Integer seed;

    @Option(names = "--dtype", paramLabel = "DTYPE", description = "fp32 or bf16: activations and matmul operands (device_config.dtype).")
    String dtype;

    @Option(names = "--set", paramLabel = "KEY=VALUE", description = {"Set any config key, dotted as in the YAML",
            "(training_config.learning_rate=3e-4; repeatable; checked as the file is). The flags above win over it."})
    List<String> sets = new ArrayList<>();

    /** The flags given, as arguments to pass on to worker processes. */
    public List<String> toArgs() {
        List<String> a = new ArrayList<>();
        if (data != null) a.addAll(List.of("--data", data.toString()));
        if (stages != null) a.addAll(List.of("--stages", stages.toString()));
        if (microbatches != null) a.addAll(List.of("--microbatches", microbatches.toString()));
        if (schedule != null) a.addAll(List.of("--schedule", schedule));
        if (virtualStages != null) a.addAll(List.of("--virtual-stages", virtualStages.toString()));
        if (maxSteps != null) a.addAll(List.of("--max-steps", maxSteps.toString()));
        if (batchSize != null) a.addAll(List.of("--batch-size", batchSize.toString()));
        if (backend != null) a.addAll(List.of("--backend", backend));
        if (mode != null) a.addAll(List.of("--mode", mode));
        if (seed != null) a.addAll(List.of("--seed", seed.toString()));
        if (dtype != null) a.addAll(List.of("--dtype", dtype));
        for (String set : sets) a.addAll(List.of("--set", set));
        return a;
    }

    /** Reads {@code file} (or the embedded {@code defaultResource}), applies the flags, validates. */
    public TtpipeConfig resolve(Path file, String defaultResource) {
        TtpipeConfig cfg = file == null ? ConfigLoader.readResource(defaultResource, sets) : ConfigLoader.read(file, sets);
        apply(cfg);
        ConfigValidator.validate(cfg);
        for (String note : cfg.origins.notes()) Terminal.printWrapped(System.err, "ttpipe: " + note);
        return cfg;
    }

    void apply(TtpipeConfig cfg) {
        String pp = "multihost_config.pipeline_parallel_config.";
        if (data != null) {
            if (!Files.isRegularFile(data) && !TokenFiles.isTokenPath(data.toString())) {
                throw new UserInputException("--data: " + data + " is not a readable file, expected a UTF-8 text file or token files");
            }
            cfg.training.dataPath = data.toString();
            cfg.origins.recordFlag("training_config.data_path", "--data");
        }
        if (stages != null) {
            positive("--stages", stages);
            TtpipeConfig.PipelineConfig pc = cfg.pipeline();
            if (!pc.autoSplit && pc.blocksPerRank.size() != stages) {
                pc.autoSplit = true;
                pc.blocksPerRank.clear();
            }
            pc.numRanks = stages;
            cfg.origins.recordFlag(pp + "num_ranks", "--stages");
            cfg.origins.recordFlag(pp + "blocks_per_rank", "--stages");
            if (cfg.multihost.numWorkers > 0) {                 // one worker process per rank: it follows the ranks
                cfg.multihost.numWorkers = stages;
                cfg.origins.recordFlag("multihost_config.num_workers", "--stages");
            }
        }
        if (microbatches != null) {
            positive("--microbatches", microbatches);
            cfg.pipeline().numMicrobatches = microbatches;
            cfg.origins.recordFlag(pp + "num_microbatches", "--microbatches");
        }
        if (schedule != null) {
            cfg.pipeline().schedule = schedule;
            cfg.origins.recordFlag(pp + "schedule", "--schedule");
        }
        if (virtualStages != null) {
            positive("--virtual-stages", virtualStages);
            cfg.pipeline().virtualStages = virtualStages;
            cfg.origins.recordFlag(pp + "virtual_stages", "--virtual-stages");
        }
        if (maxSteps != null) {
            positive("--max-steps", maxSteps);
            cfg.training.maxSteps = maxSteps;
            cfg.origins.recordFlag("training_config.max_steps", "--max-steps");
        }
        if (batchSize != null) {
            positive("--batch-size", batchSize);
            cfg.training.batchSize = batchSize;
            cfg.origins.recordFlag("training_config.batch_size", "--batch-size");
        }
        if (backend != null) {
            Backend b = YamlSection.parseEnum(backend, Backend.class);
            if (b == null) {
                throw new UserInputException("--backend: '" + backend + "' given, expected one of "
                        + String.join(", ", YamlSection.enumNames(Backend.class)));
            }
            cfg.device.backend = b;
            cfg.origins.recordFlag("device_config.backend", "--backend");
        }
        if (mode != null) {
            PipelineMode m = YamlSection.parseEnum(mode, PipelineMode.class);
            if (m == null) throw new UserInputException("--mode: '" + mode + "' given, expected static or ready-first");
            cfg.pipeline().mode = m;
            cfg.origins.recordFlag(pp + "mode", "--mode");
        }
        if (seed != null) {
            cfg.training.seed = seed;
            cfg.origins.recordFlag("training_config.seed", "--seed");
        }
        if (dtype != null) {
            if (!dtype.equals("fp32") && !dtype.equals("bf16")) {
                throw new UserInputException("--dtype: '" + dtype + "' given, expected fp32 or bf16");
            }
            cfg.device.dtype = dtype;
            cfg.origins.recordFlag("device_config.dtype", "--dtype");
        }
    }

    /**
     * {@code training_config.max_restarts} is carried out by `ttpipe launch` and `ttpipe worker` (whose
     * ranks run in processes of their own, one of which can die and be started again); `train` and
     * `verify`, one process for all ranks, refuse a value above 0 by name rather than ignore it.
     */
    static void refuseRestarts(TtpipeConfig cfg, String command) {
        if (cfg.training.maxRestarts > 0) {
            throw new UserInputException(cfg.origins.where("training_config.max_restarts") + ": " + cfg.training.maxRestarts
                    + " given for `" + command + "`: only a job of worker processes (`ttpipe launch`, `ttpipe worker`) recovers"
                    + " from a dead rank, expected 0"
                    + " or the key left out");
        }
    }

    private static void positive(String flag, int v) {
        if (v < 1) throw new UserInputException(flag + ": " + v + " given, expected a positive integer");
    }
}

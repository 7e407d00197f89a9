package dev.ttpipe.actors.config;

import java.io.File;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;

/** Writes a resolved config back as YAML in the same shape it is read (saved with every run). */
public final class ConfigWriter {
    private ConfigWriter() {
    }

    public static String toYaml(TtpipeConfig c) {
        StringBuilder y = new StringBuilder();
        y.append("# resolved from ").append(c.source).append(" (flags applied)\n");
        TtpipeConfig.TrainingConfig t = c.training;
        y.append("training_config:\n");
        kv(y, 2, "project_name", quote(t.projectName));
        kv(y, 2, "seed", t.seed);
        kv(y, 2, "batch_size", t.batchSize);
        kv(y, 2, "max_steps", t.maxSteps);
        kv(y, 2, "learning_rate", t.learningRate);
        kv(y, 2, "weight_decay", t.weightDecay);
        if (t.useNoOp) {
            kv(y, 2, "use_no_op", true);                       // TTML's NoOp optimizer, instead of optimizer and its settings
        } else {
            kv(y, 2, "optimizer", t.optimizer);
        }
        if (t.useNoOp) {
            // nothing: no optimizer settings apply
        } else if (t.optimizer.equals("adamw")) {
            kv(y, 2, "beta1", t.beta1);
            kv(y, 2, "beta2", t.beta2);
            kv(y, 2, "epsilon", t.epsilon);
        } else {
            kv(y, 2, "momentum", t.momentum);
            kv(y, 2, "dampening", t.dampening);
            kv(y, 2, "nesterov", t.nesterov);
        }
        kv(y, 2, "scheduler_type", t.schedulerType);
        kv(y, 2, "warmup_steps", t.warmupSteps);
        kv(y, 2, "min_learning_rate", t.minLearningRate);
        kv(y, 2, "use_clip_grad_norm", t.useClipGradNorm);
        kv(y, 2, "clip_grad_norm_max_norm", t.clipGradNormMaxNorm);
        kv(y, 2, "gradient_accumulation_steps", t.gradientAccumulationSteps);
        if (t.dataPath != null) kv(y, 2, "data_path", quote(t.dataPath));
        if (t.initFrom != null) kv(y, 2, "init_from", quote(t.initFrom));
        if (t.valDataPath != null) kv(y, 2, "val_data_path", quote(t.valDataPath));
        kv(y, 2, "tokenizer_type", t.tokenizerType);
        if (t.tokenizerPath != null) kv(y, 2, "tokenizer_path", quote(t.tokenizerPath));
        kv(y, 2, "validation_fraction", t.validationFraction);
        kv(y, 2, "eval_every", t.evalEvery);
        kv(y, 2, "eval_batches", t.evalBatches);
        kv(y, 2, "model_save_interval", t.modelSaveInterval);
        if (t.checkpointDir != null) kv(y, 2, "checkpoint_dir", quote(t.checkpointDir));
        kv(y, 2, "checkpoint_keep", t.checkpointKeep);
        if (t.maxRestarts >= 0) kv(y, 2, "max_restarts", t.maxRestarts);
        kv(y, 2, "max_nonfinite_steps", t.maxNonfiniteSteps);
        kv(y, 2, "step_timeout_s", t.stepTimeoutS);
        if (t.saveAndExit != null) kv(y, 2, "save_and_exit", quote(t.saveAndExit));
        TtpipeConfig.TransformerConfig m = c.transformer;
        y.append("transformer_config:\n");
        kv(y, 2, "model_type", m.modelType);
        kv(y, 2, "runner_type", m.runnerType);
        kv(y, 2, "num_heads", m.numHeads);
        if (m.numGroups > 0) kv(y, 2, "num_groups", m.numGroups);
        if (m.headDim > 0) kv(y, 2, "head_dim", m.headDim);
        if (m.normEps > 0) kv(y, 2, "norm_eps", m.normEps);
        kv(y, 2, "embedding_dim", m.embeddingDim);
        if (m.intermediateDim > 0) kv(y, 2, "intermediate_dim", m.intermediateDim);
        kv(y, 2, "dropout_prob", m.dropoutProb);
        kv(y, 2, "num_blocks", m.numBlocks);
        if (m.vocabSize > 0) kv(y, 2, "vocab_size", m.vocabSize);
        kv(y, 2, "max_sequence_length", m.maxSequenceLength);
        if (m.sequenceLength > 0) kv(y, 2, "sequence_length", m.sequenceLength);
        kv(y, 2, "weight_tying", m.weightTying);
        kv(y, 2, "positional_embedding_type", m.positionalEmbeddingType);
        if (m.llamaFamily()) kv(y, 2, "theta", m.theta);
        if (m.llamaFamily() && m.ropeScaling != null) {
            var r = m.ropeScaling;
            kv(y, 2, "rope_scaling", String.format(Locale.ROOT, "{rope_type: llama3, factor: %s, low_freq_factor: %s,"
                    + " high_freq_factor: %s, original_max_position_embeddings: %d}", r.factor(), r.lowFreqFactor(),
                    r.highFreqFactor(), r.originalMaxPositions()));
        }
        TtpipeConfig.DeviceConfig d = c.device;
        y.append("device_config:\n");
        kv(y, 2, "backend", d.backend);
        kv(y, 2, "mesh_shape", d.meshShape.toString());
        kv(y, 2, "enable_ddp", d.enableDdp);
        kv(y, 2, "enable_tp", d.enableTp);
        kv(y, 2, "memory_per_device", d.memoryPerDevice);
        kv(y, 2, "dtype", d.dtype);
        kv(y, 2, "threads", d.threads);
        if (d.bridgeLibrary != null) kv(y, 2, "bridge_library", quote(d.bridgeLibrary));
        if (d.backend == Backend.SIM) {
            y.append("  sim:\n");
            if (d.sim.profile != null) kv(y, 4, "profile", d.sim.profile);
            kv(y, 4, "gflops", d.sim.gflops);
            kv(y, 4, "memory_gbps", d.sim.memoryGbps);
            kv(y, 4, "op_latency_us", d.sim.opLatencyUs);
            kv(y, 4, "link_gbps", d.sim.linkGbps);
        }
        TtpipeConfig.MultihostConfig h = c.multihost;
        TtpipeConfig.PipelineConfig p = h.pipeline;
        y.append("multihost_config:\n");
        kv(y, 2, "enabled", h.enabled);
        if (h.numWorkers > 0) kv(y, 2, "num_workers", h.numWorkers);
        kv(y, 2, "socket_type", h.socketType);
        TtpipeConfig.MultihostConfig defaults = new TtpipeConfig.MultihostConfig();
        if (h.controlPort != defaults.controlPort) kv(y, 2, "control_port", h.controlPort);
        if (h.dataPort != defaults.dataPort) kv(y, 2, "data_port", h.dataPort);
        if (h.linkCheckTimeoutS != defaults.linkCheckTimeoutS) kv(y, 2, "link_check_timeout_s", h.linkCheckTimeoutS);
        if (h.linkCheckBytes != defaults.linkCheckBytes) kv(y, 2, "link_check_bytes", h.linkCheckBytes);
        if (h.livenessGraceS != defaults.livenessGraceS) kv(y, 2, "liveness_grace_s", h.livenessGraceS);
        if (h.tls.enabled) tls(y, h.tls);
        y.append("  pipeline_parallel_config:\n");
        kv(y, 4, "num_blocks", m.numBlocks);
        if (p.autoSplit) {
            kv(y, 4, "blocks_per_rank", "auto");
            kv(y, 4, "num_ranks", p.ranks());
        } else {
            StringBuilder b = new StringBuilder("{");
            for (int r = 0; r < p.blocksPerRank.size(); r++) b.append(r == 0 ? "" : ", ").append(r).append(": ").append(p.blocksPerRank.get(r));
            kv(y, 4, "blocks_per_rank", b.append('}').toString());
        }
        kv(y, 4, "num_microbatches", p.numMicrobatches);
        kv(y, 4, "schedule", p.schedule);
        kv(y, 4, "virtual_stages", p.effectiveVirtualStages());
        kv(y, 4, "mode", p.mode);
        if (!c.rankBindings.isEmpty()) {
            y.append("rank_bindings:\n");
            for (TtpipeConfig.RankBinding b : c.rankBindings) {
                y.append("  - {rank: ").append(b.rank).append(", mesh_id: ").append(b.meshId).append(", mesh_host_rank: ")
                        .append(b.meshHostRank).append(", host: ").append(quote(b.host));
                if (b.controlPort > 0) y.append(", control_port: ").append(b.controlPort);
                if (b.dataPort > 0) y.append(", data_port: ").append(b.dataPort);
                if (!b.envOverrides.isEmpty()) {
                    y.append(", env_overrides: {").append(b.envOverrides.entrySet().stream()
                            .map(e -> e.getKey() + ": " + quote(e.getValue())).collect(Collectors.joining(", "))).append('}');
                }
                y.append("}\n");
            }
        }
        if (!c.globalEnv.isEmpty()) {
            y.append("global_env:\n");
            for (var e : c.globalEnv.entrySet()) kv(y, 2, quote(e.getKey()), quote(e.getValue()));
        }
        if (c.meshGraphDescPath != null) kv(y, 0, "mesh_graph_desc_path", quote(c.meshGraphDescPath));
        y.append("eval_config:\n");
        kv(y, 2, "temperature", c.eval.temperature);
        kv(y, 2, "top_k", c.eval.topK);
        kv(y, 2, "sample_tokens", c.eval.sampleTokens);
        if (c.eval.prompt != null) kv(y, 2, "prompt", quote(c.eval.prompt));
        y.append("telemetry:\n");
        kv(y, 2, "stall_warning_s", c.telemetry.stallWarningS);
        kv(y, 2, "bind_host", quote(c.telemetry.bindHost));
        kv(y, 2, "port", c.telemetry.port);
        kv(y, 2, "tensorboard", c.telemetry.tensorboard);
        kv(y, 2, "straggler_margin", c.telemetry.stragglerMargin);
        kv(y, 2, "straggler_steps", c.telemetry.stragglerSteps);
        kv(y, 2, "straggler_warmup_steps", c.telemetry.stragglerWarmupSteps);
        kv(y, 2, "trace_steps", c.telemetry.traceSteps);
        return y.toString();
    }

    /** Where the comments of {@link #withOrigins} start, when the line is shorter. */
    private static final int ORIGIN_COLUMN = 44;

    /**
     * {@link #toYaml} with where each value came from after it: {@code # default}, {@code # job.yaml:12} (the file, or
     * the model_config file, and line) or the flag ({@code # --max-steps}, {@code # --set}). {@code --print-config}.
     * Fitted to {@code width} columns: when a value and its origin would not fit, the files in the config's folder are
     * named without it (the first lines name the folder), and an origin still too long goes on a line of its own above
     * its value. Only a value itself wider than the width passes it.
     */
    public static String withOrigins(TtpipeConfig c, int width) {
        String folder = folderOf(c.source);
        List<String[]> lines = originLines(c);                                 // {the YAML line, its origin or null}
        boolean relative = folder != null && lines.stream().anyMatch(l -> l[1] != null && commented(l[0], l[1]).length() > width);
        StringBuilder out = new StringBuilder();
        comment(out, "", "the config as it would run, from ", c.source, width);
        out.append("# after each value where it came from: default, FILE:LINE or the flag\n");
        if (relative) comment(out, "", "a FILE without a folder is in ", folder, width);
        for (String[] l : lines) {
            if (l[1] == null) {
                out.append(l[0]).append('\n');
                continue;
            }
            String origin = relative && l[1].startsWith(folder + File.separator) ? l[1].substring(folder.length() + 1) : l[1];
            String line = commented(l[0], origin);
            if (line.length() > width) {
                comment(out, l[0].substring(0, l[0].length() - l[0].stripLeading().length()), "", origin, width);
                line = l[0];
            }
            out.append(line).append('\n');
        }
        return out.toString();
    }

    /** The lines of {@link #toYaml} (its own header left out), each a value's with the origin of its key. */
    private static List<String[]> originLines(TtpipeConfig c) {
        List<String[]> out = new ArrayList<>();
        String[] section = new String[8];
        for (String line : toYaml(c).split("\n")) {
            String text = line.strip();
            int level = (line.length() - line.stripLeading().length()) / 2;
            int colon = text.indexOf(": ");
            if (text.startsWith("#") && level == 0) continue;                         // toYaml's own header
            if (text.startsWith("#") || text.startsWith("- ") || level >= section.length) {
                out.add(new String[]{line, null});
                continue;
            }
            if (text.endsWith(":")) {
                section[level] = text.substring(0, text.length() - 1);
                out.add(new String[]{line, null});
                continue;
            }
            StringBuilder key = new StringBuilder();
            for (int i = 0; i < level; i++) key.append(section[i]).append('.');
            key.append(colon < 0 ? text : text.substring(0, colon));
            out.add(new String[]{line, originOf(c, key.toString())});
        }
        return out;
    }

    private static String commented(String line, String origin) {
        return line + " ".repeat(Math.max(2, ORIGIN_COLUMN - line.length())) + "# " + origin;
    }

    /** {@code source}'s folder, when it is a file in one. */
    private static String folderOf(String source) {
        try {
            Path parent = Path.of(source).getParent();
            return parent == null ? null : parent.toString();
        } catch (InvalidPathException e) {
            return null;
        }
    }

    /**
     * {@code label} and {@code path} as a YAML comment at {@code indent}: one line when it fits {@code width}, else the
     * path on lines of its own below the label, broken after a {@code /} where a line would pass the width.
     */
    private static void comment(StringBuilder out, String indent, String label, String path, int width) {
        String prefix = indent + "# ";
        if (prefix.length() + label.length() + path.length() <= width) {
            out.append(prefix).append(label).append(path).append('\n');
            return;
        }
        if (!label.isEmpty()) out.append(prefix).append(label.strip()).append('\n');
        String hang = label.isEmpty() ? prefix : prefix + "  ";
        int room = Math.max(20, width - hang.length());
        String rest = path;
        while (rest.length() > room) {
            int cut = rest.lastIndexOf('/', room - 1) + 1;
            if (cut <= 0) cut = room;
            out.append(hang).append(rest, 0, cut).append('\n');
            rest = rest.substring(cut);
            hang = prefix + "  ";
            room = Math.max(20, width - hang.length());
        }
        out.append(hang).append(rest).append('\n');
    }

    /** Where {@code keyPath} (as toYaml writes it) came from; transformer keys may have come from TTML's other places. */
    private static String originOf(TtpipeConfig c, String keyPath) {
        String o = c.origins.origin(keyPath);
        String t = "transformer_config.";
        if (o != null || !keyPath.startsWith(t)) return o != null ? o : "default";
        String key = keyPath.substring(t.length());
        o = c.origins.origin("training_config." + keyPath);                      // TTML's nesting under training_config
        if (o == null) o = c.origins.origin("training_config." + key);           // TTML's training_config.model_type
        String where = c.transformer.givenAt.get(key);                            // the model_config file: "file:line: key"
        if (o == null && where != null) o = where.lastIndexOf(": ") > 0 ? where.substring(0, where.lastIndexOf(": ")) : where;
        return o != null ? o : "default";
    }

    /** The TLS settings; of the passwords only the names of their environment variables, never a password itself. */
    private static void tls(StringBuilder y, TtpipeConfig.TlsConfig t) {
        y.append("  tls:\n");
        kv(y, 4, "enabled", true);
        if (t.keyStore != null) kv(y, 4, "key_store", quote(t.keyStore));
        if (t.keyStorePasswordEnv != null) kv(y, 4, "key_store_password_env", t.keyStorePasswordEnv);
        if (t.keyPasswordEnv != null) kv(y, 4, "key_password_env", t.keyPasswordEnv);
        if (t.trustStore != null) kv(y, 4, "trust_store", quote(t.trustStore));
        if (t.trustStorePasswordEnv != null) kv(y, 4, "trust_store_password_env", t.trustStorePasswordEnv);
        if (t.keyStorePassword != null || t.keyPassword != null || t.trustStorePassword != null) {
            y.append("    # passwords given in the config are not written here\n");
        }
        kv(y, 4, "protocol", t.protocol);
        kv(y, 4, "enabled_algorithms", "[" + String.join(", ", t.algorithms()) + "]");
        kv(y, 4, "require_mutual_authentication", t.requireMutualAuthentication);
        kv(y, 4, "hostname_verification", t.hostnameVerification);
    }

    private static void kv(StringBuilder y, int indent, String key, Object value) {
        y.append(" ".repeat(indent)).append(key).append(": ");
        if (value instanceof Double d) {
            y.append(d == Math.rint(d) && Math.abs(d) < 1e15 ? String.format(Locale.ROOT, "%.1f", d) : String.valueOf(d));
        } else {
            y.append(value);
        }
        y.append('\n');
    }

    private static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n") + "\"";
    }
}

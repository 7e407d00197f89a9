package dev.ttpipe.actors.config;

import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.device.SimCosts;
import dev.ttpipe.device.SimProfile;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.error.MarkedYAMLException;
import org.yaml.snakeyaml.nodes.MappingNode;
import org.yaml.snakeyaml.nodes.Node;
import org.yaml.snakeyaml.nodes.NodeTuple;
import org.yaml.snakeyaml.nodes.ScalarNode;
import org.yaml.snakeyaml.nodes.SequenceNode;

import java.io.IOException;
import java.io.InputStream;
import java.io.Reader;
import java.io.StringReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Reads a ttpipe (or TTML) YAML config into a {@link TtpipeConfig}. Reports every problem at once as
 * {@code file:line: key.path: value given, what was expected}; unknown keys are errors with a
 * did-you-mean. Every key it accepts ({@link #acceptedKeys()}) is read into the config; a value
 * ttpipe cannot honour is refused by name (here or in {@link ConfigValidator}), never ignored.
 */
public final class ConfigLoader {
    /** The range of multihost_config.link_check_bytes. */
    static final long LINK_CHECK_MIN_BYTES = 64L << 10, LINK_CHECK_MAX_BYTES = 1L << 30;
    static final List<String> MODEL_TYPES = List.of("gpt2", "llama", "qwen3");
    static final List<String> RUNNER_TYPES = List.of("default", "memory_efficient");
    static final List<String> OPTIMIZERS = List.of("adamw", "sgd");
    static final List<String> SCHEDULERS = List.of("identity", "warmup_linear", "cosine");
    static final List<String> DTYPES = List.of("fp32", "bf16");
    static final List<String> TOKENIZERS = List.of("char", "bpe");
    static final List<String> POSITIONAL = List.of("trainable", "rope", "none");

    /**
     * The most bytes a config file (comments included) may hold: a real one is a few KiB, a 256-rank one with its
     * rank bindings tens of KiB. Counted on the bytes read, before the parser sees any, so that a huge scalar or comment
     * costs no parsing time (SnakeYAML takes about 1.7 s per MiB of a comment on this project's machines).
     */
    public static final int MAX_BYTES = 1 << 20;

    private ConfigLoader() {
    }

    /** A config that reaches every section the loader reads (a list item, the nested transformer_config). */
    private static final String EVERY_SECTION = "training_config: {transformer_config: {}}\nrank_bindings: [{rank: 0}]\n";

    /**
     * Every key the loader accepts, as dotted paths ({@code training_config.seed},
     * {@code device_config.sim.gflops}, {@code rank_bindings[].host}), taken from the sections as they
     * read (so a key the code starts reading is listed without anyone adding it here). The keys of
     * transformer_config are listed once, under {@code transformer_config.}: TTML's nesting under
     * training_config and a model_config file take the same keys. Free-form maps (global_env,
     * env_overrides) are one key each.
     */
    public static SortedSet<String> acceptedKeys() {
        ConfigProblems problems = new ConfigProblems("(every section)");
        readInto(EVERY_SECTION, new TtpipeConfig(), problems, null, List.of());
        SortedSet<String> out = new TreeSet<>();
        for (String k : problems.known()) {
            out.add(k.startsWith("training_config.transformer_config.") ? k.substring("training_config.".length()) : k);
        }
        return out;
    }

    /** Loads and validates a config file. Throws {@link ConfigException} listing every problem. */
    public static TtpipeConfig load(Path file) {
        return load(file, List.of());
    }

    /** {@link #load(Path)} with {@code --set KEY=VALUE} settings applied to the file's tree first ({@link Overrides}). */
    public static TtpipeConfig load(Path file, List<String> sets) {
        TtpipeConfig cfg = read(file, sets);
        ConfigValidator.validate(cfg);
        return cfg;
    }

    /** Reads a config file without the cross-key checks (callers apply flag overrides, then validate). */
    public static TtpipeConfig read(Path file) {
        return read(file, List.of());
    }

    /** {@link #read(Path)} with {@code --set KEY=VALUE} settings applied to the file's tree first ({@link Overrides}). */
    public static TtpipeConfig read(Path file, List<String> sets) {
        String text;
        try {
            text = readBounded(file);
        } catch (NoSuchFileException e) {
            throw new ConfigException(file + ": no such file (expected a YAML config; see configs/ for examples)");
        } catch (IOException e) {
            throw new ConfigException(file + ": cannot read (" + e.getMessage() + ")");
        }
        return read(text, file.toString(), file.toAbsolutePath().getParent(), sets);
    }

    /** {@code file}'s text, refused (one line naming it and the limit) when it holds more than {@link #MAX_BYTES}. */
    private static String readBounded(Path file) throws IOException {
        byte[] bytes;
        try (InputStream in = Files.newInputStream(file)) {
            bytes = in.readNBytes(MAX_BYTES + 1);
        }
        if (bytes.length > MAX_BYTES) throw tooLarge(file.toString(), "bytes");
        return new String(bytes, StandardCharsets.UTF_8);
    }

    private static ConfigException tooLarge(String sourceName, String unit) {
        return new ConfigException(sourceName + ": more than " + MAX_BYTES + " " + unit + " (" + (MAX_BYTES >> 20) + " MiB), over the"
                + " limit for a config file (comments included; a real one is a few KiB)");
    }

    /** Reads a classpath resource (the embedded default configs). */
    public static TtpipeConfig readResource(String resource) {
        return readResource(resource, List.of());
    }

    /** {@link #readResource(String)} with {@code --set KEY=VALUE} settings applied first. */
    public static TtpipeConfig readResource(String resource, List<String> sets) {
        try (InputStream in = ConfigLoader.class.getResourceAsStream(resource)) {
            if (in == null) throw new IllegalStateException("missing resource " + resource);
            return read(new String(in.readAllBytes(), StandardCharsets.UTF_8), "(embedded " + resource + ")", null, sets);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Reads YAML text; {@code baseDir} resolves relative paths inside it (null: the working directory). */
    public static TtpipeConfig read(String yamlText, String sourceName, Path baseDir) {
        return read(yamlText, sourceName, baseDir, List.of());
    }

    private static TtpipeConfig read(String yamlText, String sourceName, Path baseDir, List<String> sets) {
        if (yamlText.length() > MAX_BYTES) throw tooLarge(sourceName, "characters");
        ConfigProblems problems = new ConfigProblems(sourceName);
        TtpipeConfig cfg = new TtpipeConfig();
        cfg.source = sourceName;
        cfg.origins = problems;
        readInto(yamlText, cfg, problems, baseDir, sets);
        problems.throwIfAny();
        return cfg;
    }

    private static void readInto(String yamlText, TtpipeConfig cfg, ConfigProblems problems, Path baseDir, List<String> sets) {
        String sourceName = problems.file();
        Node root = compose(new StringReader(yamlText), sourceName);
        if (root == null) {
            throw new ConfigException(sourceName + ": the file is empty (or only comments), expected a YAML config with at least"
                    + " one of training_config, transformer_config, device_config, multihost_config; see configs/ for examples");
        }
        if (!(root instanceof MappingNode)) {
            throw new ConfigException(ConfigProblems.oneLine(sourceName + ":" + YamlSection.line(root) + ": " + YamlSection.describe(root)
                    + " given, expected a mapping of sections (training_config: ..., device_config: ...)"));
        }
        duplicateKeys(root, "", problems);
        Overrides.apply((MappingNode) root, sets, problems);          // after the file's own duplicates, before any key is read
        YamlSection top = new YamlSection("", root, problems);
        YamlSection training = top.section("training_config");
        readTraining(training, cfg.training, baseDir);
        // TTML keeps transformer_config inside training_config, or in a separate model_config file.
        if (training.has("transformer_config")) {
            readTransformer(training.section("transformer_config"), cfg.transformer);
        }
        if (training.has("model_config")) {
            readModelConfigFile(training, cfg, baseDir, problems);
        }
        if (top.has("transformer_config")) {
            readTransformer(top.section("transformer_config"), cfg.transformer);
        }
        readModelType(training, cfg.transformer);
        readDevice(top.section("device_config"), cfg.device, baseDir);
        readMultihost(top.section("multihost_config"), cfg.multihost, baseDir);
        for (YamlSection b : top.sectionList("rank_bindings")) {
            cfg.rankBindings.add(readRankBinding(b));
        }
        readEval(top.section("eval_config"), cfg.eval);
        YamlSection telemetry = top.section("telemetry");
        cfg.telemetry.stallWarningS = telemetry.integer("stall_warning_s", cfg.telemetry.stallWarningS, 0, 1 << 24);
        cfg.telemetry.bindHost = telemetry.string("bind_host", cfg.telemetry.bindHost);
        cfg.telemetry.port = telemetry.integer("port", cfg.telemetry.port, 0, 65535);
        cfg.telemetry.tensorboard = telemetry.bool("tensorboard", cfg.telemetry.tensorboard);
        cfg.telemetry.stragglerMargin = telemetry.number("straggler_margin", cfg.telemetry.stragglerMargin, 1.1, 100);
        cfg.telemetry.stragglerSteps = telemetry.integer("straggler_steps", cfg.telemetry.stragglerSteps, 1, 1000);
        cfg.telemetry.stragglerWarmupSteps = telemetry.integer("straggler_warmup_steps", cfg.telemetry.stragglerWarmupSteps, 0,
                1_000_000);
        cfg.telemetry.traceSteps = telemetry.integer("trace_steps", cfg.telemetry.traceSteps, 0, 1_000_000);
        telemetry.rejectUnknownKeys();
        readGlobalEnv(top, cfg.globalEnv);                // tt-run rank-binding files carry these two
        String mgd = path(top, "mesh_graph_desc_path", null, baseDir);
        cfg.meshGraphDescPath = mgd == null ? null : Path.of(mgd).toAbsolutePath().normalize().toString();
        training.rejectUnknownKeys();
        top.rejectUnknownKeys();
    }

    /**
     * TTML's {@code training_config.model_type} (how TTML chooses the model): sets transformer_config's
     * model type; given in both places, they must agree.
     */
    private static void readModelType(YamlSection training, TtpipeConfig.TransformerConfig t) {
        String type = training.choice("model_type", null, MODEL_TYPES);
        if (type == null) return;
        String other = t.givenAt.get("model_type");
        if (other != null && !other.isEmpty() && !type.equals(t.modelType)) {
            training.problems().add(training.keyPath("model_type"), "'" + type + "' given, but " + other + " is '" + t.modelType
                    + "', expected the same model type in both (or one of them left out)");
            return;
        }
        t.modelType = type;
        if (t.llamaFamily() && !t.givenAt.containsKey("positional_embedding_type")) t.positionalEmbeddingType = "rope";
    }

    /** {@code global_env}: NAME: value pairs; a name must be one setenv takes (not empty, no '=' or NUL). */
    private static void readGlobalEnv(YamlSection top, Map<String, String> env) {
        Map<String, String> given = top.stringMap("global_env");
        for (Map.Entry<String, String> e : given.entrySet()) {
            String name = e.getKey();
            if (name.isEmpty() || name.indexOf('=') >= 0 || name.indexOf('\0') >= 0 || e.getValue().indexOf('\0') >= 0) {
                top.problems().add(top.keyPath("global_env") + "." + name, "'" + name + "' given, expected an environment"
                        + " variable name (not empty, no '=') with a value without NUL characters");
            } else {
                env.put(name, e.getValue());
            }
        }
    }

    /**
     * Every key given twice in one mapping, each as {@code file:line: key.path: given twice (first at line N),
     * expected each key once}: YAML keeps the last silently, and SnakeYAML's own check names only one.
     */
    private static void duplicateKeys(Node node, String path, ConfigProblems problems) {
        duplicateKeys(node, path, problems, Collections.newSetFromMap(new IdentityHashMap<>()));
    }

    /**
     * Visits every node once: an alias is the very node its anchor names, so a node that contains its own
     * anchor ({@code &a [*a]}) made this recurse until the stack overflowed, and aliases of aliases
     * ({@code &b [*a, *a]}, ...) made it walk 2^depth paths.
     */
    private static void duplicateKeys(Node node, String path, ConfigProblems problems, Set<Node> visited) {
        if (!visited.add(node)) return;
        if (node instanceof MappingNode m) {
            Map<String, Integer> seen = new HashMap<>();
            for (NodeTuple t : m.getValue()) {
                String key = t.getKeyNode() instanceof ScalarNode k ? k.getValue() : String.valueOf(t.getKeyNode());
                String keyPath = path.isEmpty() ? key : path + "." + key;
                int line = YamlSection.line(t.getKeyNode());
                Integer first = seen.putIfAbsent(key, line);
                if (first != null) {
                    problems.addRaw(problems.file() + ":" + line + ": " + keyPath + ": given twice (first at line " + first
                            + "), expected each key once");
                }
                duplicateKeys(t.getValueNode(), keyPath, problems, visited);
            }
        } else if (node instanceof SequenceNode sq) {
            for (int i = 0; i < sq.getValue().size(); i++) {
                duplicateKeys(sq.getValue().get(i), path + "[" + i + "]", problems, visited);
            }
        }
    }

    static Node compose(Reader reader, String sourceName) {
        LoaderOptions options = new LoaderOptions();
        options.setAllowDuplicateKeys(true);           // reported by duplicateKeys, every one with both lines
        // Bounds on what a config file can make the parser do (SnakeYAML's defaults, set here so that they stay):
        // an alias bomb fails at the 51st alias of a list or mapping, nesting deeper than 50 fails, and so does a
        // text of more than MAX_BYTES characters (files are refused before, on their bytes); no mapping may have itself as a key.
        options.setMaxAliasesForCollections(50);
        options.setNestingDepthLimit(50);
        options.setCodePointLimit(MAX_BYTES);
        options.setAllowRecursiveKeys(false);
        try {
            return new Yaml(options).compose(reader);
        } catch (MarkedYAMLException e) {
            int line = e.getProblemMark() == null ? 0 : e.getProblemMark().getLine() + 1;
            int column = e.getProblemMark() == null ? 0 : e.getProblemMark().getColumn() + 1;
            throw new ConfigException(ConfigProblems.oneLine(sourceName + ":" + line + ":" + column + ": not valid YAML: "
                    + e.getProblem()));
        } catch (RuntimeException e) {                 // SnakeYAML's limits (aliases, nesting, size) say it on the first line
            String m = String.valueOf(e.getMessage()).strip();
            int nl = m.indexOf('\n');
            throw new ConfigException(ConfigProblems.oneLine(sourceName + ": not valid YAML: " + (nl < 0 ? m : m.substring(0, nl))));
        }
    }

    private static void readTraining(YamlSection s, TtpipeConfig.TrainingConfig t, Path baseDir) {
        t.projectName = s.string("project_name", t.projectName);
        t.seed = s.integer("seed", t.seed, 0, Integer.MAX_VALUE);
        t.batchSize = s.integer("batch_size", t.batchSize, 1, Integer.MAX_VALUE);
        t.numEpochs = s.integer("num_epochs", t.numEpochs, 1, Integer.MAX_VALUE);
        t.maxSteps = s.integer("max_steps", t.maxSteps, 1, Integer.MAX_VALUE);
        t.learningRate = s.number("learning_rate", t.learningRate, 0, 10);
        t.weightDecay = s.number("weight_decay", t.weightDecay, 0, 10);
        if (s.node("optimizer") instanceof MappingNode) {         // TTML's newer form: optimizer: {type: AdamW, lr: ...}
            s.problems().add(s.keyPath("optimizer"), "a mapping given (TTML's optimizer: {type: AdamW, lr: ...}), expected adamw or"
                    + " sgd, with the optimizer's settings as keys of training_config: learning_rate, weight_decay, beta1, beta2,"
                    + " epsilon, momentum, dampening, nesterov");
        } else {
            t.optimizer = s.choice("optimizer", t.optimizer, OPTIMIZERS);
        }
        t.beta1 = s.number("beta1", t.beta1, 0, 0.999999);
        t.beta2 = s.number("beta2", t.beta2, 0, 0.999999999);
        t.epsilon = s.number("epsilon", t.epsilon, 0, 1);
        t.momentum = s.number("momentum", t.momentum, 0, 1);
        t.dampening = s.number("dampening", t.dampening, 0, 1);
        t.nesterov = s.bool("nesterov", t.nesterov);
        t.schedulerType = s.choice("scheduler_type", t.schedulerType, SCHEDULERS);
        t.warmupSteps = s.integer("warmup_steps", t.warmupSteps, 0, Integer.MAX_VALUE);
        t.minLearningRate = s.number("min_learning_rate", t.minLearningRate, 0, 10);
        t.useClipGradNorm = s.bool("use_clip_grad_norm", t.useClipGradNorm);
        t.clipGradNormMaxNorm = s.number("clip_grad_norm_max_norm", t.clipGradNormMaxNorm, 1e-12, Double.MAX_VALUE);
        t.gradientAccumulationSteps = s.integer("gradient_accumulation_steps", t.gradientAccumulationSteps, 1, 1 << 20);
        t.dataPath = path(s, "data_path", t.dataPath, baseDir);
        t.valDataPath = path(s, "val_data_path", t.valDataPath, baseDir);
        t.tokenizerType = s.choice("tokenizer_type", t.tokenizerType, TOKENIZERS);
        t.validationFraction = s.number("validation_fraction", t.validationFraction, 0, 0.9);
        t.evalEvery = s.integer("eval_every", t.evalEvery, 0, Integer.MAX_VALUE);
        t.evalBatches = s.integer("eval_batches", t.evalBatches, 1, 1 << 20);
        t.modelSaveInterval = s.integer("model_save_interval", t.modelSaveInterval, 0, Integer.MAX_VALUE);
        t.checkpointDir = path(s, "checkpoint_dir", t.checkpointDir, baseDir);
        t.checkpointKeep = s.integer("checkpoint_keep", t.checkpointKeep, 1, 1 << 20);
        t.stepTimeoutS = s.integer("step_timeout_s", t.stepTimeoutS, 0, 1 << 24);
        if (s.has("max_restarts")) t.maxRestarts = s.integer("max_restarts", 0, 0, 1 << 20);
        t.maxNonfiniteSteps = s.integer("max_nonfinite_steps", t.maxNonfiniteSteps, 1, 1 << 20);
        t.runsDir = s.string("runs_dir", t.runsDir);
        String initFrom = checkpointPath(s, "init_from", baseDir);
        String modelPath = checkpointPath(s, "model_path", baseDir);   // TTML's name for it
        if (initFrom != null && modelPath != null && !initFrom.equals(modelPath)) {
            s.problems().add(s.keyPath("model_path"), "'" + modelPath + "' given beside init_from '" + initFrom
                    + "', expected one of them (model_path is TTML's name for init_from)");
        }
        t.initFrom = initFrom != null ? initFrom : modelPath != null ? modelPath : t.initFrom;
        String tokenizerPath = s.string("tokenizer_path", t.tokenizerPath);
        // a bundled tokenizer's name stays a name; anything else is a file
        t.tokenizerPath = tokenizerPath != null && TtpipeConfig.BUNDLED_TOKENIZERS.contains(tokenizerPath) ? tokenizerPath
                : path(s, "tokenizer_path", t.tokenizerPath, baseDir);
        t.useMorehAdamw = s.bool("use_moreh_adamw", t.useMorehAdamw);
        if (t.useMorehAdamw) {
            s.problems().note(s.keyPath("use_moreh_adamw"), "true read as ttpipe's AdamW (MorehAdamW computes the same update:"
                    + " decoupled weight decay, bias correction)");
        }
        t.useKahanSummation = s.bool("use_kahan_summation", t.useKahanSummation);
        t.useNoOp = s.bool("use_no_op", t.useNoOp);
        t.saveAndExit = path(s, "save_and_exit", t.saveAndExit, baseDir);
        // read by read() (model_type, after the transformer sections) and readModelConfigFile / readTransformer
        s.accept("model_type", "model_config", "transformer_config");
    }

    /** init_from or model_path: a path, or {@code latest} (the newest checkpoint under runs_dir), which stays a name. */
    private static String checkpointPath(YamlSection s, String key, Path baseDir) {
        return "latest".equals(s.string(key, null)) ? "latest" : path(s, key, null, baseDir);
    }

    private static void readModelConfigFile(YamlSection training, TtpipeConfig cfg, Path baseDir, ConfigProblems problems) {
        String rel = training.string("model_config", null);
        String key = training.keyPath("model_config");
        Path p;
        try {
            p = Path.of(resolve(baseDir, rel, problems, key));
        } catch (InvalidPathException e) {
            training.problems().add(key, rel, "a file path (" + e.getReason() + ")");
            return;
        }
        if (!Files.isRegularFile(p)) {
            String nowhere = problems.notFound(key, "a readable model config YAML");
            if (nowhere != null) training.problems().addRaw(nowhere);
            else training.problems().add(key, rel, "a readable model config YAML (looked for " + p + ")");
            return;
        }
        try {
            String text = readBounded(p);
            ConfigProblems sub = new ConfigProblems(p.toString());
            Node root = compose(new StringReader(text), p.toString());
            if (root != null) duplicateKeys(root, "", sub);
            YamlSection top = new YamlSection("", root, sub);
            readTransformer(top.section("transformer_config"), cfg.transformer);
            top.rejectUnknownKeys();
            sub.problems().forEach(problems::addRaw);
        } catch (IOException e) {
            training.problems().add(training.keyPath("model_config"), rel, "a readable file (" + e.getMessage() + ")");
        }
    }

    private static void readTransformer(YamlSection s, TtpipeConfig.TransformerConfig t) {
        for (String k : s.presentKeys()) t.givenAt.put(k, s.problems().where(s.keyPath(k)));
        t.modelType = s.choice("model_type", t.modelType, MODEL_TYPES);
        t.runnerType = s.choice("runner_type", t.runnerType, RUNNER_TYPES);
        t.numHeads = s.integer("num_heads", t.numHeads, 1, 4096);
        t.numGroups = s.integer("num_groups", t.numGroups, 0, 4096);
        t.headDim = s.integer("head_dim", t.headDim, 0, 1 << 16);
        t.normEps = s.number("norm_eps", t.normEps, 0, 1);
        t.embeddingDim = s.integer("embedding_dim", t.embeddingDim, 1, 1 << 20);
        t.intermediateDim = s.integer("intermediate_dim", t.intermediateDim, 0, 1 << 22);
        t.dropoutProb = s.number("dropout_prob", t.dropoutProb, 0, 0.95);
        t.numBlocks = s.integer("num_blocks", t.numBlocks, 1, 4096);
        t.vocabSize = s.integer("vocab_size", t.vocabSize, 0, 1 << 24);
        t.maxSequenceLength = s.integer("max_sequence_length", t.maxSequenceLength, 1, 1 << 20);
        t.sequenceLength = s.integer("sequence_length", t.sequenceLength, 0, 1 << 20);
        if (s.has("weight_tying")) t.weightTying = s.bool("weight_tying", t.weightTying);
        if (t.llamaFamily() && !s.has("positional_embedding_type")) t.positionalEmbeddingType = "rope";
        t.positionalEmbeddingType = s.choice("positional_embedding_type", t.positionalEmbeddingType, POSITIONAL);
        t.theta = s.number("theta", t.theta, 1, 1e9);
        YamlSection scaling = s.section("rope_scaling");
        for (String k : scaling.presentKeys()) t.givenAt.put("rope_scaling." + k, scaling.problems().where(scaling.keyPath(k)));
        RopeFrequencies.Llama3Scaling ropeScaling = readRopeScaling(scaling, s.has("rope_scaling"));
        if (s.node("rope_scaling") != null) t.ropeScaling = ropeScaling;      // given as null: none
        scaling.rejectUnknownKeys();
        YamlSection experimental = s.section("experimental");      // TTML's gpt2 kernel choices
        for (String k : experimental.presentKeys()) {
            t.givenAt.put("experimental." + k, experimental.problems().where(experimental.keyPath(k)));
        }
        t.useCompositeLayernorm = experimental.bool("use_composite_layernorm", t.useCompositeLayernorm);
        experimental.rejectUnknownKeys();
        s.rejectUnknownKeys();
    }

    /**
     * {@code rope_scaling}, in Hugging Face's names (rope_type, factor, low_freq_factor, high_freq_factor,
     * original_max_position_embeddings) or TTML's (scaling_factor, original_context_length; no type: llama3).
     * Null (the key given as null, rope_type default, or TTML's factor and context length 0): no scaling.
     */
    private static RopeFrequencies.Llama3Scaling readRopeScaling(YamlSection r, boolean given) {
        String type = r.string("rope_type", null);
        String oldType = r.string("type", null);                     // Hugging Face's name before rope_type
        double factor = aliased(r, "factor", "scaling_factor", 0, 1e6);
        double low = r.number("low_freq_factor", Double.NaN, 0, 1e9);
        double high = r.number("high_freq_factor", Double.NaN, 0, 1e9);
        double original = aliased(r, "original_max_position_embeddings", "original_context_length", 0, 1 << 24);
        if (!given) return null;
        if (type != null && oldType != null && !type.equalsIgnoreCase(oldType)) {
            r.problems().add(r.keyPath("type"), "'" + oldType + "' given beside rope_type '" + type + "', expected one of them");
            return null;
        }
        String kind = (type != null ? type : oldType != null ? oldType : "llama3").toLowerCase(Locale.ROOT);
        boolean anyValue = !Double.isNaN(factor) || !Double.isNaN(low) || !Double.isNaN(high) || !Double.isNaN(original);
        if (kind.equals("default")) {
            if (anyValue) r.problems().add(r.keyPath(type != null ? "rope_type" : "type"), "'default' (no scaling) given with"
                    + " scaling values, expected rope_type llama3 for them, or them left out");
            return null;
        }
        if (!kind.equals("llama3")) {
            r.problems().add(r.keyPath(type != null ? "rope_type" : "type"), (type != null ? type : oldType), "llama3 (Llama 3.1's"
                    + " scaling, the one ttpipe implements) or default");
            return null;
        }
        boolean noFactor = Double.isNaN(factor) || factor == 0, noLength = Double.isNaN(original) || original == 0;
        if (noFactor && noLength && (!Double.isNaN(factor) || !Double.isNaN(original))) return null;   // TTML's way to turn it off
        if (noFactor || noLength || Double.isNaN(low) || Double.isNaN(high)) {
            r.problems().add(r.path(), "llama3 scaling needs factor (or scaling_factor), low_freq_factor, high_freq_factor and"
                    + " original_max_position_embeddings (or original_context_length), expected all four, such as Llama 3.1's"
                    + " {rope_type: llama3, factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0,"
                    + " original_max_position_embeddings: 8192}");
            return null;
        }
        if (original != Math.rint(original)) {
            r.problems().add(r.keyPath("original_max_position_embeddings"), original, "a whole number of positions");
            return null;
        }
        try {
            return new RopeFrequencies.Llama3Scaling(factor, low, high, (int) original);
        } catch (DeviceException e) {
            r.problems().add(r.path(), e.getMessage().replaceFirst("^rope scaling: ", "") + " (Llama 3.1: factor 8,"
                    + " low_freq_factor 1, high_freq_factor 4)");
            return null;
        }
    }

    /** A number given under Hugging Face's name {@code hf} or TTML's {@code ttml} (NaN: neither); both must agree. */
    private static double aliased(YamlSection r, String hf, String ttml, double min, double max) {
        double a = r.number(hf, Double.NaN, min, max), b = r.number(ttml, Double.NaN, min, max);
        if (!Double.isNaN(a) && !Double.isNaN(b) && a != b) {
            r.problems().add(r.keyPath(ttml), b + " given beside " + hf + " " + a + ", expected one of them (" + ttml
                    + " is TTML's name for " + hf + ")");
        }
        return Double.isNaN(a) ? b : a;
    }

    private static void readDevice(YamlSection s, TtpipeConfig.DeviceConfig d, Path baseDir) {
        d.backend = s.choice("backend", d.backend, Backend.class);
        List<Integer> shape = s.integers("mesh_shape", d.meshShape);
        if (shape.size() < 1 || shape.size() > 2 || shape.stream().anyMatch(x -> x < 1)) {
            s.problems().add(s.keyPath("mesh_shape"), shape.toString(), "[rows, cols] with both >= 1, such as [1, 2]");
        } else {
            d.meshShape = shape.size() == 1 ? List.of(1, shape.get(0)) : List.copyOf(shape);
        }
        d.enableDdp = s.bool("enable_ddp", d.enableDdp);
        d.enableTp = s.bool("enable_tp", d.enableTp);
        d.deviceIds = s.integers("device_ids", d.deviceIds);
        if (s.has("memory_per_device")) d.memoryPerDevice = s.bytes("memory_per_device", d.memoryPerDevice);
        d.dtype = s.choice("dtype", d.dtype, DTYPES);
        d.threads = s.integer("threads", d.threads, 0, 1024);
        d.bridgeLibrary = path(s, "bridge_library", d.bridgeLibrary, baseDir);
        YamlSection sim = s.section("sim");
        if (sim.has("profile")) {
            d.sim.profile = sim.choice("profile", "", SimProfile.names());
            SimProfile profile = SimProfile.named(d.sim.profile);
            if (profile != null) {                      // the profile's figures; keys given beside it override them
                SimCosts c = profile.costs();
                d.sim.gflops = c.gflops();
                d.sim.memoryGbps = c.memoryGbps();
                d.sim.opLatencyUs = c.opLatencyUs();
                d.sim.linkGbps = c.linkGbps();
                if (!s.has("memory_per_device")) d.memoryPerDevice = profile.dramBytes();
            }
        }
        d.sim.gflops = sim.number("gflops", d.sim.gflops, 1e-6, 1e9);
        d.sim.memoryGbps = sim.number("memory_gbps", d.sim.memoryGbps, 1e-6, 1e9);
        d.sim.opLatencyUs = sim.number("op_latency_us", d.sim.opLatencyUs, 0, 1e9);
        d.sim.linkGbps = sim.number("link_gbps", d.sim.linkGbps, 1e-6, 1e9);
        d.sim.calibration = path(sim, "calibration", d.sim.calibration, baseDir);
        sim.rejectUnknownKeys();
        s.rejectUnknownKeys();
    }

    private static void readMultihost(YamlSection s, TtpipeConfig.MultihostConfig m, Path baseDir) {
        m.enabled = s.bool("enabled", m.enabled);
        m.numWorkers = s.integer("num_workers", m.numWorkers, 0, 4096);
        String socket = s.string("socket_type", null);
        if (socket != null && socket.trim().equalsIgnoreCase("mpi")) {
            // TTML's default: ttpipe moves tensors over Aeron where TTML uses MPI, so its files load as they are.
            m.socketType = SocketType.AERON;
            s.problems().note(s.keyPath("socket_type"), "'mpi' read as aeron (ttpipe moves tensors over Aeron, not MPI)");
        } else {
            m.socketType = s.choice("socket_type", m.socketType, SocketType.class);
        }
        m.bindHost = s.string("bind_host", m.bindHost);
        m.controlPort = s.integer("control_port", m.controlPort, 1, 65535);
        m.dataPort = s.integer("data_port", m.dataPort, 1, 65534);
        m.linkCheckTimeoutS = s.number("link_check_timeout_s", m.linkCheckTimeoutS, 0.1, 600);
        long bytes = s.bytes("link_check_bytes", m.linkCheckBytes);
        if (bytes < LINK_CHECK_MIN_BYTES || bytes > LINK_CHECK_MAX_BYTES) {
            s.problems().add(s.keyPath("link_check_bytes"), s.string("link_check_bytes", null), "a size from 64KiB to 1GiB");
        } else {
            m.linkCheckBytes = bytes;
        }
        m.livenessGraceS = s.integer("liveness_grace_s", m.livenessGraceS, 1, 86_400);
        YamlSection p = s.section("pipeline_parallel_config");
        PipelineReader.read(p, m.pipeline);
        p.rejectUnknownKeys();
        readTls(s.section("tls"), m.tls, baseDir);
        s.rejectUnknownKeys();
    }

    /** {@code multihost_config.tls}; the files and passwords are checked by {@link TlsCheck}. */
    private static void readTls(YamlSection s, TtpipeConfig.TlsConfig t, Path baseDir) {
        t.enabled = s.bool("enabled", t.enabled);
        t.keyStore = resolve(baseDir, s.string("key_store", t.keyStore));
        t.keyStorePassword = s.string("key_store_password", t.keyStorePassword);
        t.keyStorePasswordEnv = s.string("key_store_password_env", t.keyStorePasswordEnv);
        t.keyPassword = s.string("key_password", t.keyPassword);
        t.keyPasswordEnv = s.string("key_password_env", t.keyPasswordEnv);
        t.trustStore = resolve(baseDir, s.string("trust_store", t.trustStore));
        t.trustStorePassword = s.string("trust_store_password", t.trustStorePassword);
        t.trustStorePasswordEnv = s.string("trust_store_password_env", t.trustStorePasswordEnv);
        String protocol = s.string("protocol", null);
        if (protocol != null) {
            if (protocol.trim().equalsIgnoreCase(TtpipeConfig.TlsConfig.TLS13)) t.protocol = TtpipeConfig.TlsConfig.TLS13;
            else if (protocol.trim().equalsIgnoreCase(TtpipeConfig.TlsConfig.TLS12)) t.protocol = TtpipeConfig.TlsConfig.TLS12;
            else s.problems().add(s.keyPath("protocol"), protocol, "TLSv1.3 or TLSv1.2");
        }
        t.enabledAlgorithms = s.strings("enabled_algorithms", t.enabledAlgorithms);
        t.requireMutualAuthentication = s.bool("require_mutual_authentication", t.requireMutualAuthentication);
        t.hostnameVerification = s.bool("hostname_verification", t.hostnameVerification);
        s.rejectUnknownKeys();
    }

    /** Reads pipeline_parallel_config; blocks_per_rank may be a map rank -> count, a list, or "auto". */
    private static final class PipelineReader {
        static void read(YamlSection s, TtpipeConfig.PipelineConfig p) {
            p.numBlocks = s.integer("num_blocks", p.numBlocks, 0, 4096);
            p.numRanks = s.integer("num_ranks", p.numRanks, 0, 4096);
            p.numMicrobatches = s.integer("num_microbatches", p.numMicrobatches, 1, 1 << 20);
            p.schedule = s.string("schedule", p.schedule);
            p.virtualStages = s.integer("virtual_stages", p.virtualStages, 0, 64);
            p.mode = s.choice("mode", p.mode, PipelineMode.class);
            Node n = s.node("blocks_per_rank");
            if (n == null || YamlSection.isNull(n)) return;
            String key = s.keyPath("blocks_per_rank");
            if (n instanceof ScalarNode sc) {
                if (sc.getValue().equalsIgnoreCase("auto")) {
                    p.autoSplit = true;
                    p.blocksPerRank = new ArrayList<>();
                } else {
                    s.problems().add(key, sc.getValue(), "'auto' or a map of rank to block count such as {0: 8, 1: 8}");
                }
                return;
            }
            Map<Integer, Integer> byRank = new TreeMap<>();
            if (n instanceof MappingNode mapping) {
                for (NodeTuple t : mapping.getValue()) {
                    String k = t.getKeyNode() instanceof ScalarNode ks ? ks.getValue() : "(nested)";
                    String v = t.getValueNode() instanceof ScalarNode vs ? vs.getValue() : "(nested)";
                    int line = YamlSection.line(t.getKeyNode());
                    try {
                        int rank = Integer.parseInt(k.trim());
                        int count = Integer.parseInt(v.trim());
                        if (rank < 0 || count < 1) throw new NumberFormatException();
                        if (byRank.put(rank, count) != null) {
                            s.problems().addRaw(s.problems().file() + ":" + line + ": " + key + "." + k
                                    + ": rank " + rank + " given twice, expected each rank once");
                        }
                    } catch (NumberFormatException e) {
                        s.problems().addRaw(s.problems().file() + ":" + line + ": " + key + "." + k + ": '" + v
                                + "' given, expected RANK: BLOCKS with RANK >= 0 and BLOCKS >= 1");
                    }
                }
            } else if (n instanceof SequenceNode) {
                List<Integer> list = s.integers("blocks_per_rank", List.of());
                for (int i = 0; i < list.size(); i++) byRank.put(i, list.get(i));
            }
            p.autoSplit = false;
            p.blocksPerRank = new ArrayList<>();
            // Keep gaps visible to the validator: a missing rank becomes 0 (reported there, with the rank).
            int maxRank = byRank.isEmpty() ? -1 : ((TreeMap<Integer, Integer>) byRank).lastKey();
            for (int r = 0; r <= maxRank; r++) p.blocksPerRank.add(byRank.getOrDefault(r, 0));
        }
    }

    private static TtpipeConfig.RankBinding readRankBinding(YamlSection s) {
        TtpipeConfig.RankBinding b = new TtpipeConfig.RankBinding();
        if (!s.has("rank")) s.problems().add(s.path(), "missing 'rank' (every binding names its rank)");
        b.rank = s.integer("rank", -1, 0, 4096);
        b.meshId = s.integer("mesh_id", 0, 0, 4096);
        b.meshHostRank = s.integer("mesh_host_rank", 0, 0, 4096);
        b.envOverrides = s.stringMap("env_overrides");
        b.host = s.string("host", b.host);
        b.controlPort = s.integer("control_port", 0, 0, 65535);
        b.dataPort = s.integer("data_port", 0, 0, 65535);
        s.rejectUnknownKeys();
        return b;
    }

    private static void readEval(YamlSection s, TtpipeConfig.EvalConfig e) {
        e.temperature = s.number("temperature", e.temperature, 0, 100);
        e.topK = s.integer("top_k", e.topK, -1, 1 << 24);
        if (e.topK < 0) e.topK = 0;                              // TTML's -1 (its default): every token, ttpipe's 0
        e.topP = s.number("top_p", e.topP, 0, 1);
        e.repetitionPenalty = s.number("repetition_penalty", e.repetitionPenalty, 0, 100);
        e.sampleTokens = s.integer("sample_tokens", e.sampleTokens, 0, 1 << 20);
        e.prompt = s.string("prompt", e.prompt);
        s.rejectUnknownKeys();
    }

    /** The path under {@code key} resolved as {@link #resolve} does; one that cannot be a path is a problem. */
    private static String path(YamlSection s, String key, String def, Path baseDir) {
        String given = s.string(key, def);
        if (given == null) return null;
        try {
            return resolve(baseDir, given, s.problems(), s.keyPath(key));
        } catch (InvalidPathException e) {                    // a NUL character, say
            s.problems().add(s.keyPath(key), given, "a file path (" + e.getReason() + ")");
            return def;
        }
    }

    private static String resolve(Path baseDir, String path) {
        return path == null ? null : resolve(baseDir, path, null, null);
    }

    /**
     * A relative path in a config file as TTML resolves it: against the working directory first (TTML runs
     * from its repository's root, and its configs name {@code configs/model_configs/...} and {@code data/...}
     * from there), then against the config file's folder. Found in neither, it stays beside the config and
     * the places looked are recorded for the error that names the key ({@link ConfigProblems#notFound}).
     */
    private static String resolve(Path baseDir, String path, ConfigProblems problems, String keyPath) {
        Path p = Path.of(path);                                // throws InvalidPathException for what cannot be a path
        if (baseDir == null || p.isAbsolute()) return path;
        if (exists(p)) return path;
        Path besideConfig = baseDir.resolve(p).normalize();
        if (!exists(besideConfig) && problems != null) {
            problems.recordLooked(keyPath, path, List.of(p.toAbsolutePath().normalize(), besideConfig));
        }
        return besideConfig.toString();
    }

    /** Whether a path names something: a file or folder, or a glob ({@code data/*.bin}) whose folder is there. */
    private static boolean exists(Path p) {
        if (Files.exists(p)) return true;
        String name = p.getFileName() == null ? "" : p.getFileName().toString();
        boolean glob = name.indexOf('*') >= 0 || name.indexOf('?') >= 0 || name.indexOf('[') >= 0;
        return glob && Files.isDirectory(p.toAbsolutePath().getParent());
    }
}

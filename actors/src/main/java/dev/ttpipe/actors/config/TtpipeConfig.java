package dev.ttpipe.actors.config;

import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.schedules.Schedules;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The typed model of a ttpipe YAML config, shaped like TTML's: {@code training_config},
 * {@code transformer_config}, {@code device_config}, {@code multihost_config} (with
 * {@code pipeline_parallel_config}), tt-run style {@code rank_bindings} and {@code eval_config}.
 *
 * <p>Built by {@link ConfigLoader}; command-line flags may override fields before
 * {@link ConfigValidator} checks the whole. Lower modules receive typed values taken from here,
 * never YAML.
 */
public final class TtpipeConfig {
    /** Where it came from: a file path or "(embedded default)". */
    public String source = "(defaults)";
    public final TrainingConfig training = new TrainingConfig();
    public final TransformerConfig transformer = new TransformerConfig();
    public final DeviceConfig device = new DeviceConfig();
    public final MultihostConfig multihost = new MultihostConfig();
    public final List<RankBinding> rankBindings = new ArrayList<>();
    public final EvalConfig eval = new EvalConfig();
    public final TelemetryConfig telemetry = new TelemetryConfig();
    /**
     * tt-run's {@code global_env}: environment variables every worker process starts with (a rank's
     * env_overrides win over them) and that a backend in this process reads its settings from (see
     * {@link #environment()}).
     */
    public final Map<String, String> globalEnv = new LinkedHashMap<>();
    /**
     * tt-run's {@code mesh_graph_desc_path}: a tt-metal mesh graph descriptor (.textproto), resolved against
     * the config's folder; ttpipe passes it on as TT_MESH_GRAPH_DESC_PATH (null: none).
     */
    public String meshGraphDescPath = null;
    /** Where each key came from (file line or flag), for error messages after loading. */
    public ConfigProblems origins = new ConfigProblems("(defaults)");

    public PipelineConfig pipeline() {
        return multihost.pipeline;
    }

    /** The variable tt-metal reads the mesh graph descriptor's path from. */
    public static final String MESH_GRAPH_DESC_ENV = "TT_MESH_GRAPH_DESC_PATH";

    /**
     * The environment a job's backend and worker processes start with over the process's own:
     * {@link #globalEnv}, and TT_MESH_GRAPH_DESC_PATH from {@link #meshGraphDescPath} when given.
     */
    public Map<String, String> environment() {
        Map<String, String> env = new LinkedHashMap<>(globalEnv);
        if (meshGraphDescPath != null) env.put(MESH_GRAPH_DESC_ENV, meshGraphDescPath);
        return env;
    }

    /** {@code training_config}. */
    public static final class TrainingConfig {
        public String projectName = "ttpipe";
        public int seed = 5489;
        public int batchSize = 8;
        public int numEpochs = 1;
        public int maxSteps = 100;
        public double learningRate = 3e-4;
        public double weightDecay = 0.01;
        /** adamw | sgd */
        public String optimizer = "adamw";
        public double beta1 = 0.9;
        public double beta2 = 0.999;
        public double epsilon = 1e-8;
        public double momentum = 0.0;
        public double dampening = 0.0;
        public boolean nesterov = false;
        /** identity | warmup_linear | cosine */
        public String schedulerType = "identity";
        public int warmupSteps = 0;
        public double minLearningRate = 0.0;
        public boolean useClipGradNorm = false;
        public double clipGradNormMaxNorm = 1.0;
        public int gradientAccumulationSteps = 1;
        /**
         * A UTF-8 text file, or token files: a nanoGPT/llm.c {@code .bin}, a directory of them (its {@code val}
         * files are the validation data) or a glob; null means the generated arithmetic corpus.
         */
        public String dataPath = null;
        /** Validation text or token files (null: the data directory's val files, else the held-out fraction). */
        public String valDataPath = null;
        /** char (one id per character of the data) | bpe (GPT-2's byte-level BPE). */
        public String tokenizerType = "char";
        public double validationFraction = 0.1;
        /** Evaluate validation loss every N steps (0: only at the end). */
        public int evalEvery = 0;
        public int evalBatches = 4;
        /** Save a checkpoint every N steps (0: only at the end; a run always saves at its last step). */
        public int modelSaveInterval = 0;
        /** Where checkpoints go (null: {@code <run dir>/checkpoints}). */
        public String checkpointDir = null;
        /** Complete checkpoints kept, the newest. */
        public int checkpointKeep = 3;
        /** Fail a step that takes longer than this, with the watchdog's diagnosis (0: never). */
        public int stepTimeoutS = 0;
        /** Times `ttpipe launch` restarts a job whose worker died (-1: not given; launch then takes 3, worker 0). */
        public int maxRestarts = -1;
        /** Steps in a row with a non-finite loss or gradient (each not applied) after which the job stops. */
        public int maxNonfiniteSteps = 3;
        /**
         * The weights to start from: a Hugging Face model directory or a ttpipe checkpoint (TTML's
         * {@code model_path} is read into it too). Null: ttpipe initialises its own.
         */
        public String initFrom = null;
        /** char: a vocab.txt (one code point per line, hex); bpe: gpt2 (the default) or a folder that ttpipe prepare wrote. */
        public String tokenizerPath = null;
        /** Parent folder of run directories. */
        public String runsDir = "runs";
        /** TTML's MorehAdamW: the same AdamW update as ttpipe's (accepted with optimizer adamw only). */
        public boolean useMorehAdamw = false;
        /** TTML's Kahan-compensated AdamW update: not implemented (true is refused). */
        public boolean useKahanSummation = false;
        /** TTML's NoOp optimizer: every step runs forward and backward and updates nothing. */
        public boolean useNoOp = false;
        /**
         * TTML's save-and-exit: write the weights the job starts from (its own initialisation, init_from's or the
         * resumed checkpoint's) as a ttpipe checkpoint under this folder, then stop without training (null: train).
         */
        public String saveAndExit = null;
    }

    /** Tokenizers ttpipe bundles, by the name {@code tokenizer_path} may give. */
    public static final List<String> BUNDLED_TOKENIZERS = List.of("gpt2", "r50k_base");

    /** {@code transformer_config} (TTML nests it in training_config too; both load). */
    public static final class TransformerConfig {
        /** gpt2 | llama | qwen3 */
        public String modelType = "gpt2";
        /** default | memory_efficient (recompute activations in backward) */
        public String runnerType = "default";
        public int numHeads = 6;
        /** Llama grouped-query attention: key/value heads (0: same as num_heads). */
        public int numGroups = 0;
        /** Llama / Qwen3: the size of one attention head (0: embedding_dim / num_heads), Hugging Face's {@code head_dim}. */
        public int headDim = 0;
        /** The norms' epsilon (0: the model type's, 1e-5 for gpt2 and llama, 1e-6 for qwen3). */
        public double normEps = 0;
        public int embeddingDim = 384;
        /** MLP hidden size (0: 4 x embedding for gpt2; TTML's rounding of 8/3 x embedding for llama). */
        public int intermediateDim = 0;
        public double dropoutProb = 0.0;
        public int numBlocks = 6;
        /** 0: taken from the data's character vocabulary. */
        public int vocabSize = 0;
        public int maxSequenceLength = 256;
        public boolean weightTying = false;
        /** trainable (gpt2) | rope (llama) */
        public String positionalEmbeddingType = "trainable";
        public double theta = 10000.0;
        /** Sequence length used for training (0: max_sequence_length). */
        public int sequenceLength = 0;
        /** Llama 3.1's {@code rope_scaling} (type llama3) of the RoPE frequencies (null: none). */
        public RopeFrequencies.Llama3Scaling ropeScaling = null;
        /** TTML's {@code experimental.use_composite_layernorm}: not implemented (true is refused). */
        public boolean useCompositeLayernorm = false;
        /**
         * Where each key of this section was given, as a problem prefix ({@code file:line: key.path}), by key
         * name: the YAML may give them in training_config.transformer_config, transformer_config or a
         * model_config file, and checks after loading name the right one.
         */
        public final Map<String, String> givenAt = new LinkedHashMap<>();

        public int effectiveSequenceLength() {
            return sequenceLength > 0 ? sequenceLength : maxSequenceLength;
        }

        /** Whether the model is of Llama's family (RMSNorm, RoPE, SwiGLU, GQA): llama or qwen3. */
        public boolean llamaFamily() {
            return "llama".equals(modelType) || "qwen3".equals(modelType);
        }

        /** The size of one attention head: head_dim, or embedding_dim / num_heads when it is not given. */
        public int effectiveHeadDim() {
            return headDim > 0 ? headDim : embeddingDim / numHeads;
        }
    }

    /** {@code device_config}. */
    public static final class DeviceConfig {
        public Backend backend = Backend.CPU;
        /** The mesh of each pipeline rank (one host's devices in TTML), [rows, cols]. */
        public List<Integer> meshShape = List.of(1, 1);
        public boolean enableDdp = false;
        public boolean enableTp = false;
        public List<Integer> deviceIds = List.of();
        public long memoryPerDevice = 12L << 30;
        /** fp32 | bf16 (storage) */
        public String dtype = "fp32";
        /** Compute threads for the cpu backend (0: all cores). */
        public int threads = 0;
        /** Path of the bridge library for backend ttnn (null: the reference library from the build). */
        public String bridgeLibrary = null;
        public final SimCostConfig sim = new SimCostConfig();

        public int meshRows() {
            return meshShape.get(0);
        }

        public int meshCols() {
            return meshShape.size() > 1 ? meshShape.get(1) : 1;
        }

        public int devicesPerRank() {
            return meshRows() * meshCols();
        }
    }

    /** {@code device_config.sim}: the cost model of the sim backend. */
    public static final class SimCostConfig {
        /** A named Tenstorrent profile ({@link dev.ttpipe.device.SimProfile}) whose figures the keys below start from (null: none). */
        public String profile = null;
        /** Sustained matmul throughput per device, GFLOP/s. */
        public double gflops = 100.0;
        /** Memory bandwidth per device for elementwise ops, GB/s. */
        public double memoryGbps = 50.0;
        /** Fixed cost per op (dispatch), microseconds. */
        public double opLatencyUs = 5.0;
        /** Collective / point-to-point link bandwidth, GB/s. */
        public double linkGbps = 25.0;
        /** A calibration file written by `ttpipe bench calibrate` (null: use the numbers above). */
        public String calibration = null;
    }

    /** {@code multihost_config}. */
    public static final class MultihostConfig {
        public boolean enabled = false;
        /** Number of worker processes (hosts); 0: one per pipeline rank. */
        public int numWorkers = 0;
        public SocketType socketType = SocketType.LOCAL;
        /** Pekko Artery / Aeron bind address when rank_bindings give none. */
        public String bindHost = "127.0.0.1";
        /** The first Pekko Artery port on each host: a rank without one in its binding takes this + its index on its host. */
        public int controlPort = 25520;
        /** The first Aeron UDP port on each host: a rank without one in its binding takes this + 2 x its index on its host. */
        public int dataPort = 40456;
        /** How long each frame of the link check before step 1 may take (its deadline), seconds. */
        public double linkCheckTimeoutS = 2;
        /** The link check's large frame, bytes (the small one is 1 KiB). */
        public long linkCheckBytes = 4L << 20;
        /** How long a worker that stopped answering (a long GC pause, SIGSTOP, a swapped host) is waited for before it is declared dead. */
        public int livenessGraceS = 30;
        public final PipelineConfig pipeline = new PipelineConfig();
        public final TlsConfig tls = new TlsConfig();
    }

    /**
     * {@code multihost_config.tls}: the control plane (Pekko Artery between the worker processes) over
     * TLS ({@code tls-tcp}). Each password is given either in the file ({@code *_password}) or as the
     * name of an environment variable that holds it ({@code *_password_env}), never both; see
     * {@link #keyStorePassword()}. Paths are resolved against the config's folder.
     */
    public static final class TlsConfig {
        public static final String TLS13 = "TLSv1.3";
        public static final String TLS12 = "TLSv1.2";

        public boolean enabled = false;
        /** PKCS12 or JKS: this rank's private key and certificate chain. */
        public String keyStore = null;
        public String keyStorePassword = null;
        public String keyStorePasswordEnv = null;
        /** The private key's own password (null: the key store's). */
        public String keyPassword = null;
        public String keyPasswordEnv = null;
        /** PKCS12 or JKS: the certificates (or their CA) this rank trusts. */
        public String trustStore = null;
        public String trustStorePassword = null;
        public String trustStorePasswordEnv = null;
        /** TLSv1.3 or TLSv1.2: the one protocol spoken. */
        public String protocol = TLS13;
        /** Cipher suites (empty: the protocol's defaults, {@link #algorithms()}). */
        public List<String> enabledAlgorithms = List.of();
        /** Both ends present a certificate the other trusts (off: only the side that accepts does). */
        public boolean requireMutualAuthentication = true;
        /** The side that connects checks that the other's certificate names the host it connected to. */
        public boolean hostnameVerification = false;

        /** The key store's password: the literal, or the named environment variable's value (null if neither). */
        public String keyStorePassword() {
            return secret(keyStorePassword, keyStorePasswordEnv);
        }

        /** The private key's password: as given, else the key store's. */
        public String keyPassword() {
            String own = secret(keyPassword, keyPasswordEnv);
            return own != null ? own : keyStorePassword();
        }

        public String trustStorePassword() {
            return secret(trustStorePassword, trustStorePasswordEnv);
        }

        /** The cipher suites spoken: as given, else AES-GCM for the protocol (Pekko's defaults for TLSv1.3). */
        public List<String> algorithms() {
            return enabledAlgorithms.isEmpty() ? defaultAlgorithms(protocol) : enabledAlgorithms;
        }

        public static List<String> defaultAlgorithms(String protocol) {
            return TLS12.equals(protocol)
                    ? List.of("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384")
                    : List.of("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384");
        }

        private static String secret(String literal, String env) {
            if (literal != null) return literal;
            return env == null ? null : System.getenv(env);
        }
    }

    /** {@code multihost_config.pipeline_parallel_config}. */
    public static final class PipelineConfig {
        /** Total transformer blocks (must equal transformer_config.num_blocks). 0: take it from there. */
        public int numBlocks = 0;
        /** rank -> blocks; empty with {@link #autoSplit} = true means a cost-balanced split. */
        public List<Integer> blocksPerRank = new ArrayList<>();
        public boolean autoSplit = true;
        /** Pipeline ranks when blocks_per_rank is auto (0: 4). */
        public int numRanks = 0;
        public int numMicrobatches = 8;
        public String schedule = "1f1b";
        /** Stages per rank (0: the schedule's default: 2 for interleaved and dualpipev, else 1). */
        public int virtualStages = 0;
        public PipelineMode mode = PipelineMode.STATIC;

        public int effectiveVirtualStages() {
            if (virtualStages > 0) return virtualStages;
            try {
                return Schedules.defaultVirtualStages(schedule);
            } catch (RuntimeException unknownSchedule) {
                return 1;
            }
        }

        /** Number of pipeline ranks P. */
        public int ranks() {
            if (!autoSplit && !blocksPerRank.isEmpty()) return blocksPerRank.size();
            return numRanks > 0 ? numRanks : 4;
        }
    }

    /** One entry of tt-run's {@code rank_bindings}, plus where the rank's process listens. */
    public static final class RankBinding {
        public int rank;
        public int meshId;
        public int meshHostRank;
        public Map<String, String> envOverrides = new LinkedHashMap<>();
        public String host = "127.0.0.1";
        /** Pekko Artery port (0: multihost_config.control_port + the rank's index on its host). */
        public int controlPort = 0;
        /** Aeron UDP port (0: multihost_config.data_port + 2 x the rank's index on its host). */
        public int dataPort = 0;
    }

    /** {@code telemetry}. */
    public static final class TelemetryConfig {
        /** When no rank has finished an action for this long, print where each rank waits (0: off). */
        public int stallWarningS = 30;
        /** Address of the HTTP endpoint (/metrics, /status) on the Coordinator's host. */
        public String bindHost = "127.0.0.1";
        /** Its port (0: no endpoint). */
        public int port = 9464;
        /** Also write each step's scalars as TensorBoard event files into {@code RUN/tensorboard/}. */
        public boolean tensorboard = false;
        /** A rank or link this many times slower than its peers counts towards a straggler. */
        public double stragglerMargin = 1.5;
        /** Steps in a row at or above the margin to name a straggler, and below it to clear one. */
        public int stragglerSteps = 3;
        /** The first steps observed, left out of the straggler rule (the JIT compiles, buffers fill). */
        public int stragglerWarmupSteps = 5;
        /** How many of a run's first steps trace.json keeps, besides the last (0: the last step only). */
        public int traceSteps = 10;
    }

    /** {@code eval_config}: sampling at the end of training. */
    public static final class EvalConfig {
        public double temperature = 0.0;
        public int topK = 0;
        public double topP = 1.0;
        public double repetitionPenalty = 1.0;
        public int sampleTokens = 120;
        public String prompt = null;
    }
}

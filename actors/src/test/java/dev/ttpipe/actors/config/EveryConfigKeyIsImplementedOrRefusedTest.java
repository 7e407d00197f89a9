package dev.ttpipe.actors.config;

import dev.ttpipe.actors.cli.Main;
import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.device.RopeFrequencies;
import dev.ttpipe.device.SimProfile;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeSet;
import java.util.function.Function;
import java.util.stream.Collectors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * No key is accepted and ignored: for every key the loader accepts ({@link ConfigLoader#acceptedKeys()},
 * taken from the loader as it reads, so a key it starts reading fails this test until it has a row),
 * a row shows either a config in which the key changes what ttpipe loads or what that drives (the
 * plan's model, optimizer, mesh environment, a rank's deployment) compared with the defaults, or the
 * one-line refusal its value gets. A key whose only accepted values are TTML's defaults (or mean what
 * ttpipe does anyway) has a refusal row for the values it cannot honour. Sections are covered by the
 * rows of their keys.
 */
class EveryConfigKeyIsImplementedOrRefusedTest {
    @TempDir
    static Path dir;

    /** The config every row is compared with: nothing given. */
    static TtpipeConfig defaults;

    @BeforeAll
    static void files() throws Exception {
        Files.writeString(dir.resolve("data.txt"), "to be, or not to be, that is the question. ".repeat(20));
        Files.writeString(dir.resolve("val.txt"), "whether 'tis nobler in the mind to suffer. ".repeat(5));
        Files.writeString(dir.resolve("model.yaml"), "transformer_config: {num_blocks: 4}\n");
        Files.writeString(dir.resolve("mgd.textproto"), "mesh_descriptors { name: \"M0\" device_topology { dims: [ 1, 8 ] } }\n");
        Files.createDirectories(dir.resolve("checkpoint"));
        defaults = load("training_config: {}\n");
    }

    /** One way a key shows it is read: {@code value} differs from the defaults', or {@code refusal} is in a problem. */
    record Row(String key, String yaml, Function<TtpipeConfig, Object> value, String refusal, boolean validate) {
        @Override
        public String toString() {
            return key + (refusal != null ? " (refused)" : "");
        }
    }

    static Row changes(String key, String yaml, Function<TtpipeConfig, Object> value) {
        return new Row(key, yaml, value, null, true);
    }

    /** Read only: its cross-key checks need files other tests make (the TLS stores, TlsCheckTest). */
    static Row reads(String key, String yaml, Function<TtpipeConfig, Object> value) {
        return new Row(key, yaml, value, null, false);
    }

    static Row refuses(String key, String yaml, String refusal) {
        return new Row(key, yaml, null, refusal, true);
    }

    static final String LLAMA31 = "{rope_type: llama3, factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0,"
            + " original_max_position_embeddings: 8192}";
    static final String ONE_RANK = "multihost_config: {pipeline_parallel_config: {num_ranks: 1}}\n";
    static final String SIM = "device_config: {backend: sim, sim: {%s}}\n";
    static final String TLS = "multihost_config: {tls: {%s}}\n";

    /** What a llama config's plan turns its RoPE by. */
    static Object rope(TtpipeConfig c) {
        return JobPlan.model(c, 96).rope();
    }

    /** A figure of the plan's RoPE scaling (null: none). */
    static Object scaling(TtpipeConfig c, Function<RopeFrequencies.Llama3Scaling, Object> figure) {
        var r = JobPlan.model(c, 96).ropeScaling();
        return r == null ? null : figure.apply(r);
    }

    static final List<Row> ROWS = List.of(
            // ---- training_config
            changes("training_config.batch_size", "training_config: {batch_size: 16}", c -> c.training.batchSize),
            changes("training_config.beta1", "training_config: {beta1: 0.8}", c -> c.training.beta1),
            changes("training_config.beta2", "training_config: {beta2: 0.99}", c -> c.training.beta2),
            changes("training_config.checkpoint_dir", "training_config: {checkpoint_dir: DIR/ck}", c -> c.training.checkpointDir),
            changes("training_config.checkpoint_keep", "training_config: {checkpoint_keep: 5}", c -> c.training.checkpointKeep),
            changes("training_config.clip_grad_norm_max_norm", "training_config: {clip_grad_norm_max_norm: 0.5}",
                    c -> c.training.clipGradNormMaxNorm),
            changes("training_config.dampening", "training_config: {optimizer: sgd, momentum: 0.9, dampening: 0.1}",
                    c -> JobPlan.from(c, 96).optimizer().dampening()),
            changes("training_config.data_path", "training_config: {data_path: DIR/data.txt}", c -> c.training.dataPath),
            changes("training_config.epsilon", "training_config: {epsilon: 1.0e-6}", c -> JobPlan.from(c, 96).optimizer().epsilon()),
            changes("training_config.eval_batches", "training_config: {eval_batches: 2}", c -> c.training.evalBatches),
            changes("training_config.eval_every", "training_config: {eval_every: 10}", c -> c.training.evalEvery),
            changes("training_config.gradient_accumulation_steps", "training_config: {gradient_accumulation_steps: 2}",
                    c -> JobPlan.from(c, 96).accumulation()),
            changes("training_config.init_from", "training_config: {init_from: DIR/checkpoint}", c -> c.training.initFrom),
            changes("training_config.learning_rate", "training_config: {learning_rate: 0.001}", c -> c.training.learningRate),
            changes("training_config.max_nonfinite_steps", "training_config: {max_nonfinite_steps: 5}", c -> c.training.maxNonfiniteSteps),
            changes("training_config.max_restarts", "training_config: {max_restarts: 2}", c -> c.training.maxRestarts),
            changes("training_config.max_steps", "training_config: {max_steps: 7}", c -> c.training.maxSteps),
            changes("training_config.min_learning_rate", "training_config: {min_learning_rate: 0.0001}", c -> c.training.minLearningRate),
            changes("training_config.model_config", "training_config: {model_config: DIR/model.yaml}", c -> c.transformer.numBlocks),
            changes("training_config.model_path", "training_config: {model_path: DIR/checkpoint}", c -> c.training.initFrom),
            changes("training_config.model_type", "training_config: {model_type: llama}", c -> JobPlan.model(c, 96).type()),
            refuses("training_config.model_type", "training_config: {model_type: llama}\ntransformer_config: {model_type: gpt2}",
                    "'llama' given, but job.yaml:2: transformer_config.model_type is 'gpt2', expected the same model type"),
            changes("training_config.model_save_interval", "training_config: {model_save_interval: 10}", c -> c.training.modelSaveInterval),
            changes("training_config.momentum", "training_config: {optimizer: sgd, momentum: 0.9}",
                    c -> JobPlan.from(c, 96).optimizer().momentum()),
            changes("training_config.nesterov", "training_config: {optimizer: sgd, momentum: 0.9, nesterov: true}",
                    c -> JobPlan.from(c, 96).optimizer().nesterov()),
            refuses("training_config.num_epochs", "training_config: {num_epochs: 2}", "2 given: not supported yet"),
            changes("training_config.optimizer", "training_config: {optimizer: sgd}", c -> JobPlan.from(c, 96).optimizer().kind()),
            changes("training_config.project_name", "training_config: {project_name: other}", c -> c.training.projectName),
            changes("training_config.runs_dir", "training_config: {runs_dir: DIR/runs}", c -> c.training.runsDir),
            changes("training_config.save_and_exit", "training_config: {save_and_exit: DIR/saved}", c -> c.training.saveAndExit),
            refuses("training_config.save_and_exit", "training_config: {save_and_exit: DIR/saved}\ndevice_config: {backend: sim}",
                    "(its weights are placeholders, there is nothing to save)"),
            changes("training_config.scheduler_type", "training_config: {scheduler_type: cosine}", c -> JobPlan.from(c, 96).lr().kind()),
            changes("training_config.seed", "training_config: {seed: 7}", c -> JobPlan.from(c, 96).seed()),
            changes("training_config.step_timeout_s", "training_config: {step_timeout_s: 60}", c -> c.training.stepTimeoutS),
            changes("training_config.tokenizer_path", "training_config: {tokenizer_type: bpe, tokenizer_path: r50k_base}",
                    c -> c.training.tokenizerPath),
            changes("training_config.tokenizer_type", "training_config: {tokenizer_type: bpe}", c -> c.training.tokenizerType),
            changes("training_config.transformer_config", "training_config: {transformer_config: {num_blocks: 5}}",
                    c -> JobPlan.model(c, 96).numBlocks()),
            changes("training_config.use_clip_grad_norm", "training_config: {use_clip_grad_norm: true}", c -> JobPlan.from(c, 96).clipMaxNorm()),
            refuses("training_config.use_kahan_summation", "training_config: {use_kahan_summation: true}",
                    "true given: not supported (ttpipe's AdamW update is not Kahan-compensated"),
            refuses("training_config.use_moreh_adamw", "training_config: {use_moreh_adamw: true, optimizer: sgd}",
                    "(MorehAdamW is an AdamW), expected optimizer adamw, or use_moreh_adamw false"),
            changes("training_config.use_no_op", "training_config: {use_no_op: true}", c -> JobPlan.from(c, 96).optimizer().kind()),
            refuses("training_config.use_no_op", "training_config: {use_no_op: true, optimizer: sgd}",
                    "(use_no_op is TTML's NoOp optimizer, which updates nothing), expected one of them"),
            changes("training_config.val_data_path", "training_config: {data_path: DIR/data.txt, val_data_path: DIR/val.txt}",
                    c -> c.training.valDataPath),
            refuses("training_config.val_data_path", "training_config: {val_data_path: DIR/val.txt}",
                    "given without data_path (the generated arithmetic corpus holds out its own validation share)"),
            changes("training_config.validation_fraction", "training_config: {validation_fraction: 0.2}", c -> c.training.validationFraction),
            changes("training_config.warmup_steps", "training_config: {warmup_steps: 10}", c -> JobPlan.from(c, 96).lr().warmupSteps()),
            changes("training_config.weight_decay", "training_config: {weight_decay: 0.1}", c -> JobPlan.from(c, 96).optimizer().weightDecay()),
            // ---- transformer_config (also read under training_config and from a model_config file)
            changes("transformer_config.dropout_prob", "transformer_config: {dropout_prob: 0.1}", c -> JobPlan.model(c, 96).dropout()),
            changes("transformer_config.embedding_dim", "transformer_config: {embedding_dim: 192}", c -> JobPlan.model(c, 96).embeddingDim()),
            refuses("transformer_config.experimental.use_composite_layernorm",
                    "transformer_config: {experimental: {use_composite_layernorm: true}}",
                    "true given: not supported (ttpipe has one LayerNorm kernel per backend"),
            changes("transformer_config.intermediate_dim", "transformer_config: {intermediate_dim: 512}",
                    c -> JobPlan.model(c, 96).intermediateDim()),
            changes("transformer_config.max_sequence_length", "transformer_config: {max_sequence_length: 128}",
                    c -> JobPlan.model(c, 96).maxSequenceLength()),
            changes("transformer_config.model_type", "transformer_config: {model_type: llama}", c -> JobPlan.model(c, 96).type()),
            changes("transformer_config.model_type", "transformer_config: {model_type: qwen3}", c -> JobPlan.model(c, 96).qkNorm()),
            refuses("transformer_config.model_type", "transformer_config: {model_type: mistral}",
                    "transformer_config.model_type: 'mistral' given, expected one of gpt2, llama, qwen3"),
            changes("transformer_config.head_dim", "transformer_config: {model_type: qwen3, head_dim: 128}",
                    c -> JobPlan.model(c, 96).attentionDim()),
            refuses("transformer_config.head_dim", "transformer_config: {head_dim: 32}",
                    "given for model_type gpt2 (the default), expected it only for llama or qwen3 (gpt2's head size is"
                            + " embedding_dim / num_heads)"),
            changes("transformer_config.norm_eps", "transformer_config: {norm_eps: 1.0e-6}", c -> JobPlan.model(c, 96).normEps()),
            changes("transformer_config.num_blocks", "transformer_config: {num_blocks: 4}", c -> JobPlan.model(c, 96).numBlocks()),
            changes("transformer_config.num_groups", "transformer_config: {model_type: llama, num_groups: 3}",
                    c -> JobPlan.model(c, 96).numKvHeads()),
            changes("transformer_config.num_heads", "transformer_config: {num_heads: 4}", c -> JobPlan.model(c, 96).numHeads()),
            refuses("transformer_config.positional_embedding_type", "transformer_config: {positional_embedding_type: rope}",
                    "'rope' given for model_type gpt2: not supported (gpt2 uses trainable positions)"),
            changes("transformer_config.rope_scaling.rope_type", "transformer_config: {model_type: llama, rope_scaling: " + LLAMA31 + "}",
                    EveryConfigKeyIsImplementedOrRefusedTest::rope),
            refuses("transformer_config.rope_scaling.rope_type", "transformer_config: {model_type: llama, rope_scaling: "
                    + LLAMA31.replace("llama3", "yarn") + "}", "'yarn' given, expected llama3"),
            refuses("transformer_config.rope_scaling", "transformer_config: {rope_scaling: " + LLAMA31 + "}",
                    "given for model_type gpt2 (the default), expected it only for llama"),
            changes("transformer_config.rope_scaling.type", "transformer_config: {model_type: llama, rope_scaling: "
                    + LLAMA31.replace("rope_type", "type") + "}", EveryConfigKeyIsImplementedOrRefusedTest::rope),
            changes("transformer_config.rope_scaling.factor", "transformer_config: {model_type: llama, rope_scaling: "
                    + LLAMA31.replace("factor: 8.0", "factor: 4.0") + "}", c -> scaling(c, r -> r.factor())),
            changes("transformer_config.rope_scaling.low_freq_factor", "transformer_config: {model_type: llama, rope_scaling: "
                    + LLAMA31 + "}", c -> JobPlan.model(c, 96).rope().inverse(64)[27]),
            changes("transformer_config.rope_scaling.high_freq_factor", "transformer_config: {model_type: llama, rope_scaling: "
                    + LLAMA31.replace("high_freq_factor: 4.0", "high_freq_factor: 2.0") + "}",
                    c -> scaling(c, r -> r.highFreqFactor())),
            changes("transformer_config.rope_scaling.original_max_position_embeddings", "transformer_config: {model_type: llama,"
                    + " rope_scaling: " + LLAMA31 + "}", c -> scaling(c, r -> r.originalMaxPositions())),
            changes("transformer_config.rope_scaling.scaling_factor", "transformer_config: {model_type: llama, rope_scaling:"
                    + " {scaling_factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_context_length: 8192}}",
                    EveryConfigKeyIsImplementedOrRefusedTest::rope),
            changes("transformer_config.rope_scaling.original_context_length", "transformer_config: {model_type: llama, rope_scaling:"
                    + " {scaling_factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_context_length: 4096}}",
                    c -> scaling(c, r -> r.originalMaxPositions())),
            changes("transformer_config.runner_type", "transformer_config: {runner_type: memory_efficient}",
                    c -> JobPlan.model(c, 96).recompute()),
            changes("transformer_config.sequence_length", "transformer_config: {sequence_length: 128}", c -> JobPlan.from(c, 96).seqLen()),
            changes("transformer_config.theta", "transformer_config: {model_type: llama, theta: 500000.0}",
                    EveryConfigKeyIsImplementedOrRefusedTest::rope),
            refuses("transformer_config.theta", "transformer_config: {theta: 500000.0}",
                    "given for model_type gpt2 (the default), expected it only for llama"),
            changes("transformer_config.vocab_size", "transformer_config: {vocab_size: 256}", c -> JobPlan.model(c, 96).vocabSize()),
            changes("transformer_config.weight_tying", "transformer_config: {weight_tying: true}", c -> JobPlan.model(c, 96).weightTying()),
            // ---- device_config
            changes("device_config.backend", "device_config: {backend: sim}", c -> JobPlan.from(c, 96).backend()),
            changes("device_config.bridge_library", "device_config: {bridge_library: DIR/libbridge.so}",
                    c -> JobPlan.from(c, 96).meshOptions().bridgeLibrary()),
            refuses("device_config.device_ids", "device_config: {device_ids: [0]}", "[0] given: not supported yet"),
            changes("device_config.dtype", "device_config: {dtype: bf16}", c -> JobPlan.model(c, 96).dtype()),
            changes("device_config.enable_ddp", "training_config: {batch_size: 16}\ndevice_config: {enable_ddp: true, mesh_shape: [1, 2]}",
                    c -> JobPlan.from(c, 96).parallelism().ddp()),
            changes("device_config.enable_tp", "device_config: {enable_tp: true, mesh_shape: [1, 2]}",
                    c -> JobPlan.from(c, 96).parallelism().tp()),
            changes("device_config.memory_per_device", "device_config: {memory_per_device: 8GiB}",
                    c -> JobPlan.from(c, 96).meshOptions().memoryPerDevice()),
            changes("device_config.mesh_shape", "device_config: {enable_tp: true, mesh_shape: [1, 2]}", c -> JobPlan.from(c, 96).rankMesh()),
            changes("device_config.threads", "device_config: {threads: 2}", c -> JobPlan.from(c, 96).meshOptions().threads()),
            refuses("device_config.sim.calibration", String.format(SIM, "calibration: DIR/cal.json"), "given: not supported yet"),
            changes("device_config.sim.gflops", String.format(SIM, "gflops: 250"), c -> JobPlan.from(c, 96).meshOptions().simCosts().gflops()),
            changes("device_config.sim.link_gbps", String.format(SIM, "link_gbps: 5"),
                    c -> JobPlan.from(c, 96).meshOptions().simCosts().linkGbps()),
            changes("device_config.sim.memory_gbps", String.format(SIM, "memory_gbps: 300"),
                    c -> JobPlan.from(c, 96).meshOptions().simCosts().memoryGbps()),
            changes("device_config.sim.op_latency_us", String.format(SIM, "op_latency_us: 2"),
                    c -> JobPlan.from(c, 96).meshOptions().simCosts().opLatencyUs()),
            changes("device_config.sim.profile", String.format(SIM, "profile: " + SimProfile.names().get(0)),
                    c -> JobPlan.from(c, 96).meshOptions().simCosts()),
            // ---- eval_config
            changes("eval_config.prompt", "eval_config: {prompt: \"to be\"}", c -> c.eval.prompt),
            refuses("eval_config.repetition_penalty", "eval_config: {repetition_penalty: 1.2}", "1.2 given: not supported yet"),
            changes("eval_config.sample_tokens", "eval_config: {sample_tokens: 20}", c -> c.eval.sampleTokens),
            changes("eval_config.temperature", "eval_config: {temperature: 0.8}", c -> c.eval.temperature),
            changes("eval_config.top_k", "eval_config: {top_k: 5}", c -> c.eval.topK),
            refuses("eval_config.top_p", "eval_config: {top_p: 0.9}", "0.9 given: not supported yet"),
            // ---- tt-run's keys
            changes("global_env", "global_env: {TT_METAL_LOGGER_LEVEL: \"INFO\"}", c -> JobPlan.from(c, 96).meshOptions().environment()),
            refuses("global_env", "global_env: {TT_MESH_ID: \"3\"}", "ttpipe launch sets TT_MESH_ID for each rank itself"),
            changes("mesh_graph_desc_path", "mesh_graph_desc_path: DIR/mgd.textproto",
                    c -> JobPlan.from(c, 96).meshOptions().environment().get(TtpipeConfig.MESH_GRAPH_DESC_ENV)),
            refuses("mesh_graph_desc_path", "mesh_graph_desc_path: DIR/missing.textproto",
                    "given: no such file, expected a tt-metal mesh graph descriptor (.textproto)"),
            // ---- multihost_config
            changes("multihost_config.bind_host", "multihost_config: {bind_host: 0.0.0.0}", c -> Deployment.of(c).rank(0).host()),
            changes("multihost_config.control_port", "multihost_config: {control_port: 26000}", c -> Deployment.of(c).rank(0).controlPort()),
            changes("multihost_config.data_port", "multihost_config: {data_port: 41000}", c -> Deployment.of(c).rank(0).dataPort()),
            changes("multihost_config.enabled", "multihost_config: {enabled: true, socket_type: aeron}", c -> c.multihost.enabled),
            changes("multihost_config.link_check_bytes", "multihost_config: {link_check_bytes: 1MiB}", c -> c.multihost.linkCheckBytes),
            refuses("multihost_config.link_check_bytes", "multihost_config: {link_check_bytes: 1KiB}", "expected a size from 64KiB to 1GiB"),
            changes("multihost_config.link_check_timeout_s", "multihost_config: {link_check_timeout_s: 5}", c -> c.multihost.linkCheckTimeoutS),
            changes("multihost_config.liveness_grace_s", "multihost_config: {liveness_grace_s: 5}", c -> Deployment.of(c).livenessGrace()),
            refuses("multihost_config.liveness_grace_s", "multihost_config: {liveness_grace_s: 0}", "'0' given, expected in [1, 86400]"),
            refuses("multihost_config.num_workers", "multihost_config: {num_workers: 3}",
                    "3 given for 4 pipeline ranks: not supported (ttpipe runs one worker process per pipeline rank), expected 4"),
            changes("multihost_config.socket_type", "multihost_config: {socket_type: aeron}", c -> JobPlan.from(c, 96).transport()),
            changes("multihost_config.pipeline_parallel_config.blocks_per_rank",
                    "multihost_config: {pipeline_parallel_config: {blocks_per_rank: {0: 4, 1: 2}}}", c -> JobPlan.from(c, 96).slices()),
            changes("multihost_config.pipeline_parallel_config.mode", "multihost_config: {pipeline_parallel_config: {mode: ready-first}}",
                    c -> JobPlan.from(c, 96).readyFirst()),
            refuses("multihost_config.pipeline_parallel_config.num_blocks", "multihost_config: {pipeline_parallel_config: {num_blocks: 5}}",
                    "5 given, expected transformer_config.num_blocks = 6"),
            changes("multihost_config.pipeline_parallel_config.num_microbatches",
                    "multihost_config: {pipeline_parallel_config: {num_microbatches: 4}}", c -> JobPlan.from(c, 96).microbatches()),
            changes("multihost_config.pipeline_parallel_config.num_ranks", "multihost_config: {pipeline_parallel_config: {num_ranks: 2}}",
                    c -> JobPlan.from(c, 96).ranks()),
            changes("multihost_config.pipeline_parallel_config.schedule", "multihost_config: {pipeline_parallel_config: {schedule: gpipe}}",
                    c -> JobPlan.from(c, 96).schedule().name()),
            changes("multihost_config.pipeline_parallel_config.virtual_stages",
                    "multihost_config: {pipeline_parallel_config: {num_ranks: 2, schedule: interleaved, virtual_stages: 3}}",
                    c -> JobPlan.from(c, 96).stages()),
            reads("multihost_config.tls.enabled", String.format(TLS, "enabled: true"), c -> c.multihost.tls.enabled),
            reads("multihost_config.tls.enabled_algorithms", String.format(TLS, "enabled_algorithms: [TLS_AES_256_GCM_SHA384]"),
                    c -> c.multihost.tls.algorithms()),
            reads("multihost_config.tls.hostname_verification", String.format(TLS, "hostname_verification: true"),
                    c -> c.multihost.tls.hostnameVerification),
            reads("multihost_config.tls.key_password", String.format(TLS, "key_password: k"), c -> c.multihost.tls.keyPassword()),
            reads("multihost_config.tls.key_password_env", String.format(TLS, "key_password_env: PATH"), c -> c.multihost.tls.keyPassword()),
            reads("multihost_config.tls.key_store", String.format(TLS, "key_store: DIR/keys.p12"), c -> c.multihost.tls.keyStore),
            reads("multihost_config.tls.key_store_password", String.format(TLS, "key_store_password: s"),
                    c -> c.multihost.tls.keyStorePassword()),
            reads("multihost_config.tls.key_store_password_env", String.format(TLS, "key_store_password_env: PATH"),
                    c -> c.multihost.tls.keyStorePassword()),
            reads("multihost_config.tls.protocol", String.format(TLS, "protocol: TLSv1.2"), c -> c.multihost.tls.algorithms()),
            reads("multihost_config.tls.require_mutual_authentication", String.format(TLS, "require_mutual_authentication: false"),
                    c -> c.multihost.tls.requireMutualAuthentication),
            reads("multihost_config.tls.trust_store", String.format(TLS, "trust_store: DIR/trust.p12"), c -> c.multihost.tls.trustStore),
            reads("multihost_config.tls.trust_store_password", String.format(TLS, "trust_store_password: t"),
                    c -> c.multihost.tls.trustStorePassword()),
            reads("multihost_config.tls.trust_store_password_env", String.format(TLS, "trust_store_password_env: PATH"),
                    c -> c.multihost.tls.trustStorePassword()),
            // ---- rank_bindings (one rank, so that one binding is all of them)
            changes("rank_bindings[].rank", ONE_RANK + "rank_bindings: [{rank: 0}]", c -> c.rankBindings.size()),
            refuses("rank_bindings[].rank", ONE_RANK + "rank_bindings: [{rank: 1}]", "rank 0 is missing"),
            changes("rank_bindings[].control_port", ONE_RANK + "rank_bindings: [{rank: 0, control_port: 26000}]",
                    c -> Deployment.of(c).rank(0).controlPort()),
            changes("rank_bindings[].data_port", ONE_RANK + "rank_bindings: [{rank: 0, data_port: 41000}]",
                    c -> Deployment.of(c).rank(0).dataPort()),
            changes("rank_bindings[].env_overrides", ONE_RANK + "rank_bindings: [{rank: 0, env_overrides: {TT_VISIBLE_DEVICES: \"0\"}}]",
                    c -> Deployment.of(c).rank(0).env()),
            changes("rank_bindings[].host", ONE_RANK + "rank_bindings: [{rank: 0, host: 10.0.0.2}]", c -> Deployment.of(c).rank(0).host()),
            changes("rank_bindings[].mesh_host_rank", ONE_RANK + "rank_bindings: [{rank: 0, mesh_host_rank: 2}]",
                    c -> Deployment.of(c).rank(0).meshHostRank()),
            changes("rank_bindings[].mesh_id", ONE_RANK + "rank_bindings: [{rank: 0, mesh_id: 3}]", c -> Deployment.of(c).rank(0).meshId()),
            // ---- telemetry
            changes("telemetry.bind_host", "telemetry: {bind_host: 0.0.0.0}", c -> c.telemetry.bindHost),
            changes("telemetry.port", "telemetry: {port: 0}", c -> c.telemetry.port),
            changes("telemetry.tensorboard", "telemetry: {tensorboard: true}", c -> c.telemetry.tensorboard),
            changes("telemetry.stall_warning_s", "telemetry: {stall_warning_s: 5}", c -> c.telemetry.stallWarningS),
            changes("telemetry.straggler_margin", "telemetry: {straggler_margin: 2.5}", c -> c.telemetry.stragglerMargin),
            changes("telemetry.straggler_steps", "telemetry: {straggler_steps: 5}", c -> c.telemetry.stragglerSteps),
            changes("telemetry.straggler_warmup_steps", "telemetry: {straggler_warmup_steps: 2}",
                    c -> c.telemetry.stragglerWarmupSteps),
            changes("telemetry.trace_steps", "telemetry: {trace_steps: 0}", c -> c.telemetry.traceSteps));

    static TtpipeConfig read(String yaml) {
        return ConfigLoader.read(yaml.replace("DIR", dir.toString()), "job.yaml", dir);
    }

    static TtpipeConfig load(String yaml) {
        TtpipeConfig cfg = read(yaml);
        ConfigValidator.validate(cfg);
        return cfg;
    }

    /** Sections: keys under which other keys sit (their rows are their keys' rows). */
    static boolean isSection(String key, Set<String> keys) {
        return keys.stream().anyMatch(k -> k.startsWith(key + ".") || k.startsWith(key + "[]."));
    }

    @Test
    void everyAcceptedKeyHasARowAndEveryRowAnAcceptedKey() {
        SortedSet<String> accepted = ConfigLoader.acceptedKeys();
        Set<String> rowed = ROWS.stream().map(Row::key).collect(Collectors.toCollection(TreeSet::new));
        List<String> missing = accepted.stream().filter(k -> !isSection(k, accepted) && !rowed.contains(k)).toList();
        assertEquals(List.of(), missing, "keys the loader accepts with no row showing what they change or how they are refused");
        List<String> unknown = rowed.stream().filter(k -> !accepted.contains(k)).toList();
        assertEquals(List.of(), unknown, "rows for keys the loader does not accept");
        assertTrue(accepted.size() > 120, "the loader's keys: " + accepted);
    }

    @Test
    void everyRowChangesWhatTheDefaultsGiveOrIsRefusedInOneLineNamingTheKey() {
        List<String> failures = new ArrayList<>();
        for (Row row : ROWS) {
            try {
                check(row);
            } catch (AssertionError | RuntimeException e) {
                failures.add(row + ": " + e.getMessage());
            }
        }
        if (!failures.isEmpty()) fail(failures.size() + " of " + ROWS.size() + " rows:\n" + String.join("\n", failures));
    }

    static void check(Row row) {
        String path = row.key().replace("[]", "[0]");
        if (row.refusal() != null) {
            ConfigException e = assertThrows(ConfigException.class, () -> load(row.yaml()), "accepted");
            String dotted = path.startsWith("transformer_config.") ? path.substring(path.indexOf('.') + 1) : path;
            List<String> lines = e.problems().stream().filter(l -> l.contains(row.refusal())).toList();
            assertFalse(lines.isEmpty(), "no problem says '" + row.refusal() + "': " + e.problems());
            for (String l : lines) {
                assertFalse(l.contains("\n"), "more than one line: " + l);
                assertTrue(l.startsWith("job.yaml") && l.contains(dotted.contains("[0]") ? dotted.substring(0, dotted.indexOf('[')) : dotted),
                        "the problem does not name the file and the key " + dotted + ": " + l);
            }
            return;
        }
        String name = path.substring(path.lastIndexOf('.') + 1);
        assertTrue(row.yaml().contains(name.replace("[0]", "") + ":"), "the row's YAML does not give " + path);
        TtpipeConfig cfg = row.validate() ? load(row.yaml()) : read(row.yaml());
        Object got = row.value().apply(cfg), before = row.value().apply(defaults);
        assertNotEquals(normal(before), normal(got), "the same as the defaults give: " + got);
    }

    /** Records and lists compare by value; others as they are. */
    static Object normal(Object o) {
        return o instanceof List<?> l ? List.copyOf(l.stream().map(x -> Objects.toString(x)).toList()) : o;
    }

    @Test
    void aRefusedValueIsExitCodeTwoFromTheCommandLine() throws Exception {
        Path cfg = dir.resolve("kahan.yaml");
        Files.writeString(cfg, "training_config: {use_kahan_summation: true}\n");
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        PrintStream oldErr = System.err;
        int code;
        try {
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            code = Main.run("verify", cfg.toString());
        } finally {
            System.setErr(oldErr);
        }
        String text = err.toString(StandardCharsets.UTF_8).strip();
        assertEquals(2, code, text);
        assertTrue(text.contains(cfg + ":1: training_config.use_kahan_summation: true given: not supported"), text);
        assertEquals(1, text.lines().count(), text);
    }
}

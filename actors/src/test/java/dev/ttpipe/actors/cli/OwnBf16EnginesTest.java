package dev.ttpipe.actors.cli;

import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

/**
 * The cpu backend's own bf16 engines keep the contract: a bf16 pipeline on each matches the reference trainer bit for
 * bit, and the run says which engine ran. {@code fma} (bf16 operands widened while packed, fp32 FMAs) needs the native
 * kernels on a CPU with AVX2 and FMA; {@code dot} (the vdpbf16ps dot product on operands packed in pairs) one with
 * avx512_bf16. Where one cannot run, verify refuses it in one line, and that case skips.
 */
class OwnBf16EnginesTest {
    private static final String JOB = String.join("\n",
            "training_config: {batch_size: 8, max_steps: 2, learning_rate: 0.003, runs_dir: RUNS, eval_every: 0}",
            "transformer_config: {num_heads: 2, embedding_dim: 64, num_blocks: 3, max_sequence_length: 32}",
            "device_config: {dtype: bf16}",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 3, blocks_per_rank: {0: 1, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
            "global_env: {TTPIPE_BF16_GEMM: ENGINE}",
            "");

    @ParameterizedTest(name = "{0}")
    @CsvSource(delimiter = '|', value = {
            "fma | (fma) needs the native kernels | ttpipe's bf16-reading GEMM",
            "dot | (dot) needs the native kernels on a CPU with avx512_bf16 | ttpipe's bf16 dot-product GEMM"})
    void aBf16PipelineOnTheEngineMatchesTheReferenceExactly(String engine, String cannot, String named, @TempDir Path dir)
            throws Exception {
        Path cfg = CliTest.config(dir, JOB.replace("RUNS", dir.resolve("runs").toString()).replace("ENGINE", engine));
        CliTest.Result v = CliTest.run("verify", cfg.toString(), "--tolerance", "0");
        assumeFalse(v.code() == 2 && v.err().contains(cannot), "the " + engine + " engine cannot run here: " + v.err());
        assertEquals(0, v.code(), v.out() + v.err());
        assertTrue(v.out().contains("OK: the pipelined run matches the reference trainer within 0.0"), v.out());

        CliTest.Result t = CliTest.run("train", cfg.toString(), "--run-dir", dir.resolve("run").toString());
        assertEquals(0, t.code(), t.err());
        String record = Files.readString(dir.resolve("run/run.json"));
        assertTrue(record.contains(named), record);
        if (engine.equals("fma")) assertTrue(record.contains("fma asked for"), record);
    }
}

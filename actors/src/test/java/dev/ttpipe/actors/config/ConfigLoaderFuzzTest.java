package dev.ttpipe.actors.config;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;
import org.junit.jupiter.api.AfterAll;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertFalse;

/**
 * Any text given as a config either loads (read and validated, as {@code ttpipe train CONFIG} does)
 * or fails with a {@link ConfigException} whose every problem is one line: never another exception
 * (NullPointerException, ClassCastException, InvalidPathException), a StackOverflowError on nested or
 * self-referencing YAML, or an alias bomb's blow-up. Relative paths resolve in an empty directory.
 * Fuzzes for a few seconds in the default run (longer with -Plong) and always replays the inputs under
 * {@code ConfigLoaderFuzzTestInputs}: the configs of {@code configs/} and the inputs that found bugs.
 */
class ConfigLoaderFuzzTest {
    private static final Path BASE_DIR = emptyDirectory();

    @AfterAll
    static void removeBaseDir() throws IOException {
        Files.deleteIfExists(BASE_DIR);
    }

    @FuzzTest
    @DictionaryEntries({"training_config:", "transformer_config:", "device_config:", "multihost_config:",
            "pipeline_parallel_config:", "blocks_per_rank:", "rank_bindings:", "eval_config:", "telemetry:", "sim:",
            "model_config:", "data_path:", "mesh_shape:", "num_microbatches:", "schedule:", "virtual_stages:",
            "num_blocks:", "batch_size:", "env_overrides:", "memory_per_device:", "socket_type:", "&a ", "*a", "<<: ",
            "!!str ", "!!map ", "!!seq ", "!!int ", "!!binary ", "? ", "- ", "{", "}", "[", "]", "auto", "1f1b", "zb-h1",
            "interleaved", "1e308", "0x", "~", "null", "12GiB"})
    void readsOnlyConfigsOrConfigExceptions(byte[] input) {
        String text = new String(input, StandardCharsets.UTF_8);
        try {
            TtpipeConfig cfg = ConfigLoader.read(text, "fuzz.yaml", BASE_DIR);
            ConfigValidator.validate(cfg);
        } catch (ConfigException e) {
            for (String p : e.problems()) {
                assertFalse(p.contains("\n") || p.contains("\r"), () -> "a problem of more than one line: " + p);
            }
        }
    }

    private static Path emptyDirectory() {
        try {
            return Files.createTempDirectory("ttpipe-config-fuzz");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}

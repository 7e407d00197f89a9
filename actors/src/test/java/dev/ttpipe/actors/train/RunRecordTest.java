package dev.ttpipe.actors.train;

import dev.ttpipe.actors.runtime.PipelineRuntime;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** run.json never stays "running" once the run is over, whatever ended it; it names the data it trained on. */
class RunRecordTest {
    /** A console that breaks once the samples start: something failing after the last step, as sampling once did. */
    static final class BreaksAtSamples extends OutputStream {
        private final StringBuilder seen = new StringBuilder();

        @Override
        public void write(int b) {
            seen.append((char) b);
            if (seen.indexOf("samples (") >= 0) throw new IllegalStateException("the console broke at the samples");
        }
    }

    @Test
    void aRunThatThrowsAfterItsLastStepIsRecordedFailed(@TempDir Path dir) throws Exception {
        TrainingJob job = FaultRecoveryTest.job(2);
        Path runDir = Files.createDirectories(dir.resolve("run"));
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan())) {
            PrintStream out = new PrintStream(new BreaksAtSamples(), true, StandardCharsets.UTF_8);
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> job.run(runtime, runDir, out));
            assertEquals("the console broke at the samples", e.getMessage());
        }
        String record = Files.readString(runDir.resolve("run.json"));
        assertTrue(record.contains("\"status\": \"failed: the console broke at the samples\""), record);
        assertTrue(record.contains("\"steps_done\": 2"), record);
    }

    @Test
    void aDataFolderIsHashedAsTheManifestSha256sumPrints(@TempDir Path dir) throws Exception {
        Path data = Files.createDirectories(dir.resolve("shakes"));
        Files.write(data.resolve("train.bin"), new byte[]{1, 2, 3, 4});
        Files.writeString(Files.createDirectories(data.resolve("tokenizer")).resolve("vocab.json"), "{\"a\": 0}");
        Files.writeString(data.resolve("meta.json"), "{}");
        String hash = RunRecord.sha256(data);
        assertTrue(hash.matches("[0-9a-f]{64}"), hash);

        Files.writeString(data.resolve("meta.json"), "{ }");
        assertNotEquals(hash, RunRecord.sha256(data), "a changed file changes the folder's hash");

        Assumptions.assumeTrue(Files.isExecutable(Path.of("/usr/bin/sha256sum")), "no sha256sum to compare with");
        Process p = new ProcessBuilder("bash", "-c",
                "find . -type f -printf '%P\\n' | LC_ALL=C sort | xargs -d '\\n' sha256sum | sha256sum")
                .directory(data.toFile()).redirectErrorStream(true).start();
        String shell = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, p.waitFor(), shell);
        assertEquals(shell.substring(0, 64), RunRecord.sha256(data), "the documented command gives the same hash");
    }
}

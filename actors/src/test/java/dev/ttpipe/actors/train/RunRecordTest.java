package dev.ttpipe.actors.train;

import dev.ttpipe.actors.runtime.PipelineRuntime;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** run.json never stays "running" once the run is over, whatever ended it. */
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
}

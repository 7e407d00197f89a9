package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.telemetry.TensorBoardEventsTest;
import dev.ttpipe.actors.telemetry.TensorBoardEventsTest.Event;
import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code telemetry.tensorboard: true}: a real training run's TensorBoard scalars are its metrics.jsonl's. */
class TensorBoardCliTest {
    @Test
    void aTrainingRunWritesTheScalarsOfMetricsJsonl(@TempDir Path dir) throws IOException {
        Path run = dir.resolve("run");
        CliTest.Result r = CliTest.run("train", Path.of("..", "configs", "nanogpt-pp4-1f1b.yaml").toString(), "--max-steps", "3",
                "--run-dir", run.toString(), "--set", "telemetry.tensorboard=true", "--set", "telemetry.port=0",
                "--set", "training_config.eval_every=2");
        assertEquals(0, r.code(), r.out() + r.err());
        Path file;
        try (Stream<Path> files = Files.list(run.resolve("tensorboard"))) {
            file = files.filter(f -> f.getFileName().toString().startsWith("events.out.tfevents.")).findFirst().orElseThrow();
        }
        List<Event> events = TensorBoardEventsTest.read(file);
        List<String> lines = Files.readAllLines(run.resolve("metrics.jsonl"));
        assertEquals(1 + lines.size(), events.size(), "the version record, then a record per step");
        for (int k = 0; k < lines.size(); k++) {
            Map<?, ?> line = (Map<?, ?>) MiniJson.parse(lines.get(k));
            Event e = events.get(k + 1);
            assertEquals(((Number) line.get("step")).longValue(), e.step());
            assertEquals(((Number) line.get("loss")).floatValue(), e.scalars().get("train/loss"));
            assertEquals(((Number) line.get("grad_norm")).floatValue(), e.scalars().get("train/grad_norm"));
            assertEquals(((Number) line.get("lr")).floatValue(), e.scalars().get("train/lr"));
            assertEquals(line.containsKey("val_loss"), e.scalars().containsKey("val/loss"), lines.get(k));
        }
        assertTrue(events.get(2).scalars().containsKey("val/loss"), "val/loss at step 2: " + events);
    }
}

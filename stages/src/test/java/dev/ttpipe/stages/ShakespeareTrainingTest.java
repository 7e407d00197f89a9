package dev.ttpipe.stages;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A small GPT trained with the reference trainer on tinyshakespeare reaches a validation loss
 * below 2.0 nats per character. Skips (with a message) when ../shared/data/tinyshakespeare.txt is
 * absent. Tagged long: run it with {@code mvn -B test -Plong}.
 */
@Tag("long")
class ShakespeareTrainingTest {
    static final Path DATA = Path.of("../../shared/data/tinyshakespeare.txt");

    @Test
    void smallGptLearnsShakespeareBelowTwoNatsPerCharacter() throws Exception {
        Path data = Files.exists(DATA) ? DATA : Path.of("../shared/data/tinyshakespeare.txt");
        Assumptions.assumeTrue(Files.exists(data), "skipped: " + DATA.toAbsolutePath().normalize() + " is absent");
        TextDataset ds = TextDataset.of(TextDataset.readUtf8(data), 0.1);
        int steps = 800, batch = 32, seq = 64;
        ModelSpec spec = new ModelSpec(ModelSpec.ModelType.GPT2, ds.tokenizer().vocabSize(), 128, 4, 4, 4, 512, seq,
                0f, false, 10000f, false);
        long t0 = System.nanoTime();
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults());
             ReferenceTrainer t = new ReferenceTrainer(spec, mesh.asSubmesh(), Parallelism.NONE, 1337,
                     OptimizerSpec.adamw(3e-3, 0.01), new LrSchedule(LrSchedule.Kind.COSINE, 3e-3, 30, steps, 3e-4), 1.0, 1)) {
            double loss = Double.NaN;
            for (int s = 0; s < steps; s++) {
                loss = t.step(s, List.of(ds.trainBatch(1337, s, batch, seq))).loss();
                if (s % 100 == 0) System.out.printf("step %d loss %.3f (%.0f s)%n", s, loss, (System.nanoTime() - t0) / 1e9);
            }
            List<Batch> val = new ArrayList<>();
            for (int i = 0; i < 8; i++) val.add(ds.validationBatch(1337, i, batch, seq));
            double valLoss = t.evaluate(val);
            System.out.printf("after %d steps: train loss %.3f, validation loss %.3f nats/char, %.0f s%n", steps, loss, valLoss,
                    (System.nanoTime() - t0) / 1e9);
            assertTrue(valLoss < 2.0, "validation loss " + valLoss + " nats/char, expected below 2.0");
        }
    }
}

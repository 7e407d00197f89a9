package dev.ttpipe.actors.train;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.actors.runtime.Faults;
import dev.ttpipe.actors.runtime.JobPlan;
import dev.ttpipe.actors.runtime.PipelineFailure;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.data.TextDataset;
import dev.ttpipe.transport.TensorKind;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A frame corrupted on its way (a bit flipped after the sender's checksum, as a faulty link would)
 * through the real Aeron transport: the receiver's CRC32C check drops it and the step fails within
 * seconds naming the channel, the tensor and the problem, instead of waiting for the tensor until a
 * timeout; with recovery on, the job rolls back to its checkpoint and ends with the same weights as
 * a run that saw no fault.
 */
class FaultRecoveryTest {
    static final String TEXT = "all the world's a stage, and all the men and women merely players. ".repeat(30);

    static TrainingJob job(int steps) {
        TextDataset data = TextDataset.of(TEXT, 0.1);
        ModelSpec model = new ModelSpec(ModelSpec.ModelType.GPT2, data.tokenizer().vocabSize(), 32, 4, 4, 4, 64, 16,
                0.1f, false, 10000f, false);
        JobPlan plan = JobPlan.builder(model).ranks(2).schedule("1f1b").microbatches(4).microbatchSize(2).seqLen(16)
                .blocksPerRank(2, 2).backend(Backend.CPU).transport(SocketType.AERON).rankMesh(new MeshShape(1, 1), false, false)
                .optimizer(OptimizerSpec.adamw(3e-3, 0.1)).seed(11).build();
        TrainingJob job = TrainingJob.of(plan, data, steps);
        job.config().training.modelSaveInterval = 2;
        return job;
    }

    /**
     * The step that carries the corrupt frame is the one that fails, by the receiver's checksum (not a
     * timeout). How long that takes is a figure of {@code ttpipe bench faults}; the cap here only stops a hang.
     */
    @Test
    void aCorruptFrameFailsItsOwnStepNamingChannelTensorAndProblem() throws Exception {
        TrainingJob job = job(4);
        Faults corrupt = Faults.corruptOneFrame(h -> h.pass() == 2 && h.microbatch() == 1 && h.kind() == TensorKind.ACTIVATION);
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan(), corrupt)) {
            PipelineFailure e = assertTimeoutPreemptively(Duration.ofMinutes(2),
                    () -> assertThrows(PipelineFailure.class, () -> job.run(runtime, null, null)), "the corrupt frame hung the job");
            String m = e.getMessage();
            assertTrue(m.startsWith("step 3 failed: rank 1: on aeron:ipc 0->1, frame "), m);
            assertTrue(m.contains("1RECV_F1"), m);
            assertTrue(m.contains("checksum mismatch"), m);
        }
    }

    @Test
    void withRecoveryOnACorruptFrameRollsBackToTheCheckpointAndTheRunEndsBitIdentical(@TempDir Path dir) throws Exception {
        Map<String, float[]> whole;
        TrainingJob clean = job(6);
        try (PipelineRuntime runtime = PipelineRuntime.start(clean.plan())) {
            clean.run(runtime, Files.createDirectories(dir.resolve("whole")), null);
            whole = runtime.weights();
        }
        TrainingJob faulty = job(6);
        faulty.recoverInPlace(1);
        Faults corrupt = Faults.corruptOneFrame(h -> h.pass() == 4 && h.microbatch() == 2 && h.kind() == TensorKind.GRADIENT);
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        Map<String, float[]> recovered;
        try (PipelineRuntime runtime = PipelineRuntime.start(faulty.plan(), corrupt)) {
            faulty.run(runtime, Files.createDirectories(dir.resolve("faulty")), new PrintStream(out, true, StandardCharsets.UTF_8));
            recovered = runtime.weights();
        }
        String text = out.toString(StandardCharsets.UTF_8).replace("\n  ", " ");      // the lines wrapped at 80 columns, joined
        assertTrue(text.contains("step 5 failed: rank 0: on aeron:ipc 1->0, frame "), text);
        assertTrue(text.contains("2 of 2 ranks restored from their copy in memory"), text);
        assertTrue(text.contains("back at the checkpoint of step 4"), text);
        assertTrue(text.contains("steps 5..5 are redone"), text);
        assertEquals(whole.keySet(), recovered.keySet());
        for (String name : whole.keySet()) assertArrayEquals(whole.get(name), recovered.get(name), name);
    }
}

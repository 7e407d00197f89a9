package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.train.Checkpoints;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.stages.checkpoint.SafeTensors;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Checkpoints through the real actors: a resumed run ends with the same weights, bit for bit, as an
 * uninterrupted one; a checkpoint loads into another split, rank count or TP layout with the same
 * loss; damaged or foreign checkpoints are refused in one line with exit code 2, nothing overwritten.
 */
class CheckpointTest {
    static String config(int steps, String schedule, String split, String mesh, boolean ddp, boolean tp) {
        return String.join("\n",
                "training_config: {batch_size: 8, max_steps: " + steps + ", learning_rate: 0.003, runs_dir: RUNS,"
                        + " model_save_interval: 3, use_clip_grad_norm: true, scheduler_type: cosine, warmup_steps: 2}",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 4, max_sequence_length: 16, dropout_prob: 0.1}",
                "device_config: {mesh_shape: " + mesh + ", enable_ddp: " + ddp + ", enable_tp: " + tp + "}",
                "multihost_config:",
                "  pipeline_parallel_config: {num_blocks: 4, blocks_per_rank: " + split + ", num_microbatches: 4, schedule: " + schedule + "}",
                "");
    }

    static Path write(Path dir, String name, String text) throws Exception {
        Path p = dir.resolve(name);
        Files.writeString(p, text.replace("RUNS", dir.resolve("runs").toString()));
        return p;
    }

    /**
     * TTML's save_and_exit: the job writes the weights it starts from as a checkpoint and stops; a run
     * initialised from that checkpoint ends with the same weights, bit for bit, as a run that initialised
     * itself.
     */
    @Test
    void saveAndExitWritesTheStartingWeightsAndTrainsNothing(@TempDir Path dir) throws Exception {
        Path saved = dir.resolve("saved");
        String base = config(4, "1f1b", "{0: 1, 1: 3}", "[1, 1]", false, false);
        Path save = write(dir, "save.yaml", base.replace("model_save_interval: 3", "save_and_exit: " + saved));
        CliTest.Result s = CliTest.run("train", save.toString(), "--run-dir", dir.resolve("save-run").toString());
        assertEquals(0, s.code(), s.out() + s.err());
        assertTrue(s.joined().contains("save_and_exit: wrote the weights at step 0 to " + saved.resolve("step-000000")), s.out());
        assertFalse(s.out().contains("tokens/s"), "no training: " + s.out());
        assertEquals("step-000000", Files.readString(saved.resolve(Checkpoints.LATEST)).strip());
        assertFalse(Files.exists(dir.resolve("save-run/metrics.jsonl")), "no step was run");
        assertTrue(Files.readString(dir.resolve("save-run/run.json")).contains("saved and exited"));

        CliTest.Result own = CliTest.run("train", write(dir, "own.yaml", base).toString(), "--run-dir", dir.resolve("own").toString());
        assertEquals(0, own.code(), own.out() + own.err());
        CliTest.Result loaded = CliTest.run("train", write(dir, "loaded.yaml", base.replace("model_save_interval: 3",
                "model_save_interval: 3, init_from: " + saved)).toString(), "--run-dir", dir.resolve("loaded").toString());
        assertEquals(0, loaded.code(), loaded.out() + loaded.err());
        assertTrue(loaded.joined().contains("initialised from " + saved.resolve("step-000000")), loaded.out());
        assertSameTensors(dir.resolve("own/checkpoints/step-000004"), dir.resolve("loaded/checkpoints/step-000004"));
    }

    @ParameterizedTest(name = "{0}, mesh {2}")
    @CsvSource(delimiter = ';', value = {
            "1f1b; {0: 1, 1: 3}; [1, 1]; false; false",
            "zb-h1; {0: 2, 1: 2}; [2, 2]; true; true"})
    void aResumedRunEndsWithTheSameWeightsBitForBit(String schedule, String split, String mesh, boolean ddp, boolean tp,
                                                    @TempDir Path dir) throws Exception {
        Path cfg = write(dir, "job.yaml", config(6, schedule, split, mesh, ddp, tp));
        Path whole = dir.resolve("whole"), resumed = dir.resolve("resumed");
        CliTest.Result a = CliTest.run("train", cfg.toString(), "--run-dir", whole.toString());
        assertEquals(0, a.code(), a.out() + a.err());
        assertTrue(a.joined().contains("checkpoints: 2 saved"), a.out());
        Path half = whole.resolve("checkpoints").resolve("step-000003");
        // another config (here max_steps) is refused without the flag, in one line naming the key
        CliTest.Result refused = CliTest.run("train", cfg.toString(), "--run-dir", resumed.toString(), "--resume", half.toString(),
                "--max-steps", "7");
        CliTest.assertOneLineBadInput(refused, "training_config.max_steps: 6 -> 7", "--allow-config-change");
        CliTest.Result c = CliTest.run("train", cfg.toString(), "--run-dir", resumed.toString(), "--resume", half.toString());
        assertEquals(0, c.code(), c.out() + c.err());
        assertTrue(c.joined().contains("resumed from " + half + " at step 3"), c.out());
        assertSameTensors(whole.resolve("checkpoints/step-000006"), resumed.resolve("checkpoints/step-000006"));
    }

    static void assertSameTensors(Path x, Path y) {
        List<Path> files = stageFiles(x);
        assertEquals(files.size(), stageFiles(y).size());
        for (Path f : files) {
            try (SafeTensors.Reader a = new SafeTensors.Reader(f); SafeTensors.Reader b = new SafeTensors.Reader(y.resolve(f.getFileName()))) {
                assertEquals(a.tensors().keySet(), b.tensors().keySet());
                for (String n : a.tensors().keySet()) assertArrayEquals(a.read(n), b.read(n), f.getFileName() + " " + n);
            }
        }
    }

    static List<Path> stageFiles(Path dir) {
        try (Stream<Path> s = Files.list(dir)) {
            return s.filter(p -> p.getFileName().toString().endsWith(".safetensors")).sorted().toList();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Test
    void aCheckpointLoadsIntoOtherSplitsRanksAndMeshesWithTheSameLoss(@TempDir Path dir) throws Exception {
        Path four = write(dir, "pp4.yaml", config(3, "1f1b", "{0: 1, 1: 1, 2: 1, 3: 1}", "[1, 2]", false, true));
        TrainingJob job = TrainingJob.fromConfig(ConfigLoader.load(four));
        double before;
        try (PipelineRuntime runtime = PipelineRuntime.start(job.plan())) {
            before = job.run(runtime, Files.createDirectories(dir.resolve("run")), null).validationLoss();
        }
        Checkpoints.Found ck = Checkpoints.find(dir.resolve("run").toString(), dir.resolve("runs"));
        assertEquals(3, ck.step());
        for (String[] layout : new String[][]{{"{0: 3, 1: 1}", "[1, 2]", "true"}, {"{0: 4}", "[1, 1]", "false"},
                {"{0: 2, 1: 2}", "[1, 1]", "false"}}) {
            Path other = write(dir, "other.yaml", config(3, "1f1b", layout[0], layout[1], false, Boolean.parseBoolean(layout[2])));
            TtpipeConfig cfg = ConfigLoader.load(other);
            TrainingJob j = TrainingJob.fromConfig(cfg);
            try (PipelineRuntime runtime = PipelineRuntime.start(j.plan())) {
                runtime.loadState(ck.dir(), ck.optimizerSteps());
                double after = j.validationLoss(runtime);
                assertEquals(before, after, 1e-6 * Math.abs(before), "split " + layout[0] + " mesh " + layout[1]);
            }
        }
    }

    @Test
    void damagedOrForeignCheckpointsAreOneLineWithExitCodeTwo(@TempDir Path dir) throws Exception {
        Path cfg = write(dir, "job.yaml", config(3, "1f1b", "{0: 1, 1: 3}", "[1, 1]", false, false));
        Path run = dir.resolve("run");
        assertEquals(0, CliTest.run("train", cfg.toString(), "--run-dir", run.toString()).code());
        Path ck = run.resolve("checkpoints/step-000003");
        Path out = dir.resolve("out");

        CliTest.assertOneLineBadInput(CliTest.run("train", cfg.toString(), "--run-dir", out.toString(), "--resume",
                dir.toString()), "no trainer_state.json");
        CliTest.assertOneLineBadInput(CliTest.run("train", cfg.toString(), "--resume", dir.resolve("nope").toString()),
                "not a directory");

        byte[] bytes = Files.readAllBytes(ck.resolve("stage-01.safetensors"));
        bytes[bytes.length - 3] ^= 1;                                             // one flipped bit in the data
        Files.write(ck.resolve("stage-01.safetensors"), bytes);
        CliTest.assertOneLineBadInput(CliTest.run("train", cfg.toString(), "--run-dir", out.toString(), "--resume",
                ck.toString(), "--max-steps", "4", "--allow-config-change"), "stage-01.safetensors: checksum", "damaged");
        Files.write(ck.resolve("stage-01.safetensors"), Arrays.copyOf(bytes, 100));   // truncated
        CliTest.assertOneLineBadInput(CliTest.run("train", cfg.toString(), "--run-dir", out.toString(), "--resume",
                ck.toString(), "--max-steps", "4", "--allow-config-change"), "stage-01.safetensors: checksum");

        Files.delete(ck.resolve("trainer_state.json"));
        CliTest.assertOneLineBadInput(CliTest.run("train", cfg.toString(), "--run-dir", out.toString(), "--resume",
                ck.toString()), "no trainer_state.json");
        assertFalse(Files.exists(out.resolve("metrics.jsonl")), "a refused resume writes nothing");
    }

    @Test
    void aCheckpointOfAnotherModelShapeIsRefusedNamingTheTensor(@TempDir Path dir) throws Exception {
        Path cfg = write(dir, "job.yaml", config(3, "1f1b", "{0: 1, 1: 3}", "[1, 1]", false, false));
        Path run = dir.resolve("run");
        assertEquals(0, CliTest.run("train", cfg.toString(), "--run-dir", run.toString()).code());
        Path wider = write(dir, "wide.yaml", config(3, "1f1b", "{0: 1, 1: 3}", "[1, 1]", false, false)
                .replace("embedding_dim: 16", "embedding_dim: 32"));
        CliTest.Result r = CliTest.run("train", wider.toString(), "--run-dir", dir.resolve("w").toString(), "--resume",
                run.toString(), "--max-steps", "5", "--allow-config-change");
        CliTest.assertOneLineBadInput(r, "tensor", "has shape", "another model shape");
    }
}

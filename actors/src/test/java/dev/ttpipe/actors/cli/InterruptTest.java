package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.ExitCodes;
import dev.ttpipe.actors.runtime.Faults;
import dev.ttpipe.device.ttnn.BridgeLibrary;
import dev.ttpipe.schedules.Action;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Ctrl-C (a real SIGINT to a real `ttpipe train` process) stops at a step boundary with a checkpoint, leaves
 * a loadable trace.json with the steps so far, prints "preempted (SIGINT) at step N" and the summary, run.json
 * records it and the exit code is 130 (SIGTERM and --resume auto: {@link PreemptionTest}); a finished
 * run's directory records the command line, the flags, the host and the final validation loss; a ttnn
 * run's header and run.json name the bridge library that ran.
 */
class InterruptTest {
    static final String CONFIG = String.join("\n",
            "training_config: {batch_size: 8, max_steps: 5000, learning_rate: 0.003}",
            "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 3, max_sequence_length: 16}",
            "multihost_config:",
            "  pipeline_parallel_config: {num_blocks: 3, blocks_per_rank: {0: 1, 1: 2}, num_microbatches: 4, schedule: 1f1b}",
            "");

    @Test
    void sigintStopsAtAStepWithACheckpointAndKeepsTheTimelineAndTheSummary(@TempDir Path dir) throws Exception {
        Path cfg = Files.writeString(dir.resolve("job.yaml"), CONFIG);
        Path run = dir.resolve("run");
        Process p = TtpipeProcesses.signalledAfter(dir, "out", List.of("train", cfg.toString(), "--run-dir", run.toString(),
                "--log-every", "50"), run.resolve("metrics.jsonl"), 5, "INT");
        String out = Files.readString(dir.resolve("out.log"), StandardCharsets.UTF_8);
        assertEquals(ExitCodes.SIGINT, p.exitValue(), out);
        assertTrue(CliTest.joined(out).matches("(?s).*preempted \\(SIGINT\\) at step \\d+ of 5000: the checkpoint of step \\d+ is saved.*"), out);
        assertTrue(out.contains("sim bubble"), "the per-rank table of the steps so far:\n" + out);
        Object trace = MiniJson.parse(Files.readString(run.resolve("trace.json")));
        assertTrue(((List<?>) ((Map<?, ?>) trace).get("traceEvents")).size() > 100, "the trace holds the steps so far");
        Map<?, ?> record = (Map<?, ?>) MiniJson.parse(Files.readString(run.resolve("run.json")));
        assertEquals("preempted", record.get("status"), record.toString());
        assertEquals("SIGINT", record.get("preempted_by"), record.toString());
        assertTrue(Files.readString(run.resolve("stdout.log")).contains("preempted (SIGINT) at step"), "stdout.log has it too");
    }

    /**
     * Ctrl-C on {@code ttpipe launch}: the launcher passes the signal on, rank 0 stops at a step boundary with a
     * checkpoint, the summary, trace.json and run.json ("preempted"), rank 1 says why it stopped, every line fits 80
     * columns with its {@code [rank N] }, and the printed command resumes to the weights of a run never stopped, bit for bit.
     */
    @Test
    void sigintToLaunchStopsEveryRankWithItsRecordsAndThePrintedResumeEndsBitIdentical(@TempDir Path dir) throws Exception {
        Path cfg = MultiProcessTest.write(dir, "pp2.yaml", MultiProcessTest.config(2, 29300, "{0: 2, 1: 2}")
                .replace("max_steps: 400", "max_steps: 200") + "telemetry: {port: 0}\n");
        Path run = dir.resolve("run");
        Process p = TtpipeProcesses.signalledAfter(dir, "launch", List.of("launch", cfg.toString(), "--run-dir", run.toString()),
                run.resolve("metrics.jsonl"), 5, "INT");
        String out = TtpipeProcesses.log(dir, "launch"), joined = CliTest.joined(out);
        assertEquals(ExitCodes.SIGINT, p.exitValue(), out);
        List<String> wide = EightyColumnsTest.wider(out);
        assertTrue(wide.isEmpty(), wide.size() + " lines wider than 80 columns:\n" + String.join("\n", wide));
        Map<?, ?> record = (Map<?, ?>) MiniJson.parse(Files.readString(run.resolve("run.json")));
        assertEquals("preempted", record.get("status"), record.toString());
        int step = ((Number) record.get("steps_done")).intValue();
        assertTrue(step >= 5 && step < 200, record.toString());
        // the launcher passes the signal on to every rank (SIGTERM): whichever rank reaches the coordinator first is named
        assertTrue(joined.matches("(?s).*preempted \\(SIG[A-Z]+( on rank \\d+)?\\) at step " + step + " of 200: the checkpoint"
                + " of step " + step + " is saved.*"), out);
        assertTrue(out.contains("sim bubble") && joined.contains("rank 1: the job stopped for SIG"), "both ranks' summaries:\n" + out);
        assertTrue(((List<?>) ((Map<?, ?>) MiniJson.parse(Files.readString(run.resolve("trace.json")))).get("traceEvents")).size() > 100,
                "the trace holds the steps so far");
        String resume = "ttpipe launch " + cfg + " --run-dir " + run + " --resume auto";
        assertTrue(joined.contains("resume with: " + resume), out);
        MultiProcessTest.assertNoLeftovers();

        CliTest.Result again = CliTest.run(resume.substring("ttpipe ".length()).split(" "));
        assertEquals(0, again.code(), again.out() + again.err());
        assertTrue(again.joined().contains("resumed from " + run.resolve(String.format("checkpoints/step-%06d", step)) + " at step "
                + step), again.out());
        CliTest.Result whole = CliTest.run("train", cfg.toString(), "--run-dir", dir.resolve("whole").toString());
        assertEquals(0, whole.code(), whole.out() + whole.err());
        CheckpointTest.assertSameTensors(dir.resolve("whole/checkpoints/step-000200"), run.resolve("checkpoints/step-000200"));
        MultiProcessTest.assertNoLeftovers();
    }

    @Test
    void aFinishedRunRecordsWhatRanAndItsValidationLoss(@TempDir Path dir) throws Exception {
        Path cfg = Files.writeString(dir.resolve("job.yaml"), CONFIG);
        Path run = dir.resolve("run");
        CliTest.Result r = CliTest.run("train", cfg.toString(), "--run-dir", run.toString(), "--max-steps", "3", "--seed", "7");
        assertEquals(0, r.code(), r.out() + r.err());
        Map<?, ?> record = (Map<?, ?>) MiniJson.parse(Files.readString(run.resolve("run.json")));
        assertEquals("finished", record.get("status"));
        assertEquals(3L, record.get("steps_done"));
        assertTrue(((Number) record.get("validation_loss")).doubleValue() > 0, record.toString());
        assertEquals("ttpipe train " + cfg + " --run-dir " + run + " --max-steps 3 --seed 7", record.get("command_line"));
        assertEquals("--seed", ((Map<?, ?>) record.get("flags")).get("training_config.seed"), record.toString());
        for (String key : List.of("git_commit", "jvm", "host", "cpu", "matmul_kernel", "ttpipe_version")) {
            assertTrue(record.get(key) != null, key + " missing from " + record);
        }
        List<String> lines = Files.readAllLines(run.resolve("metrics.jsonl"));
        assertTrue(lines.get(0).startsWith("{\"step\":1,\"time\":\"20"), lines.get(0));
        assertEquals(record.get("validation_loss"), ((Map<?, ?>) MiniJson.parse(lines.get(2))).get("val_loss"),
                "the last step's metrics line has the final validation loss, for the report's loss chart");
        assertTrue(Files.readString(run.resolve("stdout.log")).contains("validation loss"));
    }

    @Test
    void aTtnnRunNamesTheBridgeLibraryThatRanInItsHeaderAndInRunJson(@TempDir Path dir) throws Exception {
        assumeTrue(BridgeLibrary.locate().isPresent(), "the reference bridge library was not built (no C compiler?)");
        Path cfg = Files.writeString(dir.resolve("job.yaml"), CONFIG);
        Path run = dir.resolve("run");
        CliTest.Result r = CliTest.run("train", cfg.toString(), "--run-dir", run.toString(), "--max-steps", "2",
                "--backend", "ttnn");
        assertEquals(0, r.code(), r.out() + r.err());
        BridgeLibrary.Loaded lib = BridgeLibrary.loaded().orElseThrow();
        Map<?, ?> bridge = (Map<?, ?>) ((Map<?, ?>) MiniJson.parse(Files.readString(run.resolve("run.json"))))
                .get("bridge_library");
        assertEquals(lib.kind(), bridge.get("kind"), bridge.toString());
        assertEquals(lib.implementation(), bridge.get("implementation"));
        assertEquals(lib.path().toString(), bridge.get("path"));
        List<String> header = r.joined().lines().filter(l -> l.startsWith("bridge library: ")).toList();
        assertEquals(1, header.size(), r.out());
        assertTrue(header.get(0).contains(lib.path().toString()), header.get(0));
        if (lib.reference()) {
            assertEquals("reference C emulation", bridge.get("kind"));
            assertTrue(header.get(0).startsWith("bridge library: no TTNN library: backend ttnn runs the reference C "
                    + "emulation, reference ("), header.get(0));
        }
    }

    @Test
    void aFailedRunKeepsItsTimelineAndSaysWhy(@TempDir Path dir) throws Exception {
        Path cfg = Files.writeString(dir.resolve("job.yaml"), CONFIG.replace("max_steps: 5000,", "max_steps: 50, step_timeout_s: 2,"));
        Path run = dir.resolve("run");
        Faults stall = Faults.stall(new Action(1, ActionKind.F, 1), 4000);     // every 1F1 stalls
        CliTest.Result r = CliTest.run(stall, "train", cfg.toString(), "--run-dir", run.toString());
        assertEquals(Main.EXIT_FAILURE, r.code(), r.out() + r.err());
        assertTrue(r.err().contains("took longer than training_config.step_timeout_s = 2") && r.err().contains("running 1F1"), r.err());
        Map<?, ?> record = (Map<?, ?>) MiniJson.parse(Files.readString(run.resolve("run.json")));
        assertTrue(String.valueOf(record.get("status")).startsWith("failed: step 1 failed: step 1 took longer"), record.toString());
        MiniJson.parse(Files.readString(run.resolve("trace.json")));                 // loadable, even with no step done
    }
}

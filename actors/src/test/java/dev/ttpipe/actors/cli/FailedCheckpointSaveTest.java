package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.train.Checkpoints;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import static dev.ttpipe.actors.cli.CliTest.config;
import static dev.ttpipe.actors.cli.CliTest.run;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A checkpoint_dir on a small tmpfs (so these tests need root and {@code mount}; they are skipped, saying so,
 * elsewhere): a disk that fills during a save stops the job at the next step boundary, and a checkpoint larger than
 * the free space is refused before anything is written. Either way: one line naming the step, the path and the cause,
 * exit 1, no {@code .tmp} left, {@code latest} on the last complete checkpoint, run.json failed, the trace and the
 * summary of the steps so far written.
 */
class FailedCheckpointSaveTest {
    static final int STEPS = 40;

    @TempDir
    Path dir;

    /** A tmpfs at {@code dir/ckpt} with {@code options}, or the test is skipped. */
    private Path tmpfs(String options) throws Exception {
        Path mount = Files.createDirectories(dir.resolve("ckpt"));
        Process p = new ProcessBuilder("mount", "-t", "tmpfs", "-o", options, "tmpfs", mount.toString()).redirectErrorStream(true).start();
        boolean ok = p.waitFor(30, TimeUnit.SECONDS) && p.exitValue() == 0;
        assumeTrue(ok, "skipped: mounting a tmpfs needs root and mount (" + new String(p.getInputStream().readAllBytes()).strip() + ")");
        return mount;
    }

    /** What a test checks of a run whose checkpoint_dir was {@code mount}. */
    private interface Check {
        void check(Path mount, CliTest.Result r) throws Exception;
    }

    /** Trains with checkpoint_dir on a tmpfs mounted with {@code options}, checks, unmounts. */
    private void trainOnTmpfs(String options, Check check) throws Exception {
        Path mount = tmpfs(options);
        try {
            check.check(mount, train(mount));
        } finally {
            new ProcessBuilder("umount", mount.toString()).inheritIO().start().waitFor(30, TimeUnit.SECONDS);
        }
    }

    private CliTest.Result train(Path checkpoints) throws Exception {
        String job = CliTest.SMALL.replace("RUNS", dir.resolve("runs").toString()).replace("max_steps: 2", "max_steps: " + STEPS)
                .replace("runs_dir:", "model_save_interval: 2, checkpoint_keep: 1, checkpoint_dir: " + checkpoints + ", runs_dir:");
        return run("train", config(dir, job).toString());
    }

    private static List<String> names(Path folder) throws Exception {
        try (Stream<Path> s = Files.list(folder)) {
            return s.map(p -> p.getFileName().toString()).sorted().toList();
        }
    }

    /** The run directory after a failed save: {@code steps} steps recorded, run.json {@code status}, the trace, the summary. */
    private void assertRunFailed(CliTest.Result r, int steps, String status) throws Exception {
        Path run;
        try (Stream<Path> s = Files.list(dir.resolve("runs"))) {
            run = s.findFirst().orElseThrow();
        }
        assertEquals(steps, Files.readAllLines(run.resolve("metrics.jsonl")).size());
        String record = Files.readString(run.resolve("run.json"));
        assertTrue(record.contains("\"status\": \"" + status), record);
        assertTrue(Files.size(run.resolve("trace.json")) > 0);
        assertTrue(r.joined().contains("over steps 1.." + steps) && r.joined().contains("wrote " + run.resolve("trace.json")), r.out());
    }

    private static void assertStoppedInOneLine(CliTest.Result r, String... fragments) {
        assertEquals(Main.EXIT_FAILURE, r.code(), r.err());
        assertEquals(1, r.err().strip().split("\n").length, r.err());
        assertFalse(r.err().contains("\tat "), r.err());
        for (String f : fragments) assertTrue(r.err().contains(f), "'" + f + "' not in: " + r.err());
    }

    @Test
    void aDiskThatFillsDuringASaveStopsTheJobAtTheNextStepBoundary() throws Exception {
        // 8 inodes: the mount's root, one complete checkpoint (its directory, two stage files, trainer_state.json) and
        // latest; the next save's directory and its first stage file; its second stage file finds the disk full
        trainOnTmpfs("size=4m,nr_inodes=8", (mount, r) -> {
            // Step 4's save fails in the background; the job stops at the first step boundary that knows it, or at a
            // later save that finds the disk full first: either way one line naming the step, the path and the cause.
            assertStoppedInOneLine(r, "ttpipe: step ", "disk full (No space left on device)",
                    mount.resolve("latest") + " is still step-000002; the job stopped after step ");
            assertTrue(r.err().contains("saving the checkpoint to " + mount.resolve("step-000004") + " failed: rank ")
                    || r.err().contains("not saving the checkpoint to " + mount.resolve("step-0000")), r.err());
            int stoppedAfter = Integer.parseInt(r.err().replaceAll("(?s).*the job stopped after step (\\d+) of " + STEPS + ".*", "$1"));
            assertTrue(stoppedAfter >= 4 && stoppedAfter < STEPS, r.err());
            assertEquals(List.of("latest", "step-000002"), names(mount));          // no .tmp left behind
            assertEquals(2, Checkpoints.find(mount.toString(), dir).step());     // complete, checksums and all
            assertRunFailed(r, stoppedAfter, "failed: step ");
        });
    }

    @Test
    void aCheckpointLargerThanTheFreeSpaceIsRefusedBeforeAnythingIsWritten() throws Exception {
        trainOnTmpfs("size=64k", (mount, r) -> {
            assertStoppedInOneLine(r, "ttpipe: step 2: not saving the checkpoint to " + mount.resolve("step-000002") + ": it needs about ",
                    " and the disk has 64.0 KiB free (training_config.checkpoint_dir;",
                    mount + " has no complete checkpoint; the job stopped after step 2 of " + STEPS);
            assertEquals(List.of(), names(mount));
            assertRunFailed(r, 2, "failed: step 2: not saving the checkpoint to ");
        });
    }
}

package dev.ttpipe.actors.cli;

import com.sun.jna.Platform;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A large sim run started as a process restarts that process under ZGC in place (the same process id, so a
 * scheduler's signals reach the run), and its run.json names ZGC; a collector named on the command line is kept, and
 * the run is told what G1's pauses cost. The threshold is lowered with {@code -Dttpipe.sim.zgc-above} so that
 * sim-pp4's 4 x 16 counts as large.
 */
class SimCollectorRestartTest {
    private static final String RESTART = "microbatches of the sim backend: restarting this JVM under ZGC";

    private static String train(Path dir, String name, String... jvmFlags) throws Exception {
        List<String> cmd = new ArrayList<>(TtpipeProcesses.command(List.of("train", "configs/sim-pp4.yaml", "--set", "training_config.max_steps=1",
                "--run-dir", dir.resolve(name).toString())));
        cmd.addAll(1, List.of(jvmFlags));
        cmd.removeIf(a -> a.startsWith("-XX:+Use") && a.endsWith("GC") && !List.of(jvmFlags).contains(a));
        Process p = new ProcessBuilder(cmd).directory(repoRoot().toFile()).redirectErrorStream(true)
                .redirectOutput(dir.resolve(name + ".log").toFile()).start();
        assertTrue(p.waitFor(120, TimeUnit.SECONDS), "no end within 120 s");
        String log = Files.readString(dir.resolve(name + ".log"));
        assertEquals(0, p.exitValue(), log);
        String runJson = Files.readString(dir.resolve(name).resolve("run.json"));
        return log + "\nrun.json: " + runJson;
    }

    private static Path repoRoot() {
        Path here = Path.of("").toAbsolutePath();
        return Files.isDirectory(here.resolve("configs")) ? here : here.getParent();
    }

    @Test
    void aLargeSimRunRestartsUnderZgcAndAChosenCollectorIsKept(@TempDir Path dir) throws Exception {
        assumeTrue(Platform.isLinux() && Platform.is64Bit() && (Platform.isIntel() || Platform.isARM()),
                "skipped: the restart under ZGC runs on Linux x86-64 and aarch64 only, not " + System.getProperty("os.name")
                        + " " + System.getProperty("os.arch"));
        String restarted = train(dir, "default", "-Dttpipe.sim.zgc-above=64");
        assertEquals(1, restarted.split(RESTART, -1).length - 1, restarted);
        assertTrue(restarted.contains("ttpipe: 4 ranks x 16 " + RESTART + ", since G1's pauses")
                || restarted.contains("ttpipe: 4 ranks x 16 " + RESTART + ", since Serial's pauses"), restarted);
        assertTrue(restarted.contains("\"collector\": \"ZGC"), restarted);
        assertFalse(restarted.contains("note: 4 ranks x 16"), restarted);

        String kept = train(dir, "g1", "-Dttpipe.sim.zgc-above=64", "-XX:+UseG1GC");
        assertFalse(kept.contains(RESTART), kept);
        assertTrue(kept.contains("\"collector\": \"G1"), kept);

        String small = train(dir, "small", "-Dttpipe.sim.zgc-above=65");
        assertFalse(small.contains(RESTART), small);
    }
}

package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.train.Preemption;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A launched worker whose launcher dies stops as SIGTERM would: a real process stands for the launcher and is killed. */
class LauncherWatchTest {

    @Test
    void aKilledLauncherRequestsTheStopThatSigtermWould() throws Exception {
        Process launcher = new ProcessBuilder("sleep", "600").start();
        Preemption preemption = new Preemption();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        try {
            Thread watch = LauncherWatch.watch(launcher.toHandle(), preemption, 3, new PrintStream(err, true, StandardCharsets.UTF_8));
            watch.join(300);
            assertNull(preemption.requested(), "the launcher is alive: nothing is asked");
            launcher.destroyForcibly();                       // SIGKILL, as an out-of-memory kill would
            assertTrue(launcher.waitFor(10, TimeUnit.SECONDS));
            watch.join(10_000);
            Preemption.Request r = preemption.requested();
            assertEquals(143, r.exitCode());
            assertEquals("the launcher's exit on rank 3", r.describe());
            assertTrue(err.toString(StandardCharsets.UTF_8).contains("rank 3: its launcher (pid " + launcher.pid() + ") exited"),
                    err.toString(StandardCharsets.UTF_8));
        } finally {
            launcher.destroyForcibly();
        }
    }
}

package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.KeyStores;
import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.multihost.Launcher;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The control plane over TLS (Pekko Artery tls-tcp) between real worker processes, with stores made
 * here by the JDK's keytool: a 2-process verify matches the reference; a worker whose trust store
 * does not hold the seed's certificate cannot join, and says so in one line within its join timeout.
 * The key store's password comes from the environment ({@code TTPIPE_TEST_STORE_PASSWORD}, set for
 * the tests in the pom and passed on to the workers), the trust store's from the config. Ports
 * 27400-27499.
 */
class TlsTest {
    /** MultiProcessTest's 2-rank job with the control plane on TLS: control ports {@code port}, +1, data ports {@code port} + 50, +52. */
    static String config(int port, Path keys, Path trust, String extra) {
        return MultiProcessTest.config(2, port, "{0: 2, 1: 2}")
                .replace("data_port: " + (port + 100), "data_port: " + (port + 50))
                .replace("data_port: " + (port + 102), "data_port: " + (port + 52))
                .replace("  socket_type: aeron\n", String.join("\n",
                        "  socket_type: aeron",
                        "  tls:",
                        "    enabled: true",
                        "    key_store: \"" + keys + "\"",
                        "    key_store_password_env: " + KeyStores.PASSWORD_ENV,
                        "    trust_store: \"" + trust + "\"",
                        "    trust_store_password: " + KeyStores.TRUST_PASSWORD,
                        extra,
                        ""));
    }

    @Test
    void verifyAcrossTwoWorkerProcessesOverTlsMatchesTheReference(@TempDir Path dir) throws Exception {
        KeyStores s = KeyStores.make(dir, "job");
        Path cfg = MultiProcessTest.write(dir, "pp2-tls.yaml", config(27400, s.keys(), s.trust(), "    hostname_verification: true"));
        CliTest.Result r = CliTest.run("verify", cfg.toString(), "--steps", "2");
        assertEquals(0, r.code(), r.out() + r.err());
        assertTrue(r.out().contains("OK: the pipelined run matches"), r.out());
        assertTrue(r.joined().contains("rank 1 of 2: control 127.0.0.1:27401, data 127.0.0.1:27452, seed 127.0.0.1:27400;"
                + " control over TLS (TLSv1.3, mutual authentication, hostname verification, key store " + s.keys()), r.out());
        MultiProcessTest.assertNoLeftovers();
    }

    @Test
    void aWrongStorePasswordIsOneLineWithExitCodeTwoBeforeAnyProcessStarts(@TempDir Path dir) throws Exception {
        KeyStores s = KeyStores.make(dir, "job");
        Path cfg = MultiProcessTest.write(dir, "pp2-tls.yaml", config(27420, s.keys(), s.trust(), "")
                .replace("trust_store_password: " + KeyStores.TRUST_PASSWORD, "trust_store_password: wrong"));
        for (String command : List.of("verify", "launch")) {
            CliTest.assertOneLineBadInput(CliTest.run(command, cfg.toString()),
                    "pp2-tls.yaml:", ": multihost_config.tls.trust_store_password: does not open " + s.trust());
        }
        CliTest.assertOneLineBadInput(CliTest.run("worker", "--rank", "1", cfg.toString()),
                "multihost_config.tls.trust_store_password: does not open " + s.trust());
        MultiProcessTest.assertNoLeftovers();
    }

    @Test
    void aWorkerWhoseTrustStoreLacksTheSeedsCertificateCannotJoinAndSaysSoWithinItsJoinTimeout(@TempDir Path dir)
            throws Exception {
        KeyStores job = KeyStores.make(dir, "job");
        KeyStores stranger = KeyStores.make(dir, "stranger");
        Path good = MultiProcessTest.write(dir, "good.yaml", config(27410, job.keys(), job.trust(), ""));
        Path bad = MultiProcessTest.write(dir, "bad.yaml", config(27410, job.keys(), stranger.trust(), ""));
        ByteArrayOutputStream seedOut = new ByteArrayOutputStream();
        PrintStream seedLog = new PrintStream(seedOut, true, StandardCharsets.UTF_8);
        Launcher seed = new Launcher(good, List.of("--join-timeout", "60"), Deployment.of(ConfigLoader.load(good)),
                seedLog, seedLog);
        try {
            seed.start(0, 1);                                  // rank 0 with the job's trust store, in its own process
            // the cap only stops a hang; how long giving up takes is the join timeout plus a JVM's start
            CliTest.Result r = assertTimeoutPreemptively(Duration.ofMinutes(3),
                    () -> CliTest.run("worker", "--rank", "1", bad.toString(), "--join-timeout", "10"), "rank 1 never gave up");
            assertEquals(Main.EXIT_BAD_INPUT, r.code(), r.out() + r.err() + "\nrank 0:\n" + seedOut);
            String line = "ttpipe: rank_bindings: the seed, rank 0 at 127.0.0.1:27410, did not answer within 10 s: the TLS handshake"
                    + " with it fails: its certificate is not trusted by this rank's multihost_config.tls.trust_store " + stranger.trust();
            assertTrue(r.err().contains(line), r.err());
            List<String> ours = r.err().lines().filter(l -> l.startsWith("ttpipe:")).toList();
            assertEquals(1, ours.size(), r.err());
            // no retrying past its own 10 s: rank 1 gave up while the seed still waits out its 60 s join timeout
            assertTrue(ProcessHandle.current().descendants().anyMatch(p -> p.isAlive()
                    && MultiProcessTest.cmdline(p).contains(" worker --rank 0 ")), "the seed stopped waiting first:\n" + seedOut);
        } finally {
            seed.finish(0);
        }
        MultiProcessTest.assertNoLeftovers();
    }
}

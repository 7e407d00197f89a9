package dev.ttpipe.actors.config;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * multihost_config.tls is checked when the config loads: every problem one line naming the key, the
 * file and what was expected, a password never printed; the resolved config written with a run
 * names the password's variable, never a password.
 */
class TlsCheckTest {
    @TempDir
    static Path dir;
    static KeyStores stores;

    @BeforeAll
    static void makeStores() throws Exception {
        stores = KeyStores.make(dir, "job");
    }

    /** A 2-rank multi-process job with {@code tls} lines under multihost_config (each indented by 4). */
    static String config(String... tls) {
        return String.join("\n",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 2, max_sequence_length: 16}",
                "multihost_config:",
                "  enabled: true",
                "  socket_type: aeron",
                "  pipeline_parallel_config: {num_blocks: 2, blocks_per_rank: {0: 1, 1: 1}, num_microbatches: 2}",
                "  tls:",
                "    " + String.join("\n    ", tls),
                "");
    }

    static String[] good() {
        return new String[]{"enabled: true", "key_store: " + stores.keys(), "key_store_password_env: " + KeyStores.PASSWORD_ENV,
                "trust_store: " + stores.trust(), "trust_store_password: " + KeyStores.TRUST_PASSWORD};
    }

    static String with(String key, String line) {
        StringBuilder out = new StringBuilder();
        boolean replaced = false;
        for (String l : good()) {
            if (l.startsWith(key + ":")) {
                if (line != null) out.append(line).append('\n');
                replaced = true;
            } else {
                out.append(l).append('\n');
            }
        }
        if (!replaced) out.append(line).append('\n');
        return config(out.toString().strip().split("\n"));
    }

    static String problem(String yaml) {
        List<String> p = ConfigLoaderTest.problems(yaml);
        assertEquals(1, p.size(), p.toString());
        assertFalse(p.get(0).contains(KeyStores.TRUST_PASSWORD) || p.get(0).contains(System.getenv(KeyStores.PASSWORD_ENV)),
                "a password printed: " + p.get(0));
        return p.get(0);
    }

    @Test
    void aGoodConfigLoads() {
        TtpipeConfig cfg = ConfigLoaderTest.load(config(good()));
        assertTrue(cfg.multihost.tls.enabled);
        assertEquals(System.getenv(KeyStores.PASSWORD_ENV), cfg.multihost.tls.keyStorePassword());
        assertEquals(System.getenv(KeyStores.PASSWORD_ENV), cfg.multihost.tls.keyPassword(), "the key's password defaults to the store's");
        assertEquals("TLSv1.3", cfg.multihost.tls.protocol);
        assertEquals(List.of("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"), cfg.multihost.tls.algorithms());
        assertTrue(cfg.multihost.tls.requireMutualAuthentication);
        assertFalse(cfg.multihost.tls.hostnameVerification);
    }

    @Test
    void tlsWithoutSeparateProcessesIsRefusedNamingBothKeys() {
        String p = problem(config(good()).replace("  enabled: true\n  socket_type: aeron", "  enabled: false\n  socket_type: aeron"));
        assertTrue(p.matches("job\\.yaml:\\d+: multihost_config\\.tls\\.enabled: true given with job\\.yaml:3: multihost_config\\.enabled:"
                + " false .*, expected multihost_config\\.enabled: true, or tls\\.enabled: false"), p);
    }

    @Test
    void aMissingOrUnreadableStoreIsOneLineNamingTheKeyAndFile() throws Exception {
        assertTrue(problem(with("key_store", "key_store: /nonexistent/keys.p12")).matches(
                "job\\.yaml:\\d+: multihost_config\\.tls\\.key_store: '/nonexistent/keys\\.p12' given: no such file, expected a PKCS12"
                        + " or JKS file holding this rank's private key and certificate"), "");
        Path text = Files.writeString(dir.resolve("not-a-store.txt"), "hello");
        String p = problem(with("trust_store", "trust_store: " + text));
        assertTrue(p.contains("multihost_config.tls.trust_store: '" + text + "' given: cannot be read as a key store ("), p);
        p = problem(with("key_store", "key_store: " + stores.trust()).replace("key_store_password_env: " + KeyStores.PASSWORD_ENV,
                "key_store_password: " + KeyStores.TRUST_PASSWORD));
        assertTrue(p.contains("multihost_config.tls.key_store: '" + stores.trust() + "' holds no private key (1 certificates),"
                + " expected this rank's private key"), p);
    }

    @Test
    void aWrongPasswordIsOneLineNamingTheKeyAndFileButNotThePassword() {
        String p = problem(with("trust_store_password", "trust_store_password: not-it"));
        assertTrue(p.matches("job\\.yaml:\\d+: multihost_config\\.tls\\.trust_store_password: does not open " + stores.trust()
                + " \\(.*\\), expected the password of trust_store " + stores.trust()), p);
        assertFalse(p.contains("not-it"), p);
        p = problem(with("key_password", "key_password: not-it"));
        assertTrue(p.contains("multihost_config.tls.key_password: the private key 'job' in " + stores.keys()
                + " does not open with the key password"), p);
    }

    @Test
    void eachPasswordIsGivenOnceInTheFileOrAsASetVariable() {
        String p = problem(with("key_store_password_env", "key_store_password_env: TTPIPE_TEST_NO_SUCH_VARIABLE"));
        assertTrue(p.contains("multihost_config.tls.key_store_password_env: 'TTPIPE_TEST_NO_SUCH_VARIABLE' given, but no such"
                + " environment variable is set in this process"), p);
        p = problem(with("trust_store_password", "trust_store_password_env: " + KeyStores.PASSWORD_ENV).replace(
                "trust_store_password_env", "trust_store_password: x\n    trust_store_password_env"));
        assertTrue(p.contains("multihost_config.tls.trust_store_password: given together with trust_store_password_env,"
                + " expected one of them"), p);
        p = problem(with("key_store_password_env", null));
        assertTrue(p.matches("job\\.yaml:\\d+: multihost_config\\.tls: no key_store_password or key_store_password_env given,"
                + " expected one of them .*"), p);
    }

    @Test
    void protocolAlgorithmsAndUnknownKeysAreChecked() {
        String p = problem(with("protocol", "protocol: TLSv1.1"));
        assertTrue(p.matches("job\\.yaml:\\d+: multihost_config\\.tls\\.protocol: 'TLSv1\\.1' given, expected TLSv1\\.3 or TLSv1\\.2"), p);
        p = problem(with("protocol", "protocol: TLSv1.2\nenabled_algorithms: [TLS_AES_128_GCM_SHA256]"));
        assertTrue(p.contains("multihost_config.tls.enabled_algorithms: 'TLS_AES_128_GCM_SHA256' given, expected cipher suites"
                + " this JVM supports for TLSv1.2, such as TLS_ECDHE_"), p);
        TtpipeConfig tls12 = ConfigLoaderTest.load(with("protocol", "protocol: tlsv1.2"));
        assertEquals("TLSv1.2", tls12.multihost.tls.protocol);
        assertTrue(tls12.multihost.tls.algorithms().stream().allMatch(a -> a.startsWith("TLS_ECDHE_")), tls12.multihost.tls.algorithms()::toString);
        p = problem(with("key_store_pasword", "key_store_pasword: x"));
        assertTrue(p.contains("multihost_config.tls.key_store_pasword: unknown key (did you mean 'key_store_password'?)"), p);
    }

    @Test
    void theConfigWrittenWithARunNamesThePasswordsVariableNeverAPassword() {
        String yaml = ConfigWriter.toYaml(ConfigLoaderTest.load(config(good())));
        assertTrue(yaml.contains("  tls:\n    enabled: true\n    key_store: \"" + stores.keys() + "\"\n    key_store_password_env: "
                + KeyStores.PASSWORD_ENV + "\n"), yaml);
        assertTrue(yaml.contains("    # passwords given in the config are not written here\n"), yaml);
        assertFalse(yaml.contains(KeyStores.TRUST_PASSWORD) || yaml.contains(System.getenv(KeyStores.PASSWORD_ENV)), yaml);
        assertFalse(ConfigWriter.toYaml(ConfigLoaderTest.load(ConfigLoaderTest.TTML)).contains("tls:"), "nothing when TLS is off");
    }
}

package dev.ttpipe.actors.cluster;

import com.typesafe.config.Config;
import dev.ttpipe.actors.config.ConfigLoader;
import dev.ttpipe.actors.config.KeyStores;
import dev.ttpipe.actors.config.TtpipeConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** What a worker's Pekko is told: Artery over TCP, or over TLS with the config's stores and settings. */
class ClusterSettingsTest {
    static final String JOB = String.join("\n",
            "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 2, max_sequence_length: 16}",
            "multihost_config:",
            "  enabled: true",
            "  socket_type: aeron",
            "  pipeline_parallel_config: {num_blocks: 2, blocks_per_rank: {0: 1, 1: 1}, num_microbatches: 2}",
            "");

    @Test
    void withoutTlsArteryIsPlainTcp() {
        Deployment d = Deployment.of(ConfigLoader.read(JOB, "job.yaml", null));
        assertEquals(null, d.tls());
        assertEquals("tcp", ClusterSettings.config(d, 1).getString("pekko.remote.artery.transport"));
    }

    @Test
    void withTlsArteryIsTlsTcpWithTheConfigsStoresAndSettings(@TempDir Path dir) throws Exception {
        KeyStores s = KeyStores.make(dir, "job");
        TtpipeConfig cfg = ConfigLoader.read(JOB + String.join("\n",
                "  tls:",
                "    enabled: true",
                "    key_store: " + s.keys(),
                "    key_store_password_env: " + KeyStores.PASSWORD_ENV,
                "    trust_store: " + s.trust(),
                "    trust_store_password: " + KeyStores.TRUST_PASSWORD,
                "    protocol: TLSv1.2",
                "    require_mutual_authentication: false",
                "    hostname_verification: true",
                ""), "job.yaml", null);
        Deployment d = Deployment.of(cfg);
        Config c = ClusterSettings.config(d, 1);
        String e = "pekko.remote.artery.ssl.config-ssl-engine.";
        assertEquals("tls-tcp", c.getString("pekko.remote.artery.transport"));
        assertEquals("org.apache.pekko.remote.artery.tcp.ConfigSSLEngineProvider", c.getString("pekko.remote.artery.ssl.ssl-engine-provider"));
        assertEquals(s.keys().toString(), c.getString(e + "key-store"));
        assertEquals(System.getenv(KeyStores.PASSWORD_ENV), c.getString(e + "key-store-password"));
        assertEquals(System.getenv(KeyStores.PASSWORD_ENV), c.getString(e + "key-password"));
        assertEquals(s.trust().toString(), c.getString(e + "trust-store"));
        assertEquals(KeyStores.TRUST_PASSWORD, c.getString(e + "trust-store-password"));
        assertEquals("TLSv1.2", c.getString(e + "protocol"));
        assertEquals(cfg.multihost.tls.algorithms(), c.getStringList(e + "enabled-algorithms"));
        assertFalse(c.getBoolean(e + "require-mutual-authentication"));
        assertTrue(c.getBoolean(e + "hostname-verification"));
        assertEquals("127.0.0.1", c.getString("pekko.remote.artery.canonical.hostname"));
        assertEquals(25521, c.getInt("pekko.remote.artery.canonical.port"));
        assertFalse(d.tls().toString().contains(KeyStores.TRUST_PASSWORD), d.tls()::toString);
        assertEquals(List.of("pekko://ttpipe@127.0.0.1:25520"), c.getStringList("pekko.cluster.seed-nodes"));
    }
}

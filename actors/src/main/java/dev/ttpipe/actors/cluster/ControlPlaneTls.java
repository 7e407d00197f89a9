package dev.ttpipe.actors.cluster;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import com.typesafe.config.ConfigValueFactory;
import dev.ttpipe.actors.config.TtpipeConfig;

import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManagerFactory;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.SecureRandom;
import java.util.List;
import java.util.Map;

/**
 * The control plane's TLS as one worker process uses it: Pekko Artery's {@code tls-tcp} transport
 * with {@code ConfigSSLEngineProvider}, from {@code multihost_config.tls} (checked when the config
 * was loaded), the passwords read from the environment where the config names a variable. It can
 * also try a handshake itself, to say why a rank could not join. {@link #toString} names the files,
 * never a password. Immutable.
 */
public final class ControlPlaneTls {
    private static final String ENGINE = "pekko.remote.artery.ssl.config-ssl-engine.";

    private final String keyStore;
    private final String keyStorePassword;
    private final String keyPassword;
    private final String trustStore;
    private final String trustStorePassword;
    private final String protocol;
    private final List<String> algorithms;
    private final boolean mutual;
    private final boolean hostnameVerification;

    private ControlPlaneTls(TtpipeConfig.TlsConfig t) {
        this.keyStore = Path.of(t.keyStore).toAbsolutePath().toString();
        this.keyStorePassword = t.keyStorePassword();
        this.keyPassword = t.keyPassword();
        this.trustStore = Path.of(t.trustStore).toAbsolutePath().toString();
        this.trustStorePassword = t.trustStorePassword();
        this.protocol = t.protocol;
        this.algorithms = List.copyOf(t.algorithms());
        this.mutual = t.requireMutualAuthentication;
        this.hostnameVerification = t.hostnameVerification;
    }

    /** The job's control-plane TLS, or null when {@code multihost_config.tls} is not enabled. */
    public static ControlPlaneTls of(TtpipeConfig cfg) {
        return cfg.multihost.tls.enabled ? new ControlPlaneTls(cfg.multihost.tls) : null;
    }

    /** Pekko settings that put Artery on TLS with these stores (to be laid over the TCP settings). */
    Config pekkoConfig() {
        return ConfigFactory.parseMap(Map.of(
                "pekko.remote.artery.transport", "tls-tcp",
                "pekko.remote.artery.ssl.ssl-engine-provider", "org.apache.pekko.remote.artery.tcp.ConfigSSLEngineProvider",
                ENGINE + "key-store", keyStore,
                ENGINE + "key-store-password", keyStorePassword,
                ENGINE + "key-password", keyPassword,
                ENGINE + "trust-store", trustStore,
                ENGINE + "trust-store-password", trustStorePassword,
                ENGINE + "protocol", protocol,
                ENGINE + "require-mutual-authentication", mutual,
                ENGINE + "hostname-verification", hostnameVerification))
                .withValue(ENGINE + "enabled-algorithms", ConfigValueFactory.fromIterable(algorithms));
    }

    /**
     * Tries a TLS handshake with {@code host:port} as this rank's Artery would, and says why it fails
     * (which store or setting to look at), or null when it succeeds or the port does not answer at all.
     */
    String diagnose(String host, int port) {
        SSLContext context;
        try {
            context = SSLContext.getInstance(protocol);
            KeyManagerFactory keys = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            keys.init(load(keyStore, keyStorePassword), keyPassword.toCharArray());
            TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            trust.init(load(trustStore, trustStorePassword));
            context.init(keys.getKeyManagers(), trust.getTrustManagers(), new SecureRandom());
        } catch (GeneralSecurityException | IOException e) {
            return "this rank's stores cannot be used (" + e.getMessage() + ")";
        }
        try (SSLSocket s = (SSLSocket) context.getSocketFactory().createSocket()) {
            s.connect(new InetSocketAddress(host, port), 2_000);
            SSLParameters p = s.getSSLParameters();
            p.setProtocols(new String[]{protocol});
            p.setCipherSuites(algorithms.toArray(new String[0]));
            if (hostnameVerification) p.setEndpointIdentificationAlgorithm("HTTPS");
            s.setSSLParameters(p);
            s.setSoTimeout(2_000);
            s.startHandshake();
            s.setSoTimeout(500);      // under TLSv1.3 a rejected client certificate is told after the client's handshake ends
            s.getInputStream().read();
            return null;
        } catch (SocketTimeoutException e) {
            return null;              // accepted: the other side waits for Artery's first message
        } catch (SSLException e) {
            return explain(e, host);
        } catch (IOException e) {
            return null;              // nothing listening, or the connection reset: not a TLS problem to name
        }
    }

    private String explain(SSLException e, String host) {
        String m = String.valueOf(e.getMessage());
        if (m.contains("PKIX") || m.contains("certification path")) {
            return "its certificate is not trusted by this rank's multihost_config.tls.trust_store " + trustStore;
        }
        if (m.contains("subject alternative") || m.contains("No name matching")) {
            return "its certificate does not name the host " + host + " (hostname_verification is on: put the host in the"
                    + " certificate's subject alternative names)";
        }
        if (m.contains("certificate_unknown") || m.contains("bad_certificate") || m.contains("certificate_required")
                || m.contains("unsupported_certificate")) {
            return "it does not accept this rank's certificate (multihost_config.tls.key_store " + keyStore
                    + "): its trust_store lacks it or its CA (" + m + ")";
        }
        if (m.contains("protocol_version") || m.contains("handshake_failure") || m.contains("No appropriate protocol")) {
            return "no protocol or cipher suite in common with it (this rank speaks " + protocol + " with " + algorithms + ": " + m + ")";
        }
        return m;
    }

    private static KeyStore load(String path, String password) throws GeneralSecurityException, IOException {
        try (InputStream in = Files.newInputStream(Path.of(path))) {
            KeyStore ks = KeyStore.getInstance(KeyStore.getDefaultType());
            ks.load(in, password.toCharArray());
            return ks;
        }
    }

    /** {@code TLSv1.3, mutual authentication, key store /k.p12, trust store /t.p12}. */
    @Override
    public String toString() {
        return protocol + (mutual ? ", mutual authentication" : "") + (hostnameVerification ? ", hostname verification" : "")
                + ", key store " + keyStore + ", trust store " + trustStore;
    }
}

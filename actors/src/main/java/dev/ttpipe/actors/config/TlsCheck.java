package dev.ttpipe.actors.config;

import javax.net.ssl.SSLContext;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.UnrecoverableKeyException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

/**
 * Checks {@code multihost_config.tls} before any process starts: TLS only for a multi-process job,
 * each password given once (in the file or as an environment variable that is set), the key store
 * and trust store readable files that open with their passwords, the key store holding a private key
 * that opens with the key password, the trust store at least one certificate, and cipher suites this
 * JVM speaks for the protocol. Each problem is one line naming the key and the file; a password is
 * never printed.
 */
final class TlsCheck {
    private static final String TLS = "multihost_config.tls.";

    private TlsCheck() {
    }

    static void check(TtpipeConfig cfg, ConfigProblems p) {
        TtpipeConfig.TlsConfig t = cfg.multihost.tls;
        if (!t.enabled) return;
        if (!cfg.multihost.enabled) {
            p.add(TLS + "enabled", "true given with " + p.where("multihost_config.enabled") + ": false (TLS protects the"
                    + " connections between worker processes; a job in one process has none), expected multihost_config.enabled:"
                    + " true, or tls.enabled: false");
            return;
        }
        String keyStorePassword = password(t.keyStorePassword, t.keyStorePasswordEnv, "key_store_password", true, p);
        String keyPassword = password(t.keyPassword, t.keyPasswordEnv, "key_password", false, p);
        String trustStorePassword = password(t.trustStorePassword, t.trustStorePasswordEnv, "trust_store_password", true, p);
        KeyStore keys = open(t.keyStore, "key_store", keyStorePassword, "this rank's private key and certificate", p);
        if (keys != null) checkPrivateKey(keys, t.keyStore, keyPassword != null ? keyPassword : keyStorePassword, p);
        KeyStore trusted = open(t.trustStore, "trust_store", trustStorePassword, "the certificates (or their CA) of the other ranks", p);
        if (trusted != null) checkCertificates(trusted, t.trustStore, p);
        checkAlgorithms(t, p);
    }

    /**
     * The password given as {@code key} or {@code key_env}; null (and a problem, if {@code required}) when
     * neither is given, both are, or the variable is not set.
     */
    private static String password(String literal, String env, String key, boolean required, ConfigProblems p) {
        if (literal != null && env != null) {
            p.add(TLS + key, "given together with " + key + "_env, expected one of them (the password itself, or the name of"
                    + " an environment variable holding it)");
            return null;
        }
        if (env != null) {
            String value = System.getenv(env);
            if (value == null) {
                p.add(TLS + key + "_env", "'" + env + "' given, but no such environment variable is set in this process,"
                        + " expected the name of a variable holding the " + key.replace('_', ' '));
            }
            return value;
        }
        if (literal == null && required) {
            p.add("multihost_config.tls", "no " + key + " or " + key + "_env given, expected one of them (" + key + "_env: NAME"
                    + " reads it from the environment variable NAME, so that it need not be written in the config)");
        }
        return literal;
    }

    /** The store at {@code path}, opened as Pekko opens it; null (and a problem) when it cannot be. */
    private static KeyStore open(String path, String key, String password, String holding, ConfigProblems p) {
        String expected = "a PKCS12 or JKS file holding " + holding;
        if (path == null) {
            p.add("multihost_config.tls", "no " + key + " given, expected the path of " + expected);
            return null;
        }
        Path file = Path.of(path);
        if (!Files.isRegularFile(file)) {
            p.add(TLS + key, "'" + path + "' given: no such file, expected " + expected);
            return null;
        }
        if (!Files.isReadable(file)) {
            p.add(TLS + key, "'" + path + "' given: not readable by this user, expected " + expected);
            return null;
        }
        if (password == null) return null;                  // reported by password()
        try (InputStream in = Files.newInputStream(file)) {
            KeyStore ks = KeyStore.getInstance(KeyStore.getDefaultType()); // as Pekko's ConfigSSLEngineProvider loads it
            ks.load(in, password.toCharArray());
            return ks;
        } catch (IOException e) {
            if (e.getCause() instanceof UnrecoverableKeyException) {
                p.add(TLS + key + "_password", "does not open " + path + " (" + e.getMessage() + "), expected the password of "
                        + key + " " + path);
            } else {
                p.add(TLS + key, "'" + path + "' given: cannot be read as a key store (" + e.getMessage() + "), expected " + expected);
            }
        } catch (GeneralSecurityException e) {
            p.add(TLS + key, "'" + path + "' given: cannot be read as a key store (" + e + "), expected " + expected);
        }
        return null;
    }

    private static void checkPrivateKey(KeyStore ks, String path, String keyPassword, ConfigProblems p) {
        try {
            List<String> keys = new ArrayList<>();
            for (String alias : Collections.list(ks.aliases())) {
                if (ks.isKeyEntry(alias)) keys.add(alias);
            }
            if (keys.isEmpty()) {
                p.add(TLS + "key_store", "'" + path + "' holds no private key (" + ks.size() + " certificates), expected this"
                        + " rank's private key and certificate (keytool -genkeypair), the certificates go in trust_store");
                return;
            }
            for (String alias : keys) {
                try {
                    ks.getKey(alias, keyPassword == null ? new char[0] : keyPassword.toCharArray());
                } catch (UnrecoverableKeyException e) {
                    p.add(TLS + "key_password", "the private key '" + alias + "' in " + path + " does not open with the key"
                            + " password (key_password, else key_store_password), expected that key's password");
                    return;
                }
            }
        } catch (GeneralSecurityException e) {
            p.add(TLS + "key_store", "'" + path + "' given: " + e.getMessage() + ", expected a key store with a private key");
        }
    }

    private static void checkCertificates(KeyStore ks, String path, ConfigProblems p) {
        try {
            for (String alias : Collections.list(ks.aliases())) {
                if (ks.getCertificate(alias) != null) return;
            }
            p.add(TLS + "trust_store", "'" + path + "' holds no certificate, expected the certificates (or their CA) of the"
                    + " other ranks (keytool -importcert)");
        } catch (GeneralSecurityException e) {
            p.add(TLS + "trust_store", "'" + path + "' given: " + e.getMessage() + ", expected a key store with certificates");
        }
    }

    /** Cipher suites this JVM supports, of the protocol chosen (Pekko enables that one protocol alone). */
    private static void checkAlgorithms(TtpipeConfig.TlsConfig t, ConfigProblems p) {
        if (t.enabledAlgorithms.isEmpty()) return;
        Set<String> supported;
        try {
            supported = new TreeSet<>(Arrays.asList(SSLContext.getDefault().getSupportedSSLParameters().getCipherSuites()));
        } catch (GeneralSecurityException e) {
            return;                                          // no JSSE to ask: Pekko will say so when it starts
        }
        Set<String> ofProtocol = new TreeSet<>();
        for (String s : supported) if (isTls13Suite(s) == TtpipeConfig.TlsConfig.TLS13.equals(t.protocol)) ofProtocol.add(s);
        for (String a : t.enabledAlgorithms) {
            if (!ofProtocol.contains(a)) {
                p.add(TLS + "enabled_algorithms", "'" + a + "' given, expected cipher suites this JVM supports for " + t.protocol
                        + ", such as " + String.join(", ", t.protocol.equals(TtpipeConfig.TlsConfig.TLS13)
                        ? List.copyOf(ofProtocol) : TtpipeConfig.TlsConfig.defaultAlgorithms(TtpipeConfig.TlsConfig.TLS12)));
                return;
            }
        }
    }

    private static boolean isTls13Suite(String suite) {
        return suite.startsWith("TLS_AES_") || suite.startsWith("TLS_CHACHA20_");
    }
}
